// Package cell wires one lockcell replica together: its Pebble store (the
// Paxos log and the namespace share one DB under separate key prefixes),
// the run loop around the pure Paxos core, the QUIC endpoint, and — while
// the replica holds the master lease — the master role that serves
// clients.
//
// # The run loop
//
// One goroutine (Replica.run) owns the paxos.Node. It ticks the node from a
// ticker (Config.Tick), steps it with peer messages from the transport,
// hands it commands from the one propose pipeline (pipeline.go: every
// command is routed once, stamped once, proposed once under the master
// lease, and answered exactly once), and carries out each Ready in the
// order paxos/doc.go prescribes for a core that writes asynchronously,
// written in one function (Replica.execute): the hard state and accepted
// entries go to the log writer (logwriter.go), the messages leave (the
// core holds back the answers that depend on a write in flight), a
// snapshot is installed once every earlier write is carried out, chosen
// slots are applied to the namespace in order (one Pebble batch per slot;
// the core hands out a slot only once this replica's own copy is durable),
// proposal outcomes are delivered, and the node advances. The log writer
// saves the writes in order, those that queued during the previous fsync
// in one synced Pebble batch, and tells the loop, which tells the core
// (Node.Persisted): only then does the core count its own votes and
// release the answers that waited for them. A storage
// error stops the replica (Done, Err); it never continues on a guess. Every
// SnapshotEvery applied slots the namespace is snapshotted into the Paxos
// log's store and the log below it is dropped; lagging peers get the
// snapshot and then the tail.
//
// # Lost state
//
// A replica that starts without (some of) its durable state — a wiped or
// replaced data directory, a WAL that lost acknowledged records, a damaged
// table — must not vote until it has rebuilt (DESIGN.md invariant 8).
// store.go keeps the evidence (a new-member marker, a guard record beside
// the store, a WAL scan, a full read at start) and moves a damaged store
// aside instead of failing every start; the replica then starts its Paxos
// node as a rebuilding learner (paxos/doc.go, "Lost state"). Status,
// /status, the status page, lockctl status and the lockcell_rebuilding and
// lockcell_state_losses_total metrics show it. See docs/operations.md.
//
// # The master
//
// Only the replica whose paxos.Status reports Master serves client
// requests; the others answer NotMaster with the master's address. The
// master epoch is its ballot; requests naming another epoch get Failover.
// Writes are proposed through Paxos and answered once applied (concurrent
// commands share slots: group commit); reads are served from the applied
// state under the master lease. The master role (master.go) holds what
// lives only in the master's memory: session leases and KeepAlive
// long-polls (package session), session owners and token bindings
// (owners.go), the FIFO queues of blocked Acquire calls (lockqueue.go),
// event subscriptions (events.go), and which sessions cache which nodes
// (cachereg.go); each of those is its own type, tested without a replica,
// and master.go only composes them. A new master
// rebuilds sessions from the applied state and extends their leases
// (Chubby §2.9); clients re-establish handles on their next call, since
// handles are self-describing.
//
// # Time
//
// Every command carries the cell's time, stamped by the master (clock.go);
// the namespace uses no other (creation and modification stamps,
// lock-delay) and applies each command at max(its stamp, the state's
// clock). The master's rule: a stamp is never below the state's clock nor
// below its own previous stamp, so time never goes backwards across masters
// (DESIGN.md invariant 9); while a lock-delay may be running — the state's
// clock has not reached the latest lock-delay end, or an ExpireSession this
// master stamped is not yet applied — the time advances exactly as the
// master's monotonic clock does (from when it became master, for its first
// stamp), whatever its wall clock says; otherwise it is the master's wall
// clock, held still while that is behind. So no replica's wall clock, minutes
// ahead or behind, can cut a lock-delay short or stretch it: a lock-delay
// of d lasts d of real time as the masters' monotonic clocks measure it.
// Stamps therefore track the wall clock only between lock-delays; they may
// run ahead of a lagging master's clock, or behind a fail-over gap, until
// the next stretch with no lock-delay running.
//
// # Tenancy
//
// One cell serves many tenants, and none may see, touch, slow down or
// starve another. Every call is authenticated (auth.go: a client
// certificate, or a tenant token stored only as a hash in the replicated
// state and revocable), then rate-limited per tenant, then authorized by
// the namespace's ACL rules — also on the secondary paths: event
// subscriptions and deliveries and cache registrations and invalidations go
// only to sessions whose principal may read the node (checked when
// subscribing or registering and again when publishing or invalidating, as
// an ACL or an ACL file may change in between), CellStatus shows the
// cell's progress only to the administrator, and metric labels carry only
// verified tenants. Quotas that bound state are enforced in the namespace,
// so they hold across fail-over; those that bound the master's memory and
// time (ops per second, the KeepAlive budget, blocked Acquire calls,
// concurrent reads) are enforced at the master from the replicated limits
// (limits.go). Tenant commands reach Paxos through a weighted fair
// scheduler (fair.go), which sheds a flooding tenant's excess with
// ResourceExhausted and a RetryAfter instead of letting it fill the
// pipeline. The HTTP listener (/metrics, /healthz, /readyz, /status, the
// status page) is for operators: it names tenants in metric labels,
// nothing else of theirs. /healthz is liveness (the run loop runs); /readyz
// is readiness (master, or hearing a serving master and caught up within
// ReadyMaxLag), from the progress reports replicas send their peers every
// progressInterval while they change and every progressIdleInterval while
// they do not (progress.go), which also give every replica's status the
// progress of all of them.
//
// Start holds the data directory with a flock on its lockcell-pid file
// (ErrDataDirInUse names the holder), refuses a certificate that is not
// this replica's (ErrWrongCertificate), and a start that fails removes
// what it created (datadir.go).
//
// # Parts and wiring
//
// Beside the run loop, the replica's work is done by parts that never hold
// the *Replica: each takes the narrow dependencies it needs, as functions
// or small interfaces, and is built and tested alone. They are the RPC
// handlers (handlerDeps, rpc.go: one file per family, rpc_*.go, the
// KeepAlive stream in kastream.go), the membership (membership.go), the
// propose pipeline (pipeline.go), the master role and its parts (master.go
// and the files above), the metrics (metrics.go) and the status page
// (statuspage.go). wire.go builds the handlers, the membership, the
// pipeline and the master role from the replica's state; the metrics and
// the status page get their sources where the replica opens and mounts
// them (replica.go, http.go). internal/lint's TestCellPartsReachNoReplica
// keeps the parts' files free of the *Replica. The replica's own concerns (its status, progress reports, rebuild,
// the HTTP listener, backups, the watchdog) are its methods, each in its
// own file.
//
// # Concurrency and life cycle
//
// Start opens the store and starts the loop; Close stops it. RPC handlers
// run on the transport's goroutines and reach the loop through a proposal
// channel; namespace reads run on the handlers' goroutines (the namespace
// allows concurrent readers). Replica's methods are safe for concurrent
// use. StartLocal runs a whole cell in one process (tests, `lockcelld dev`).
package cell
