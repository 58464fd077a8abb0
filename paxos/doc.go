// Package paxos is lockcell's replicated log: multi-Paxos with a
// distinguished proposer and a master lease, written as a pure state machine.
//
// A Node plays all three Paxos roles for one replica. It owns no goroutine,
// clock, socket or disk and draws no randomness of its own (election jitter
// comes from Config.Seed): the caller feeds it ticks (Tick), messages from
// peers (Step) and client commands (Propose), and carries out the work the
// node hands back in Ready batches. The same inputs always produce the same
// outputs, which is what lets the simulator in this package's tests replay a
// whole faulty cell from one seed.
//
// # Protocol
//
// Ballots (round<<16 | replica ID) order proposers. A replica that hears no
// leader for a randomised election timeout becomes a candidate: it runs
// Phase 1 (Prepare/Promise) once, for every slot from its first unchosen
// slot onward; acceptors answer with everything they accepted there; the
// new leader re-proposes, per slot, the value reported chosen or else the one
// with the highest ballot, and fills holes with no-ops. Then it skips Phase
// 1 for as long as it leads: Phase 2 (Accept/Accepted) is pipelined over a
// window of Config.MaxInflight slots and batched, up to Config.MaxBatch
// proposals per slot. Every message carries the sender's chosen index;
// followers learn chosen slots from it and fetch what they missed with
// MsgLearnReq, receiving chosen values or, below the sender's compaction
// point, its snapshot and then the tail.
//
// Master lease (Chubby; Paxos Made Live §5.2): an acceptor that accepts from
// the leader (entries or heartbeat) grants it a lease of Config.LeaseTicks on
// its own clock and refuses to promise any other proposer until the grant
// runs out, telling a refused candidate how long is left. The leader counts
// each grant from the tick it sent the request, shortened by the drift bound
// (Config.DriftPPM) and one tick, and is master only while a majority of
// grants is live and everything chosen before its leadership is applied. A
// restarted acceptor, which cannot remember its grants, promises nothing for
// LeaseTicks after NewNode. StepDown hands over without waiting out the
// lease.
//
// # The caller's duties
//
// The caller runs one loop around a Node (the cell's run loop). Each time
// round it calls Tick when its ticker fires, Step for each message that
// arrived, Propose for each command, and then, if HasReady reports work,
// takes rd := Ready() and does, in this order:
//
//  1. Persist rd.HardState (unless zero) and rd.Entries as one atomic batch
//     (Saver.Save), and if rd.MustSync, make it durable (fsync) before going
//     on. This is invariant 2: a promise or an accepted value is on stable
//     storage before any message that depends on it leaves the replica.
//  2. Only then send rd.Messages (in any order; they may be lost, delayed,
//     duplicated or reordered: the protocol copes). Messages for which
//     Message.DependsOnPersist is false may be sent before step 1, so
//     that a leader's own fsync overlaps its followers'.
//  3. If rd.Snapshot is not zero, install it: Saver.SaveSnapshot and restore
//     the application's state from it.
//  4. Apply rd.Chosen to the application, strictly in order.
//  5. Note rd.SoftState and deliver rd.Outcomes to waiting clients.
//  6. Call Advance(rd). The node counts its own promise and accepts only now,
//     once they are durable.
//
// Ready must not be called again before Advance. A storage error is fatal:
// the replica stops and is restarted from its storage (NewNode), never
// continues on a guess. To compact, the caller saves a snapshot of its
// applied state (Saver.SaveSnapshot) and calls Compact with its slot.
//
// Reads: while Status().Master is true, the caller may serve reads from its
// applied state without a Paxos round; no other replica can be master then
// (as long as tick rates differ by no more than Config.DriftPPM).
//
// # Concurrency
//
// A Node is used from one goroutine; it has no locks. Messages handed out by
// Ready share slices with the node and with each other: read them, encode
// them, never modify them.
package paxos
