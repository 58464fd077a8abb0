package namespace

import "errors"

// Errors of the namespace package itself. Errors about a command's effect on
// the state (not found, permission denied, locked, ...) are *api.Error values
// inside Result or returned by reads, never these.
var (
	// ErrConfig: Open was given an invalid Config.
	ErrConfig = errors.New("namespace: invalid config")
	// ErrBadCommand: a command could not be encoded or decoded.
	ErrBadCommand = errors.New("namespace: bad command")
	// ErrAlreadyApplied: ApplySlot was given a slot at or below AppliedSlot;
	// nothing was changed. A replica replaying its log may ignore it.
	ErrAlreadyApplied = errors.New("namespace: slot already applied")
	// ErrSlotGap: ApplySlot was given a slot beyond AppliedSlot()+1; nothing
	// was changed.
	ErrSlotGap = errors.New("namespace: slot gap")
	// ErrCorrupt: the stored state is not what this package wrote (a record
	// does not decode, an index names a missing node). The replica must stop.
	ErrCorrupt = errors.New("namespace: stored state corrupt")
	// ErrFormat: Open found a store written in a format this build does not
	// read (the meta record names it). Nothing was changed.
	ErrFormat = errors.New("namespace: unsupported store format")
	// ErrStorage wraps a Pebble failure. The replica must stop.
	ErrStorage = errors.New("namespace: storage failure")
	// ErrFailed: an earlier storage failure stopped the Store; every later
	// ApplySlot and InstallSnapshot returns it.
	ErrFailed = errors.New("namespace: store failed earlier")
	// ErrBadSnapshot: InstallSnapshot was given a stream that is not a
	// complete, intact snapshot; the old state is kept.
	ErrBadSnapshot = errors.New("namespace: bad snapshot")
)
