package cell

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// CheckReport is what CheckDataDir or CheckBackup found: every finding in
// the order checked, problems among them.
type CheckReport struct {
	// Findings are the report's lines.
	Findings []Finding
}

// Finding is one line of a CheckReport.
type Finding struct {
	// Problem marks something wrong; other findings are facts.
	Problem bool
	// Text says what was found, for people.
	Text string
}

// OK reports whether no finding is a problem.
func (r *CheckReport) OK() bool { return len(r.Problems()) == 0 }

// Problems returns the texts of the findings that are problems.
func (r *CheckReport) Problems() []string {
	var out []string
	for _, f := range r.Findings {
		if f.Problem {
			out = append(out, f.Text)
		}
	}
	return out
}

// WriteTo prints the report, one finding per line ("ok" or "PROBLEM"),
// and a last line with the verdict.
func (r *CheckReport) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	for _, f := range r.Findings {
		tag := "ok      "
		if f.Problem {
			tag = "PROBLEM "
		}
		b.WriteString(tag + f.Text + "\n")
	}
	if n := len(r.Problems()); n > 0 {
		fmt.Fprintf(&b, "%d problem(s) found\n", n)
	} else {
		b.WriteString("no problems found\n")
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func (r *CheckReport) fact(format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Text: fmt.Sprintf(format, args...)})
}

func (r *CheckReport) problem(format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Problem: true, Text: fmt.Sprintf(format, args...)})
}

// CheckBackup verifies a backup file offline (ReadBackup) and reports
// what it holds. The error is the file system's; a damaged backup is a
// problem in the report.
func CheckBackup(path string) (*CheckReport, error) {
	r := &CheckReport{}
	info, _, err := ReadBackup(path)
	if errors.Is(err, ErrBadBackup) {
		r.problem("%s", err)
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	r.fact("backup of cell %q at slot %d, state checksum %s (recomputed from its records), taken %s by replica %d, format %d",
		info.Cell, info.Slot, info.Checksum, info.Taken.Format("2006-01-02T15:04:05Z"), info.Master, info.Format)
	return r, nil
}

// CheckDataDir verifies a replica's data directory offline, without
// changing it: the WAL (byte by byte, as a start does), that Pebble opens
// and reads every key cleanly, the member and restore records, the Paxos
// log (hard state, snapshot, every entry from the snapshot up to the chosen
// slot present and decodable, every command in them decodable), the
// namespace (its stored checksum recomputed from every record), and the
// guard record against the store. Each problem is a finding that says
// plainly what is wrong. The error is for a directory that cannot be
// checked at all: missing, unreadable, or in use by a running replica
// (ErrDataDirInUse).
func CheckDataDir(dir string) (rep *CheckReport, err error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	unlock, err := quietDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r := &CheckReport{}
	defer func() {
		// Pebble gives up on some damage with Fatalf; the check's logger
		// turns that into a panic of this type, and the check reports it.
		if p := recover(); p != nil {
			f, ok := p.(pebbleFatal)
			if !ok {
				panic(p)
			}
			r.problem("Pebble gave up on the store: %s", firstLine(string(f)))
			rep, err = r, nil
		}
	}()
	r.checkOurFiles(dir)
	damage, err := scanWALs(dir)
	switch {
	case err != nil:
		r.problem("the WAL cannot be read: %v", err)
	case damage != "":
		r.problem("the WAL is damaged (a start moves this store aside and rebuilds): %s", damage)
	default:
		r.fact("WAL scanned: no damaged record that a later sync vouches for")
	}
	if desc, err := pebble.Peek(dir, vfs.Default); err == nil && !desc.Exists {
		if _, err := os.Stat(filepath.Join(dir, newMemberFile)); err == nil {
			r.fact("no store yet and the new-member marker is present: a new member of a new cell that never started")
		} else {
			r.problem("no store and no new-member marker: the directory was wiped or replaced (the replica rebuilds from its peers at start)")
		}
		return r, nil
	}
	var corruption []string
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: checkPebbleLogger{},
		EventListener: &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
			corruption = append(corruption, info.Path)
		}}})
	if err != nil {
		r.problem("Pebble cannot open the store: %s", firstLine(err.Error()))
		return r, nil
	}
	defer db.Close()
	if err := readEverything(db); err != nil {
		r.problem("reading every key failed (a damaged table or log%s): %s", strings.Join(append([]string{""}, corruption...), " "), firstLine(err.Error()))
		return r, nil
	}
	r.fact("Pebble opened the store and read every key and value cleanly")
	empty, err := isEmpty(db)
	if err != nil {
		r.problem("reading the store: %v", err)
		return r, nil
	}
	if empty {
		if _, err := os.Stat(filepath.Join(dir, newMemberFile)); err == nil {
			r.fact("the store is empty and the new-member marker is present: a new member that never started")
		} else {
			r.problem("the store is empty and has no new-member marker: the directory was wiped or replaced (the replica rebuilds from its peers at start)")
		}
		return r, nil
	}
	replica := r.checkMember(db)
	r.checkLogAndState(db)
	if replica != 0 {
		r.checkGuard(dir, db, replica)
	}
	return r, nil
}

// quietDir makes sure no replica runs on dir, and keeps one from starting
// while the check runs (a shared flock on the pid file the replica locks
// exclusively).
func quietDir(dir string) (func(), error) {
	f, err := os.Open(filepath.Join(dir, pidFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(filepath.Join(dir, pidFileName))
			return nil, fmt.Errorf("%w: %s is used by process %s, which runs a replica on it; stop it before checking the directory offline", ErrDataDirInUse, dir, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	return func() { _ = f.Close() }, nil
}

// checkOurFiles reports the lockcell-* files that say something.
func (r *CheckReport) checkOurFiles(dir string) {
	if note, err := os.ReadFile(filepath.Join(dir, damagedNoteFile)); err == nil {
		r.problem("the replica met corruption while running and left a note (%s); its next start moves the store aside and rebuilds", strings.TrimSpace(string(note)))
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), damagedDirPrefix) && e.IsDir() {
			r.fact("a damaged store was moved aside to %s (kept for inspection; not used)", e.Name())
		}
	}
}

// checkMember reports the member and restore records; it returns the
// replica the store belongs to (0 if unknown).
func (r *CheckReport) checkMember(db *pebble.DB) uint64 {
	var replica uint64
	v, closer, err := db.Get(keyMember)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		r.fact("no member record (a store from before member records; the replica adds one at its next start)")
	case err != nil:
		r.problem("reading the member record: %v", err)
	default:
		var m memberRecord
		if err := json.Unmarshal(v, &m); err != nil || m.Version != 1 {
			r.problem("the member record %q does not decode", v)
		} else {
			replica = m.Replica
			r.fact("the store of replica %d of cell %q (member since %s)", m.Replica, m.Cell, m.Since)
		}
		closer.Close()
	}
	rec, err := readRestoreRecord(db)
	switch {
	case err != nil:
		r.problem("%v", err)
	case rec != nil:
		r.fact("restored %s from a backup of cell %q at slot %d (checksum %s); the new cell started at slot %d with checksum %s, %d session(s) ended, %d lock hold(s) released",
			rec.Restored.Format("2006-01-02T15:04:05Z"), rec.From.Cell, rec.From.Slot, rec.From.Checksum, rec.Slot, rec.Checksum, rec.Sessions, rec.LocksReleased)
	}
	return replica
}

// checkLogAndState checks the Paxos log and the namespace.
func (r *CheckReport) checkLogAndState(db *pebble.DB) {
	logdb, err := paxos.NewPebbleStorage(db)
	if err != nil {
		r.problem("the Paxos log does not open: %v", err)
		return
	}
	hs, err := logdb.InitialState()
	if err != nil {
		r.problem("the Paxos hard state does not read: %v", err)
		return
	}
	if hs.Rebuilding {
		r.fact("the replica was rebuilding from its peers when it stopped; it starts the rebuild over (it votes in nothing until done)")
	}
	snap, err := logdb.Snapshot()
	if err != nil {
		r.problem("the Paxos log's snapshot is damaged: %v", err)
		return
	}
	if !snap.IsEmpty() {
		dir, nsData, err := unwrapSnapshot(snap.Data)
		if err == nil && dir != nil {
			r.fact("the Paxos log's snapshot at slot %d carries the membership %s (chosen at slot %d)", snap.Slot, dir.Members.String(), dir.Members.Index)
		}
		var slot, sum uint64
		if err == nil {
			slot, sum, err = namespace.VerifySnapshot(bytes.NewReader(nsData))
		}
		switch {
		case err != nil:
			r.problem("the Paxos log's snapshot at slot %d does not verify: %v", snap.Slot, err)
		case slot != uint64(snap.Slot):
			r.problem("the Paxos log's snapshot is filed at slot %d but holds the state at slot %d", snap.Slot, slot)
		default:
			r.fact("the Paxos log's snapshot at slot %d verifies (state checksum %s)", snap.Slot, checksumHex(sum))
		}
	}
	last, err := logdb.LastSlot()
	if err != nil {
		r.problem("the Paxos log's last slot does not read: %v", err)
		return
	}
	chosen := max(hs.Chosen, snap.Slot)
	ents, err := logdb.Entries(snap.Slot+1, last+1)
	if err != nil {
		r.problem("the Paxos log's entries above slot %d do not read: %s", snap.Slot, firstLine(err.Error()))
		return
	}
	have := make(map[paxos.Slot]bool, len(ents))
	badCmds := 0
	for _, e := range ents {
		have[e.Slot] = true
		for i, c := range e.Value.Cmds {
			if _, err := namespace.DecodeCommand(c.Data); err != nil {
				badCmds++
				if badCmds <= 3 {
					r.problem("slot %d, command %d does not decode: %v", e.Slot, i, err)
				}
			}
		}
	}
	if badCmds > 3 {
		r.problem("... %d undecodable commands in all", badCmds)
	}
	var missing []string
	for s := snap.Slot + 1; s <= chosen; s++ {
		if !have[s] {
			missing = append(missing, fmt.Sprint(s))
		}
	}
	if len(missing) > 0 {
		shown := missing[:min(len(missing), 10)]
		r.problem("the Paxos log lacks %d chosen slot(s) between the snapshot (slot %d) and the chosen slot %d: %s (the replica cannot start on it)",
			len(missing), snap.Slot, chosen, strings.Join(shown, ", "))
	} else {
		r.fact("the Paxos log: snapshot at slot %d, %d entries up to slot %d, every slot up to the chosen slot %d present and decodable; promised ballot %s",
			snap.Slot, len(ents), last, chosen, hs.Promised)
	}
	ns, err := namespace.Open(db, namespace.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		r.problem("the namespace does not open: %v", err)
		return
	}
	applied := ns.AppliedSlot()
	if err := ns.VerifyChecksum(); err != nil {
		r.problem("the state checksum does not recompute at applied slot %d: %v (a record was changed, added or lost outside Paxos)", applied, err)
	} else {
		r.fact("the namespace at applied slot %d: state checksum %s, recomputed from every record", applied, checksumHex(ns.Checksum()))
	}
	if applied < uint64(snap.Slot) {
		r.fact("the namespace (slot %d) is behind the log's snapshot (slot %d); the replica installs the snapshot at start", applied, snap.Slot)
	}
	if applied > uint64(chosen) {
		r.problem("the namespace applied slot %d, beyond the log's chosen slot %d: it applied a slot the log does not know chosen", applied, chosen)
	}
}

// checkGuard compares the guard record with what the store holds.
func (r *CheckReport) checkGuard(dir string, db *pebble.DB, replica uint64) {
	g, err := readGuard(filepath.Join(dir, guardFileName), replica)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.problem("the guard record %s is missing, so the store cannot be checked for lost writes (the replica rebuilds at start)", guardFileName)
		return
	case err != nil:
		r.problem("%v (the replica rebuilds at start)", err)
		return
	}
	logdb, err := paxos.NewPebbleStorage(db)
	if err != nil {
		return // reported above
	}
	st := &store{logdb: logdb}
	have, err := st.state()
	if err != nil {
		return // reported above
	}
	if short := g.last.exceeds(have); short != "" {
		r.problem("the store lost acknowledged writes: %s (the replica rebuilds at start)", short)
		return
	}
	r.fact("the guard record (promised %s, last slot %d, chosen %d) is covered by the store", g.last.Promised, g.last.LastSlot, g.last.Chosen)
}

// pebbleFatal is what checkPebbleLogger panics with.
type pebbleFatal string

// checkPebbleLogger keeps Pebble quiet during a check and makes its Fatalf
// (which would end the process) a panic CheckDataDir recovers from.
type checkPebbleLogger struct{}

func (checkPebbleLogger) Infof(string, ...any)  {}
func (checkPebbleLogger) Errorf(string, ...any) {}
func (checkPebbleLogger) Fatalf(format string, args ...any) {
	panic(pebbleFatal(fmt.Sprintf(format, args...)))
}
