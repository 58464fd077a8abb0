package sequencer

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
)

// Validation errors. A rejection wraps one of them (and says why); compare
// with errors.Is.
var (
	// ErrStale: a newer grant of the same lock has been seen (Kleppmann's
	// fencing rule), or the cell says the grant is no longer held.
	ErrStale = errors.New("sequencer: stale")
	// ErrConflict: a grant of the same lock at the same generation but on a
	// different node instance or in a different mode has been seen. No cell
	// issues two such grants, so one of them is forged or from another cell.
	ErrConflict = errors.New("sequencer: conflicts with a grant already seen")
	// ErrForged: the signature is missing or does not verify under the
	// cell's public key, or the sequencer names another cell.
	ErrForged = errors.New("sequencer: not issued by this cell")
	// ErrUnconfirmed: the cell could not be asked whether the sequencer is
	// current (the Checker failed).
	ErrUnconfirmed = errors.New("sequencer: could not confirm with the cell")
)

// Checker asks the cell whether a sequencer is still current (the lock is
// held in its mode at its generation on its node instance). A
// client.Session implements it.
type Checker interface {
	CheckSequencer(ctx context.Context, s Sequencer) (valid bool, reason string, err error)
}

// ValidatorConfig configures a Validator.
type ValidatorConfig struct {
	// PublicKey is the cell's sequencer-signing key. If set, every
	// sequencer must carry a valid signature under it; if nil, signatures
	// are not checked (only for tests and trusted networks).
	PublicKey ed25519.PublicKey
	// Cell, if not empty, is the only cell whose sequencers are accepted.
	Cell string
	// Checker, if set, confirms every sequencer with the cell before the
	// operation runs. It closes the gap that local checks leave: a grant
	// whose holder lost the lock before any newer grant reached this
	// server. It costs a round trip to the cell per operation.
	Checker Checker
}

// Validator is the check a protected server runs on every request that
// carries a sequencer (Chubby §2.4, Kleppmann's fencing tokens). For each
// lock it keeps the newest grant it has seen, and it rejects older grants.
// Do runs the caller's operation while holding that lock's entry, so no
// newer grant's operation can run in between the check and the operation:
// "check, then act" is atomic per lock.
//
// Two grants of one lock at the same generation are the same grant (shared
// holders share it) only if they agree on the node instance and mode;
// otherwise the later one is rejected as a conflict.
//
// A Validator is safe for concurrent use. Its memory grows with the number
// of distinct locks it has seen.
type Validator struct {
	cfg ValidatorConfig

	mu    sync.Mutex
	locks map[lockKey]*lockEntry
}

type lockKey struct{ cell, path string }

type lockEntry struct {
	// mu is held across a check and the caller's operation.
	mu       sync.Mutex
	seen     bool
	gen      uint64
	instance uint64
	mode     Mode
}

// NewValidator returns a Validator. A PublicKey of the wrong size is an
// error wrapping ErrInvalid.
func NewValidator(cfg ValidatorConfig) (*Validator, error) {
	if cfg.PublicKey != nil && len(cfg.PublicKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: public key has %d bytes, want %d", ErrInvalid, len(cfg.PublicKey), ed25519.PublicKeySize)
	}
	return &Validator{cfg: cfg, locks: map[lockKey]*lockEntry{}}, nil
}

func (v *Validator) entry(s Sequencer) *lockEntry {
	k := lockKey{s.Cell, s.Path}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.locks[k]
	if e == nil {
		e = &lockEntry{}
		v.locks[k] = e
	}
	return e
}

// authentic runs the checks that need no state: well-formed, right cell,
// signed by it.
func (v *Validator) authentic(s Sequencer) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if v.cfg.Cell != "" && s.Cell != v.cfg.Cell {
		return fmt.Errorf("%w: it names cell %q, not %q", ErrForged, s.Cell, v.cfg.Cell)
	}
	if v.cfg.PublicKey != nil {
		if len(s.Signature) == 0 {
			return fmt.Errorf("%w: it is unsigned", ErrForged)
		}
		if !s.Verify(v.cfg.PublicKey) {
			return fmt.Errorf("%w: its signature does not verify", ErrForged)
		}
	}
	return nil
}

// checkLocked applies the fencing rule against the newest grant seen.
// REQUIRES: e.mu held.
func (e *lockEntry) checkLocked(s Sequencer) error {
	if !e.seen {
		return nil
	}
	switch {
	case s.Generation < e.gen:
		return fmt.Errorf("%w: %s generation %d is older than generation %d already seen", ErrStale, s.Path, s.Generation, e.gen)
	case s.Generation == e.gen && (s.Instance != e.instance || s.Mode != e.mode):
		return fmt.Errorf("%w: %s generation %d: instance %d %s, but instance %d %s was seen", ErrConflict, s.Path, s.Generation, s.Instance, s.Mode, e.instance, e.mode)
	}
	return nil
}

// Check validates s and records it as seen, without running an
// operation. Prefer Do, which makes the check and the operation atomic.
func (v *Validator) Check(ctx context.Context, s Sequencer) error {
	return v.Do(ctx, s, func() error { return nil })
}

// Do validates s and, if it is acceptable, records it as the newest grant
// of its lock and runs op while no other operation under the same lock can
// be validated. It returns the rejection (wrapping ErrMalformed, ErrForged,
// ErrStale, ErrConflict or ErrUnconfirmed) without running op, or op's
// error. A sequencer that passed the checks is recorded even if op fails:
// it was a genuine, current grant.
func (v *Validator) Do(ctx context.Context, s Sequencer, op func() error) error {
	if err := v.authentic(s); err != nil {
		return err
	}
	e := v.entry(s)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.checkLocked(s); err != nil {
		return err
	}
	if v.cfg.Checker != nil {
		ok, reason, err := v.cfg.Checker.CheckSequencer(ctx, s)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnconfirmed, err)
		}
		if !ok {
			if reason == "" {
				reason = "the cell says it is not current"
			}
			return fmt.Errorf("%w: %s", ErrStale, reason)
		}
	}
	e.seen, e.gen, e.instance, e.mode = true, s.Generation, s.Instance, s.Mode
	return op()
}

// Highest returns the newest generation seen for the lock path of cell, and
// whether any was seen.
func (v *Validator) Highest(cell, path string) (uint64, bool) {
	v.mu.Lock()
	e := v.locks[lockKey{cell, path}]
	v.mu.Unlock()
	if e == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen, e.seen
}
