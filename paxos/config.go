package paxos

import (
	"fmt"
	"sort"
)

// Defaults, in ticks of the caller's clock. The cell ticks every 10 ms, so
// the master lease is 0.8 s, renewed every 200 ms, and a follower that hears
// nothing from the leader asks for a pre-vote 0.84–0.92 s after it last did
// and campaigns one round trip later.
//
// The arithmetic behind them, for a master killed at time K whose last
// renewal reached the acceptors at R (K−0.2 s ≤ R ≤ K):
//   - every acceptor's grant to it ends by R + 0.8 s × (1 + drift) on the
//     acceptor's clock, which is R + 0.808 s at the 1% drift bound;
//   - the first follower asks for a pre-vote at R + 0.84 s at the earliest
//     and R + 0.92 s at the latest (the jitter is a tenth of the wait), so
//     its ballot never meets a live grant;
//   - so the new master serves by R + 0.92 s plus a pre-vote, a prepare
//     round and the fail-over barrier's slot (an fsync each, milliseconds),
//     and the clients, which look for it from the moment the old one falls
//     silent, find it then: under 1 s after the kill. The leader's own view of its lease is
//     shortened by the drift bound (78 of its 80 ticks), and it renews every
//     20 ticks, so a leader loses its lease only after about 0.6 s in which
//     no renewal reached a majority (a stalled disk or process).
const (
	// DefaultLeaseTicks is the master lease length when Config.LeaseTicks is 0.
	DefaultLeaseTicks = 80
	// DefaultDriftPPM is the clock-rate drift bound when Config.DriftPPM is 0:
	// 1% (10 000 parts per million).
	DefaultDriftPPM = 10_000
	// DefaultMaxInflight is the Phase 2 window when Config.MaxInflight is 0.
	DefaultMaxInflight = 32
	// DefaultMaxBatch is the number of commands per slot when
	// Config.MaxBatch is 0.
	DefaultMaxBatch = 256
	// MaxDriftPPM is the largest accepted drift bound (50%).
	MaxDriftPPM = 500_000
	// MaxReplicas is the largest cell the core supports.
	MaxReplicas = 64
)

// Config configures a Node. The zero value of every field but ID, Replicas
// and Storage selects a documented default.
type Config struct {
	// ID is this replica's ID.
	ID ID
	// Replicas lists the voters of the cell's initial membership (1 to
	// MaxReplicas distinct IDs, none 0); every replica must use the same
	// list. A snapshot that carries a membership (Snapshot.Members) and the
	// membership changes in the log replace it. A replica not listed here
	// and not yet added by a membership change (a new replica) starts as a
	// non-member: it votes in nothing and learns the membership from the log
	// once the cell adds it as a learner (ConfAddLearner).
	Replicas []ID
	// LeaseTicks is the length of the master lease an acceptor grants, on the
	// acceptor's own clock. If zero, DefaultLeaseTicks (100). At least 4.
	LeaseTicks int
	// HeartbeatTicks is how often the leader renews its lease and
	// retransmits unacknowledged accepts. If zero, LeaseTicks/4. It must be
	// at least 1 and at most LeaseTicks/2 (renew well before expiry).
	HeartbeatTicks int
	// ElectionTicks is the least number of ticks a follower waits without
	// hearing from a leader before it asks for a pre-vote; the actual wait
	// is drawn from [ElectionTicks, ElectionTicks+ElectionJitterTicks]
	// using Seed. A follower that heard a leader within the last
	// ElectionTicks refuses others' pre-votes. If zero, LeaseTicks +
	// LeaseTicks/20. It must exceed HeartbeatTicks. A leader that holds no
	// lease for ElectionTicks steps down.
	ElectionTicks int
	// ElectionJitterTicks is the spread of the election wait (see
	// ElectionTicks); it keeps followers from campaigning in the same tick.
	// If zero, ElectionTicks/10; negative means none.
	ElectionJitterTicks int
	// DriftPPM bounds the relative difference of tick rates between any two
	// replicas, in parts per million: a replica's tick may last up to
	// (1+DriftPPM/1e6) times another's. The leader shortens its view of each
	// lease by this factor. If zero, DefaultDriftPPM (1%). At most MaxDriftPPM.
	DriftPPM uint32
	// MaxInflight is the number of slots the leader may have proposed but not
	// yet know chosen (the Phase 2 window). If zero, DefaultMaxInflight.
	MaxInflight int
	// MaxBatch is the most commands the leader packs into one slot. If zero,
	// DefaultMaxBatch. Proposals beyond 4*MaxInflight*MaxBatch waiting for a
	// slot are refused with ErrBusy.
	MaxBatch int
	// Seed seeds the election jitter. Give each replica a different seed.
	Seed uint64
	// Storage is the durable log the node restores from. Required.
	Storage Storage
	// Applied is the last slot the application has applied (its state on
	// restart); chosen values up to it are not handed out again. If it lies
	// below the stored snapshot, the first Ready hands out the snapshot.
	Applied Slot
	// Rebuild starts the node as a rebuilding learner. The caller sets it
	// when it finds that this replica lost or damaged durable state (a
	// wiped data directory, a log that lost acknowledged records, a store
	// moved aside): the node then votes in nothing until it has rebuilt, as
	// the package documentation describes. A node whose stored HardState
	// says Rebuilding resumes rebuilding whatever Rebuild says; a node that
	// never voted (a brand-new member) must not set it. The caller must
	// make the flag durable itself (Saver.Save of the stored HardState with
	// Rebuilding set, synced) before NewNode: otherwise a crash before the
	// node's first Ready is persisted would restart the replica as a voter
	// that has forgotten its votes.
	Rebuild bool
	// AsyncWrites lets the caller write the log off its event loop
	// (etcd-io/raft's asynchronous storage writes): Advance no longer
	// means that a Ready's HardState and Entries are persisted; the caller
	// reports each write carried out later, in order, with Persisted. The
	// node meanwhile holds back every message that depends on a write
	// still in flight (it hands it out in a later Ready, once the write is
	// durable), counts its own promise and accepts only once durable, and
	// hands out a chosen value to apply only once its own copy is durable.
	// If false, Advance implies the Ready was persisted, as the package
	// documentation's first list of duties says.
	AsyncWrites bool
}

// populate returns cfg with defaults filled in.
func (cfg Config) populate() Config {
	if cfg.LeaseTicks == 0 {
		cfg.LeaseTicks = DefaultLeaseTicks
	}
	if cfg.HeartbeatTicks == 0 {
		cfg.HeartbeatTicks = cfg.LeaseTicks / 4
	}
	if cfg.ElectionTicks == 0 {
		cfg.ElectionTicks = cfg.LeaseTicks + cfg.LeaseTicks/20
	}
	if cfg.ElectionJitterTicks == 0 {
		cfg.ElectionJitterTicks = cfg.ElectionTicks / 10
	} else if cfg.ElectionJitterTicks < 0 {
		cfg.ElectionJitterTicks = 0
	}
	if cfg.DriftPPM == 0 {
		cfg.DriftPPM = DefaultDriftPPM
	}
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	cfg.Replicas = append([]ID(nil), cfg.Replicas...)
	sort.Slice(cfg.Replicas, func(i, j int) bool { return cfg.Replicas[i] < cfg.Replicas[j] })
	return cfg
}

// validate rejects a populated Config that contradicts itself.
func (cfg Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if cfg.ID == 0 || cfg.ID > MaxID {
		return bad("ID %d out of range 1..%d", cfg.ID, MaxID)
	}
	if len(cfg.Replicas) == 0 || len(cfg.Replicas) > MaxReplicas {
		return bad("%d replicas, want 1..%d", len(cfg.Replicas), MaxReplicas)
	}
	for i, id := range cfg.Replicas {
		if id == 0 || id > MaxID {
			return bad("replica ID %d out of range 1..%d", id, MaxID)
		}
		if i > 0 && cfg.Replicas[i-1] == id {
			return bad("replica %d listed twice", id)
		}
	}
	if cfg.Storage == nil {
		return bad("Storage is nil")
	}
	if cfg.LeaseTicks < 4 {
		return bad("LeaseTicks %d < 4", cfg.LeaseTicks)
	}
	if cfg.HeartbeatTicks < 1 || 2*cfg.HeartbeatTicks > cfg.LeaseTicks {
		return bad("HeartbeatTicks %d must be in 1..LeaseTicks/2 (%d)", cfg.HeartbeatTicks, cfg.LeaseTicks/2)
	}
	if cfg.ElectionTicks <= cfg.HeartbeatTicks {
		return bad("ElectionTicks %d must exceed HeartbeatTicks %d", cfg.ElectionTicks, cfg.HeartbeatTicks)
	}
	if cfg.ElectionJitterTicks > cfg.ElectionTicks {
		return bad("ElectionJitterTicks %d exceeds ElectionTicks %d", cfg.ElectionJitterTicks, cfg.ElectionTicks)
	}
	if cfg.DriftPPM > MaxDriftPPM {
		return bad("DriftPPM %d > %d", cfg.DriftPPM, MaxDriftPPM)
	}
	if leaseEffective(cfg.LeaseTicks, cfg.DriftPPM) <= uint64(cfg.HeartbeatTicks) {
		return bad("the lease of %d ticks shortened by the drift bound is not longer than HeartbeatTicks %d", cfg.LeaseTicks, cfg.HeartbeatTicks)
	}
	if cfg.MaxInflight < 1 || cfg.MaxBatch < 1 {
		return bad("MaxInflight %d and MaxBatch %d must be positive", cfg.MaxInflight, cfg.MaxBatch)
	}
	if cfg.MaxInflight > 1<<16 || cfg.MaxBatch > 1<<20 {
		return bad("MaxInflight %d or MaxBatch %d too large", cfg.MaxInflight, cfg.MaxBatch)
	}
	return nil
}
