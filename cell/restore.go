package cell

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// Restoring a backup builds the data directory of one replica of a NEW
// cell. The rules, and why (docs/operations.md, "Backup and restore"):
//
//   - The new cell has a new identity: Restore refuses a cell name equal to
//     the backup's. Every sequencer names its cell, so a protected server's
//     Validator (Cell set) and the restored cell's CheckSequencer refuse the
//     old cell's sequencers, and the two cells' locks never mix in a
//     Validator's memory (it keys locks by cell and path).
//   - Sessions are not restored. The first slot after the backup's
//     (namespace.Store.Restart) ends every session as if its owner had
//     closed it: its locks are released, without lock-delay, and its
//     ephemeral nodes deleted. An old client's session ID names nothing in
//     the new cell (SessionExpired), so no old holder believes it still
//     holds a lock there.
//   - Session IDs, node instances and lock generations continue 2^32 above
//     the backup's counters, above anything the old cell can have issued
//     after the backup was taken: a grant of the new cell never repeats an
//     old (cell-less) generation.
//   - Files, directories, contents, ACLs, tenants, quotas and tokens are
//     kept, and so is each node's instance and lock generation.
//   - Every replica of the new cell restores the same backup, so all start
//     with the same state at the same slot (the backup's slot + 1) and the
//     same checksum; the Paxos log starts empty above it, with a snapshot of
//     that state (so a replica that lags can be caught up from it) and no
//     promise: the new cell's first election starts from ballot zero.
//
// The directory gets the member record (this replica, the new cell), a
// guard record matching the store, and a restore record (keyRestore) that
// `lockcelld check` prints; it needs no new-member marker (it is not
// empty), and any marker `lockcelld init` left is removed.

// keyRestore is the restore record's key: the cell's prefix 'c', tag 'r'.
var keyRestore = []byte{'c', 'r'}

// ErrRestoreSameCell is returned (wrapped) by Restore when the new cell
// would keep the backup's cell identity.
var ErrRestoreSameCell = errors.New("cell: a restored cell needs a new identity")

// RestoreConfig says what to restore where.
type RestoreConfig struct {
	// From is the backup file (lockctl snapshot save).
	From string
	// DataDir is the new replica's data directory: missing, empty, or
	// holding only what `lockcelld init` left (the new-member marker).
	DataDir string
	// ID is the replica's ID in the new cell.
	ID uint64
	// Cell is the new cell's identity; it must differ from the backup's.
	Cell string
	// AdminPrincipal is the administrator principal (DefaultAdminPrincipal
	// if empty).
	AdminPrincipal string
	// Logger receives Pebble's warnings (discarded if nil).
	Logger *slog.Logger
}

// RestoreRecord is what a restored replica's store records about its
// origin; RestoreReport and `lockcelld check` show it.
type RestoreRecord struct {
	// From is the backup's header.
	From BackupInfo `json:"from"`
	// Slot and Checksum are the state the restored cell starts from (the
	// backup's slot + 1, after Restart).
	Slot     uint64 `json:"slot"`
	Checksum string `json:"checksum"`
	// Sessions, LocksReleased and EphemeralDeleted say what Restart ended.
	Sessions         int `json:"sessions"`
	LocksReleased    int `json:"locks_released"`
	EphemeralDeleted int `json:"ephemeral_deleted"`
	// NextSession, NextInstance and NextLockGen are the floors the new
	// cell's sequences continue above.
	NextSession  uint64 `json:"next_session"`
	NextInstance uint64 `json:"next_instance"`
	NextLockGen  uint64 `json:"next_lock_generation"`
	// Restored is when the directory was built.
	Restored time.Time `json:"restored"`
}

// Restore builds cfg.DataDir from the backup cfg.From, as the rules above
// say. It verifies the backup in full first, checks that the installed
// state recomputes to the backup's checksum, and writes nothing into a
// directory that holds a store. Errors wrap ErrBadBackup (the file),
// ErrRestoreSameCell, ErrDataDir or ErrDataDirInUse (the directory), or
// are storage failures.
func Restore(cfg RestoreConfig) (RestoreRecord, error) {
	var rec RestoreRecord
	if cfg.ID == 0 || cfg.Cell == "" || cfg.DataDir == "" {
		return rec, fmt.Errorf("%w: restore needs a replica ID, a cell name and a data directory", ErrInvalidConfig)
	}
	if cfg.AdminPrincipal == "" {
		cfg.AdminPrincipal = DefaultAdminPrincipal
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	info, body, err := ReadBackup(cfg.From)
	if err != nil {
		return rec, err
	}
	if info.Cell == cfg.Cell {
		return rec, fmt.Errorf("%w: the backup is of cell %q; give the restored cell another name (lockcelld init --cell NEW), so that the old cell's sequencers and clients cannot be taken for the new one's", ErrRestoreSameCell, info.Cell)
	}
	if err := CheckNewDataDir(cfg.DataDir); err != nil {
		return rec, err
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return rec, err
	}
	defer lock.release()
	before := recordDir(cfg.DataDir)
	rec, err = restoreInto(cfg, info, body)
	if err != nil {
		if uerr := before.undo(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up %s: %w", cfg.DataDir, uerr))
		}
		return rec, err
	}
	return rec, nil
}

func restoreInto(cfg RestoreConfig, info BackupInfo, body []byte) (RestoreRecord, error) {
	var rec RestoreRecord
	o := &storeOpener{
		cfg: Config{ID: cfg.ID, Cell: cfg.Cell, DataDir: cfg.DataDir},
		log: cfg.Logger,
		openNS: func(db *pebble.DB) (*namespace.Store, error) {
			return namespace.Open(db, namespace.Config{AdminPrincipal: cfg.AdminPrincipal, Logger: cfg.Logger, Sync: true})
		},
		corrupt: func(pebble.DataCorruptionInfo) {},
	}
	st, err := o.openPebble()
	if err != nil {
		return rec, err
	}
	defer st.close()
	if empty, err := isEmpty(st.db); err != nil || !empty {
		return rec, fmt.Errorf("%w: %s already holds a store (%v)", ErrDataDir, cfg.DataDir, err)
	}
	if err := st.ns.InstallSnapshot(bytes.NewReader(body)); err != nil {
		return rec, fmt.Errorf("%w: installing its state: %w", ErrBadBackup, err)
	}
	if err := st.ns.VerifyChecksum(); err != nil {
		return rec, fmt.Errorf("cell: restore: the installed state does not recompute: %w", err)
	}
	if got := checksumHex(st.ns.Checksum()); st.ns.AppliedSlot() != info.Slot || got != info.Checksum {
		return rec, fmt.Errorf("cell: restore: installed slot %d checksum %s, the backup says slot %d checksum %s", st.ns.AppliedSlot(), got, info.Slot, info.Checksum)
	}
	sum, err := st.ns.Restart(0)
	if err != nil {
		return rec, fmt.Errorf("cell: restore: starting the new cell's state: %w", err)
	}
	var snap bytes.Buffer
	slot, err := st.ns.Snapshot(&snap)
	if err != nil {
		return rec, fmt.Errorf("cell: restore: %w", err)
	}
	if err := st.logdb.SaveSnapshot(paxos.Snapshot{Slot: paxos.Slot(slot), Data: snap.Bytes()}); err != nil {
		return rec, fmt.Errorf("cell: restore: saving the Paxos snapshot: %w", err)
	}
	if err := st.logdb.Save(paxos.HardState{Chosen: paxos.Slot(slot)}, nil, true); err != nil {
		return rec, fmt.Errorf("cell: restore: saving the Paxos state: %w", err)
	}
	rec = RestoreRecord{From: info, Slot: slot, Checksum: checksumHex(sum.Checksum), Sessions: sum.Sessions,
		LocksReleased: sum.LocksReleased, EphemeralDeleted: sum.EphemeralDeleted,
		NextSession: sum.Session, NextInstance: sum.Instance, NextLockGen: sum.LockGen, Restored: time.Now().UTC()}
	b, _ := json.Marshal(rec)
	if err := st.db.Set(keyRestore, b, pebble.Sync); err != nil {
		return rec, fmt.Errorf("cell: restore: %w", err)
	}
	if err := o.ensureMember(st); err != nil {
		return rec, err
	}
	g, err := openGuard(filepath.Join(cfg.DataDir, guardFileName), cfg.ID)
	if err != nil {
		return rec, err
	}
	st.guard = g
	if err := st.recordGuard(true); err != nil {
		return rec, err
	}
	if err := removeSynced(filepath.Join(cfg.DataDir, newMemberFile)); err != nil {
		return rec, err
	}
	return rec, nil
}

// readRestoreRecord returns the store's restore record, if it has one.
func readRestoreRecord(db *pebble.DB) (*RestoreRecord, error) {
	v, closer, err := db.Get(keyRestore)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	var rec RestoreRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("restore record %q does not decode: %w", v, err)
	}
	return &rec, nil
}
