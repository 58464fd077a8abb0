// Package namespace is lockcell's replicated state machine: Chubby's files,
// directories, locks, sessions-as-records and tenants, kept in Pebble and
// changed only by applying chosen Paxos slots.
//
// # Role
//
// Every replica applies the same chosen commands in the same order and so
// builds the same namespace. The cell encodes each client operation as a
// Command (EncodeCommand), proposes it, and, once a slot is chosen, hands the
// slot's commands to Store.ApplySlot. Apply is deterministic: the only time
// it uses is Command.Time, stamped by the master; it checks ACLs against the
// caller the master authenticated; its results are values (a reply or an
// *api.Error per command, plus the node changes and freed locks the cell
// turns into events and wake-ups). Session liveness (leases, KeepAlive) is
// not here: the master decides a session expired and proposes ExpireSession.
//
// # Time
//
// The state keeps a clock (Store.Clock): the time of the last command that
// succeeded. Each command runs at max(clock, Command.Time), so the time the
// state sees never goes backwards, whatever a master's wall clock says
// (DESIGN.md invariant 9): creation and modification stamps only grow, and a
// lock-delay is never lengthened by a stamp from the past. A lock-delay ends
// when the clock reaches the node's DelayUntil; the state also keeps the
// latest such end (Store.Clock's delayEnd), so a master knows until when a
// lock-delay may still be running. That the clock does not run faster than
// real time is the master's duty (cell/clock.go): apply cannot know.
//
// # Data model
//
// Paths are /<tenant>/<name>/... (ParsePath has the rules). A tenant's root
// directory exists from CreateTenant on and cannot be deleted. Nodes are
// files (with contents up to Config.MaxContents) or directories; only
// directories have children; an ephemeral node is a file owned by a session
// and deleted, in the same slot, when that session closes or expires. Every
// node carries an instance number, content/lock/ACL generations, a content
// checksum, creation and modification stamps, three ACL names (acl.go has
// the rules) and a lock: exclusive or shared, with a lock-delay that blocks
// new grants for a while after a holder's session expires (not after a
// release). Session IDs, node instances and lock generations come from
// counters in the state and are never reused, so lock generations only grow
// (DESIGN.md invariant 4). Tenants carry quotas (api.TenantQuota); a command
// that would exceed one fails with ResourceExhausted naming it.
//
// # Storage and crash atomicity
//
// The namespace owns the Pebble keys beginning with 'n' (keys.go); the Paxos
// log shares the DB under 'p'. Each slot's effects, the applied slot number
// and the new state checksum are committed as one batch, so a crash reopens
// the store before or after a slot, never inside one. The checksum
// (Store.Checksum) covers the whole logical state and is maintained
// incrementally. Snapshot and InstallSnapshot move the whole state between
// replicas. Records use a compact binary encoding (reccodec.go); the meta
// record names the store format and Open refuses one it cannot read
// (ErrFormat); it reads the previous format, which needs no conversion
// (keys.go).
//
// # Apply cost
//
// All five replicas apply every slot, often on one shared machine, so apply
// CPU per command bounds the cell's throughput. Three things keep it low: a
// write-through cache of committed values (cache.go), exact because the
// Store is the only writer of its keys, which answers the old-value reads of
// the checksum and the record reads from memory; a per-slot overlay that
// writes each changed key once per slot into a plain batch (state.go, txn);
// and hand-written codecs for records and commands (reccodec.go,
// cmdcodec.go; the command bytes are msgpack's, unchanged).
//
// # Concurrency and life cycle
//
// Open a Store over an open Pebble DB; the caller owns and closes the DB.
// One goroutine (the cell's run loop) calls ApplySlot and InstallSnapshot;
// reads may run on any goroutine at any time and see whole slots. After a
// storage failure the Store refuses further writes (ErrFailed) and the
// replica must stop.
package namespace
