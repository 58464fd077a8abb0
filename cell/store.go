package cell

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// The replica's data directory, and the evidence that it lost state.
//
// A replica that lost or damaged its durable state must not vote until it
// has rebuilt (DESIGN.md invariant 8; paxos/doc.go, "Lost state"). Pebble
// does not say reliably that state was lost: an empty directory opens as an
// empty store, and a WAL that lost records may replay up to the damage and
// open anyway. So the replica keeps its own evidence. DataDir holds Pebble's
// files and, beside them, ours, all named lockcell-*:
//
//	lockcell-new-member        written by InitDataDir (`lockcelld init`) into
//	                           each data directory of a brand-new cell; the
//	                           replica's first start consumes it
//	lockcell-guard             the guard record (below)
//	lockcell-damaged           a note left by a replica that met corruption
//	                           while running; the next start moves the store
//	                           aside
//	lockcell-damaged-<time>/   a damaged store, moved aside for inspection
//
// and the store holds, under the cell's key prefix 'c' (keys.go in paxos
// lists the owners), a member record naming the replica and the cell.
//
// The rules, checked at every start before the node is made:
//
//   - An empty store is a new member only if the new-member marker is
//     present. The marker lives in the data directory itself, so wiping or
//     replacing the directory (or the disk) also removes it: the evidence of
//     a loss is the marker's absence, which no wipe can fake.
//   - Pebble is opened with WAL sync offsets (FormatWALSyncChunks): every
//     WAL chunk records how far the log was synced when it was written. A
//     log with a bad record followed by a chunk that vouches for a sync
//     past it is damaged; a bad tail that no later chunk vouches for is
//     writes torn by a crash before their sync, never acknowledged, and
//     normal. Before Pebble opens the store, every WAL is scanned for such
//     damage byte by byte (walscan.go; Pebble's own check looks only at
//     chunks that start a later block). A store with a damaged WAL, or that
//     Pebble, a full read of every key, or the Paxos log or namespace
//     decoders find corrupt, is moved aside and replaced by an empty one.
//   - The guard record, a small file kept apart from the store, holds lower
//     bounds on what the store must hold: the promised ballot, the highest
//     accepted slot and the chosen slot, as of the latest synced write. It is
//     rewritten (without fsync) after every synced write of the Paxos log and
//     fsynced when the promise changes, every second, and at Close, so the
//     hot path pays one small write and no extra fsync. A store behind its
//     guard lost acknowledged writes (a damaged log tail that no later chunk
//     vouches for). A store of a member whose guard is missing or unreadable
//     is not trusted either.
//   - A store whose hard state says Rebuilding resumes the rebuild.
//
// Any of these makes the replica rebuild (paxos.Config.Rebuild), with a
// loud log line, lockcell_state_losses_total{kind} and the reason on the
// status page. Before the node starts, the Rebuilding flag is made durable
// and the guard reset to what the store now holds, so a restart during the
// rebuild resumes it. Not detected: a disk that loses an acknowledged fsync
// at the very tail of the log and at the same time loses the guard's last
// unsynced writes (a power failure on a disk that lies about fsync), and a
// whole data directory restored from an old copy (guard included); the
// first is bounded to the last second of writes, the second needs evidence
// from the peers. See docs/operations.md.

// Files of ours in the data directory.
const (
	newMemberFile     = "lockcell-new-member"
	guardFileName     = "lockcell-guard"
	damagedNoteFile   = "lockcell-damaged"
	damagedDirPrefix  = "lockcell-damaged-"
	ourFilePrefix     = "lockcell-"
	guardSyncInterval = time.Second
)

// keyMember is the member record's key: the cell's key prefix 'c', tag 'm'.
var keyMember = []byte{'c', 'm'}

// Kinds of state loss, the label of lockcell_state_losses_total.
const (
	lossWiped       = "wiped"
	lossCorrupt     = "corrupt"
	lossBehindGuard = "behind-guard"
	lossNoGuard     = "guard-missing"
	lossBadGuard    = "guard-damaged"
	lossInterrupted = "rebuild-interrupted"
)

// ErrDataDir is returned (wrapped) by Start when the data directory
// belongs to another replica or cell, or cannot be read or written.
var ErrDataDir = errors.New("cell: data directory unusable")

// InitDataDir prepares dir as the data directory of a new member of a
// brand-new cell: it creates dir and writes the new-member marker, so that
// the replica's first start takes its empty store as new rather than lost.
// Use it only when creating a cell; a replica that replaces one of a
// running cell must start without the marker and rebuild from its peers.
// It fails if dir already holds a store.
func InitDataDir(dir string) error {
	if err := CheckNewDataDir(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	note := "This data directory belongs to a new member of a new lockcell cell.\n" +
		"The replica's first start consumes this file. Never recreate it by hand:\n" +
		"a replica without it and without state rebuilds from its peers, as it must.\n"
	return writeSynced(filepath.Join(dir, newMemberFile), []byte(note))
}

// CheckNewDataDir returns an error wrapping ErrDataDir if dir holds a
// store (InitDataDir would refuse it); a missing dir is fine.
func CheckNewDataDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ourFilePrefix) {
			return fmt.Errorf("%w: %s already holds a store (%s); a replica with state is no new member", ErrDataDir, dir, e.Name())
		}
	}
	return nil
}

// stateLoss describes why a replica rebuilds.
type stateLoss struct {
	Kind   string // one of the loss* kinds
	Detail string // what was found, for people
	// MovedAside is where a damaged store was moved, or "".
	MovedAside string
}

// store is a replica's opened store: the Pebble DB with the Paxos log and
// the namespace in it, the guard record, and, if the replica lost state,
// why.
type store struct {
	db    *pebble.DB
	logdb *paxos.PebbleStorage
	ns    *namespace.Store
	guard *guard
	loss  *stateLoss // nil unless the replica must rebuild
	// lossy is the file system of a replica run with UnsafeNoFsync (nil
	// otherwise).
	lossy *lossyFS
	// fresh: a new member's first start.
	fresh bool
	// armed: this is the store the replica runs on, so Pebble's reports of
	// corruption stop the replica (not those of a damaged store on its way
	// aside).
	armed atomic.Bool
}

// memberRecord is the value under keyMember.
type memberRecord struct {
	Version int    `json:"v"`
	Replica uint64 `json:"replica"`
	Cell    string `json:"cell"`
	Since   string `json:"since"`
}

// storeOpener opens the store of one replica.
type storeOpener struct {
	cfg Config
	log *slog.Logger
	// openNS opens the namespace in db.
	openNS func(db *pebble.DB) (*namespace.Store, error)
	// corrupt is called when Pebble reports corruption while running.
	corrupt func(pebble.DataCorruptionInfo)
}

// open opens the store under cfg.DataDir and decides whether the replica
// must rebuild, following the rules at the top of this file. A store found
// corrupt is moved aside once and replaced by an empty one.
func (o *storeOpener) open() (*store, error) {
	dir := o.cfg.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	var loss *stateLoss
	if note, err := os.ReadFile(filepath.Join(dir, damagedNoteFile)); err == nil {
		moved, err := o.moveAside()
		if err != nil {
			return nil, err
		}
		loss = &stateLoss{Kind: lossCorrupt, MovedAside: moved,
			Detail: "the store met corruption while running (" + strings.TrimSpace(string(note)) + ")"}
		if err := removeSynced(filepath.Join(dir, damagedNoteFile)); err != nil {
			return nil, err
		}
	}
	if loss == nil {
		damage, err := scanWALs(dir)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the WAL: %w", ErrDataDir, err)
		}
		if damage != "" {
			moved, err := o.moveAside()
			if err != nil {
				return nil, err
			}
			loss = &stateLoss{Kind: lossCorrupt, MovedAside: moved, Detail: "the log is damaged: " + damage}
		}
	}
	st, found, err := o.openAndClassify()
	if errors.Is(err, errCorruptStore) && loss == nil {
		moved, merr := o.moveAside()
		if merr != nil {
			return nil, merr
		}
		loss = &stateLoss{Kind: lossCorrupt, MovedAside: moved, Detail: "the store is corrupt: " + firstLine(err.Error())}
		st, found, err = o.openAndClassify()
	}
	if err != nil {
		return nil, err
	}
	if loss == nil {
		loss = found
	}
	ok := false
	defer func() {
		if !ok {
			st.close()
		}
	}()
	if loss != nil {
		// The flag first: from here a restart resumes the rebuild, whatever
		// happens to the evidence.
		if err := o.ensureMember(st); err != nil {
			return nil, err
		}
		hs, err := st.logdb.InitialState()
		if err != nil {
			return nil, err
		}
		hs.Rebuilding = true
		if err := st.logdb.Save(hs, nil, true); err != nil {
			return nil, fmt.Errorf("cell: recording the rebuild: %w", err)
		}
	}
	g, err := openGuard(filepath.Join(dir, guardFileName), o.cfg.ID)
	if err != nil {
		return nil, err
	}
	st.guard = g
	if err := st.recordGuard(true); err != nil {
		return nil, err
	}
	st.loss = loss
	st.armed.Store(true)
	ok = true
	return st, nil
}

// openAndClassify opens the store and classifies it. An error wrapping
// errCorruptStore means the store is damaged.
func (o *storeOpener) openAndClassify() (*store, *stateLoss, error) {
	st, err := o.openPebble()
	if err != nil {
		return nil, nil, err
	}
	loss, err := o.classify(st)
	if err != nil {
		st.close()
		return nil, nil, err
	}
	return st, loss, nil
}

// moveAside moves the store out of the way and forgets any new-member
// marker: what replaces a damaged store is never a new member's.
func (o *storeOpener) moveAside() (string, error) {
	moved, err := moveAside(o.cfg.DataDir)
	if err != nil {
		return "", err
	}
	return moved, removeSynced(filepath.Join(o.cfg.DataDir, newMemberFile))
}

// errCorruptStore marks an error that shows the store itself is damaged
// (corruptError carries it).
var errCorruptStore = errors.New("corrupt store")

// corruptError is an error found in a damaged store.
type corruptError struct{ err error }

func (e corruptError) Error() string        { return e.err.Error() }
func (e corruptError) Unwrap() error        { return e.err }
func (e corruptError) Is(target error) bool { return target == errCorruptStore }

// firstLine returns s up to its first line break (Pebble's corruption
// errors carry detail lines).
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// isCorruption reports whether err says stored data is damaged (rather than,
// say, a permission or I/O error).
func isCorruption(err error) bool {
	return pebble.IsCorruptionError(err) || errors.Is(err, paxos.ErrPebbleCorrupt) || errors.Is(err, namespace.ErrCorrupt)
}

// openPebble opens Pebble, reads every key once (so a damaged table is found
// now, not in the middle of serving), and opens the Paxos log and the
// namespace. An error wrapping errCorruptStore means the store is damaged.
func (o *storeOpener) openPebble() (*store, error) {
	st := &store{}
	opts := &pebble.Options{
		Logger:             quietPebbleLogger{o.log},
		FormatMajorVersion: pebble.FormatWALSyncChunks,
		EventListener: &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
			if st.armed.Load() {
				o.corrupt(info)
			}
		}},
	}
	if o.cfg.UnsafeNoFsync {
		st.lossy = newLossyFS(vfs.Default, lossyFlushEvery)
		opts.FS = st.lossy
	}
	if desc, err := pebble.Peek(o.cfg.DataDir, vfs.Default); err == nil && !desc.Exists {
		// A new store: Pebble creates its first WAL before it records the
		// format, so that WAL would lack sync offsets. Create the store,
		// close it, and open it again.
		db, err := pebble.Open(o.cfg.DataDir, opts)
		if err != nil {
			return nil, fmt.Errorf("cell: create store: %w", err)
		}
		if err := db.Close(); err != nil {
			return nil, fmt.Errorf("cell: create store: %w", err)
		}
	}
	db, err := pebble.Open(o.cfg.DataDir, opts)
	if err != nil {
		if isCorruption(err) {
			return nil, corruptError{fmt.Errorf("opening the store: %w", err)}
		}
		return nil, fmt.Errorf("cell: open store: %w", err)
	}
	st.db = db
	fail := func(what string, err error) (*store, error) {
		st.close()
		if isCorruption(err) {
			return nil, corruptError{fmt.Errorf("%s: %w", what, err)}
		}
		return nil, fmt.Errorf("cell: %s: %w", what, err)
	}
	if err := readEverything(db); err != nil {
		return fail("reading the store", err)
	}
	if st.logdb, err = paxos.NewPebbleStorage(db); err != nil {
		return fail("paxos log", err)
	}
	if st.ns, err = o.openNS(db); err != nil {
		return fail("namespace", err)
	}
	return st, nil
}

// readEverything reads every key and value of db, which checks the
// checksum of every block that holds live data.
func readEverything(db *pebble.DB) error {
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// classify decides whether an opened, undamaged store is a new member's,
// a member's in good standing, or one that lost state.
func (o *storeOpener) classify(st *store) (*stateLoss, error) {
	dir := o.cfg.DataDir
	empty, err := isEmpty(st.db)
	if err != nil {
		return nil, err
	}
	_, markerErr := os.Stat(filepath.Join(dir, newMemberFile))
	marker := markerErr == nil
	if empty {
		if !marker {
			return &stateLoss{Kind: lossWiped, Detail: "the data directory holds no state and no new-member marker: it was wiped or replaced"}, nil
		}
		if err := o.ensureMember(st); err != nil {
			return nil, err
		}
		st.fresh = true
		return nil, removeSynced(filepath.Join(dir, newMemberFile))
	}
	if marker {
		// A member whose first start consumed the store but not yet the
		// marker (it stopped in between): the marker means nothing now.
		if err := removeSynced(filepath.Join(dir, newMemberFile)); err != nil {
			return nil, err
		}
	}
	member, err := o.checkMember(st)
	if err != nil {
		return nil, err
	}
	hs, err := st.logdb.InitialState()
	if err != nil {
		return nil, err
	}
	if hs.Rebuilding {
		return &stateLoss{Kind: lossInterrupted, Detail: "a rebuild was under way when the replica stopped; it starts over"}, nil
	}
	g, err := readGuard(filepath.Join(dir, guardFileName), o.cfg.ID)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !member:
		// A store from before guards: trust it, as before, and guard it
		// from now on.
		o.log.Info("store has no member record or guard yet; adding them", "dir", dir)
		return nil, o.ensureMember(st)
	case errors.Is(err, fs.ErrNotExist):
		return &stateLoss{Kind: lossNoGuard, Detail: "the guard record " + guardFileName + " is missing, so the store cannot be checked for lost writes"}, nil
	case errors.Is(err, errBadGuard):
		return &stateLoss{Kind: lossBadGuard, Detail: err.Error()}, nil
	case err != nil:
		return nil, err
	}
	have, err := st.state()
	if err != nil {
		return nil, err
	}
	if o.cfg.UnsafeNoFsync {
		// NB: the knob models a power failure on a disk that lies about
		// fsync, which loses the guard's last writes too (store.go's
		// first comment: not detected). Nothing is compared.
		o.log.Warn("unsafe_no_fsync: the store is not checked against its guard", "dir", dir)
		return nil, o.ensureMember(st)
	}
	if short := g.last.exceeds(have); short != "" {
		return &stateLoss{Kind: lossBehindGuard, Detail: "the store lost acknowledged writes: " + short}, nil
	}
	if !member {
		return nil, o.ensureMember(st)
	}
	return nil, nil
}

// isEmpty reports whether db holds no key at all.
func isEmpty(db *pebble.DB) (bool, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return false, err
	}
	any := it.First()
	if err := it.Close(); err != nil {
		return false, err
	}
	return !any, nil
}

// checkMember reads the member record: it reports whether there is one and
// fails if it names another replica or cell.
func (o *storeOpener) checkMember(st *store) (bool, error) {
	v, closer, err := st.db.Get(keyMember)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	var m memberRecord
	if err := json.Unmarshal(v, &m); err != nil || m.Version != 1 {
		return false, corruptError{fmt.Errorf("member record %q does not decode", v)}
	}
	if m.Replica != o.cfg.ID || m.Cell != o.cfg.Cell {
		return false, fmt.Errorf("%w: %s holds the store of replica %d of cell %q, not of replica %d of cell %q", ErrDataDir, o.cfg.DataDir, m.Replica, m.Cell, o.cfg.ID, o.cfg.Cell)
	}
	return true, nil
}

// ensureMember writes the member record if it is missing (synced).
func (o *storeOpener) ensureMember(st *store) error {
	if ok, err := o.checkMember(st); err != nil || ok {
		return err
	}
	b, _ := json.Marshal(memberRecord{Version: 1, Replica: o.cfg.ID, Cell: o.cfg.Cell, Since: time.Now().UTC().Format(time.RFC3339)})
	return st.db.Set(keyMember, b, pebble.Sync)
}

// close closes whatever of the store is open.
func (st *store) close() {
	if st.guard != nil {
		st.guard.close()
	}
	if st.db != nil {
		_ = st.db.Close()
	}
	if st.lossy != nil {
		st.lossy.close()
	}
}

// guardState is what the guard records: lower bounds on the durable store.
type guardState struct {
	Promised paxos.Ballot
	LastSlot paxos.Slot
	Chosen   paxos.Slot
}

// exceeds says how g is ahead of have, or "" if it is not.
func (g guardState) exceeds(have guardState) string {
	var parts []string
	if g.Promised > have.Promised {
		parts = append(parts, fmt.Sprintf("it promised ballot %s, the store holds %s", g.Promised, have.Promised))
	}
	if g.LastSlot > have.LastSlot {
		parts = append(parts, fmt.Sprintf("it accepted up to slot %d, the store holds up to %d", g.LastSlot, have.LastSlot))
	}
	if g.Chosen > have.Chosen {
		parts = append(parts, fmt.Sprintf("it knew slot %d chosen, the store up to %d", g.Chosen, have.Chosen))
	}
	return strings.Join(parts, "; ")
}

// state returns what the store durably holds, as the guard measures it.
func (st *store) state() (guardState, error) {
	hs, err := st.logdb.InitialState()
	if err != nil {
		return guardState{}, err
	}
	last, err := st.logdb.LastSlot()
	if err != nil {
		return guardState{}, err
	}
	return guardState{Promised: hs.Promised, LastSlot: last, Chosen: hs.Chosen}, nil
}

// recordGuard writes the store's durable state to the guard, fsyncing it if
// sync. REQUIRES: every write to the Paxos log so far is durable.
func (st *store) recordGuard(sync bool) error {
	s, err := st.state()
	if err != nil {
		return err
	}
	return st.guard.record(s, sync)
}

// The guard file: two 64-byte slots, written alternately, each
//
//	"LCGUARD1" seq:8 replica:8 promised:8 lastSlot:8 chosen:8 zero:12 crc:4
//
// (big-endian; crc is CRC-32C of the 60 bytes before it). The valid slot
// with the higher seq holds the record, so a torn write leaves the other.
const (
	guardSlotLen = 64
	guardMagic   = "LCGUARD1"
)

var errBadGuard = errors.New("the guard record " + guardFileName + " is damaged")

var guardCRC = crc32.MakeTable(crc32.Castagnoli)

// guard is the open guard file. Its methods are safe for concurrent use:
// the run loop records, a timer syncs, Close does both.
type guard struct {
	mu      sync.Mutex
	f       *os.File
	replica uint64
	seq     uint64
	last    guardState
	dirty   bool  // written since the last fsync
	err     error // sticky write or fsync error
}

// readGuard reads the guard file at path, returning an error wrapping
// fs.ErrNotExist if there is none and errBadGuard if no slot is valid.
func readGuard(path string, replica uint64) (*guard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	g := &guard{replica: replica}
	found := false
	for off := 0; off+guardSlotLen <= len(b); off += guardSlotLen {
		s := b[off : off+guardSlotLen]
		if string(s[:8]) != guardMagic || crc32.Checksum(s[:60], guardCRC) != binary.BigEndian.Uint32(s[60:]) {
			continue
		}
		seq := binary.BigEndian.Uint64(s[8:])
		if found && seq <= g.seq {
			continue
		}
		if id := binary.BigEndian.Uint64(s[16:]); id != replica {
			return nil, fmt.Errorf("%w: %s is replica %d's guard, this is replica %d", ErrDataDir, path, id, replica)
		}
		found = true
		g.seq = seq
		g.last = guardState{
			Promised: paxos.Ballot(binary.BigEndian.Uint64(s[24:])),
			LastSlot: paxos.Slot(binary.BigEndian.Uint64(s[32:])),
			Chosen:   paxos.Slot(binary.BigEndian.Uint64(s[40:])),
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no valid record in its %d bytes", errBadGuard, len(b))
	}
	return g, nil
}

// openGuard opens (creating) the guard file for writing.
func openGuard(path string, replica uint64) (*guard, error) {
	seq := uint64(0)
	if g, err := readGuard(path, replica); err == nil {
		seq = g.seq
	} else if errors.Is(err, ErrDataDir) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: guard: %w", ErrDataDir, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &guard{f: f, replica: replica, seq: seq}, nil
}

// record writes s (if it differs from the last record) and fsyncs if sync
// (or if the promise changed).
func (g *guard) record(s guardState, sync bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	if s != g.last || g.seq == 0 {
		sync = sync || s.Promised != g.last.Promised
		g.seq++
		var b [guardSlotLen]byte
		copy(b[:], guardMagic)
		binary.BigEndian.PutUint64(b[8:], g.seq)
		binary.BigEndian.PutUint64(b[16:], g.replica)
		binary.BigEndian.PutUint64(b[24:], uint64(s.Promised))
		binary.BigEndian.PutUint64(b[32:], uint64(s.LastSlot))
		binary.BigEndian.PutUint64(b[40:], uint64(s.Chosen))
		binary.BigEndian.PutUint32(b[60:], crc32.Checksum(b[:60], guardCRC))
		if _, err := g.f.WriteAt(b[:], int64(g.seq%2)*guardSlotLen); err != nil {
			g.err = fmt.Errorf("writing the guard record: %w", err)
			return g.err
		}
		g.last = s
		g.dirty = true
	}
	if sync && g.dirty {
		return g.syncLocked()
	}
	return nil
}

// sync fsyncs what was written since the last fsync. It does not hold the
// lock during the fsync, so the run loop's writes never wait for it.
func (g *guard) sync() error {
	g.mu.Lock()
	if g.err != nil || !g.dirty || g.f == nil {
		err := g.err
		g.mu.Unlock()
		return err
	}
	f := g.f
	g.dirty = false // a write during the fsync sets it again
	g.mu.Unlock()
	if err := f.Sync(); err != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.err == nil {
			g.err = fmt.Errorf("syncing the guard record: %w", err)
		}
		return g.err
	}
	return nil
}

// REQUIRES: g.mu held.
func (g *guard) syncLocked() error {
	if err := g.f.Sync(); err != nil {
		g.err = fmt.Errorf("syncing the guard record: %w", err)
		return g.err
	}
	g.dirty = false
	return nil
}

func (g *guard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.f != nil {
		_ = g.f.Close()
		g.f = nil
	}
}

// moveAside moves every file of the store in dir (everything not named
// lockcell-*) into a new lockcell-damaged-<time> directory and returns its
// path.
func moveAside(dir string) (string, error) {
	dst := filepath.Join(dir, damagedDirPrefix+time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Mkdir(dst, 0o700); err != nil {
		return "", fmt.Errorf("%w: moving the damaged store aside: %w", ErrDataDir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("%w: moving the damaged store aside: %w", ErrDataDir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ourFilePrefix) {
			continue
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return "", fmt.Errorf("%w: moving the damaged store aside: %w", ErrDataDir, err)
		}
	}
	if err := syncDir(dst); err != nil {
		return "", err
	}
	return dst, syncDir(dir)
}

// noteCorruption leaves the note that makes the next start move the store
// aside.
func noteCorruption(dir string, cause error) error {
	return writeSynced(filepath.Join(dir, damagedNoteFile), []byte(time.Now().UTC().Format(time.RFC3339)+": "+cause.Error()+"\n"))
}

// writeSynced writes a small file durably (file and directory fsynced).
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	return syncDir(filepath.Dir(path))
}

// removeSynced removes a file durably.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	return syncDir(filepath.Dir(path))
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: syncing %s: %w", ErrDataDir, dir, err)
	}
	return nil
}
