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
// leader for a randomised election timeout, and whose pre-vote finds a
// majority that no longer hears one either, becomes a candidate: it runs
// Phase 1 (Prepare/Promise) once, for every slot from its first unchosen
// slot onward; acceptors answer with everything they accepted there; the
// new leader re-proposes, per slot, the value reported chosen or else the one
// with the highest ballot, and fills holes with no-ops. Then it skips Phase
// 1 for as long as it leads: Phase 2 (Accept/Accepted) is pipelined over a
// window of Config.MaxInflight slots and batched, up to Config.MaxBatch
// proposals per slot. Every message carries the sender's chosen index;
// followers learn chosen slots from it and fetch what they missed with
// MsgLearnReq, receiving chosen values or, below the sender's compaction
// point, its snapshot and then the tail. Catch-up needs no new proposal and
// no particular link: any message from a peer that is ahead (a heartbeat,
// a refused pre-vote, a rebuild answer) starts a fetch, and a fetch left
// unanswered for HeartbeatTicks is retried on the replica's own clock with
// the next peer in turn (learner.go); a replica that does not vote (a
// learner, a rebuilding replica) and hears no peer for ElectionTicks asks
// one, in turn, unprompted. So a deposed leader or a follower
// that missed chosen slots learns them in an idle cell, over whichever
// links still work.
//
// Master lease (Chubby; Paxos Made Live §5.2): an acceptor that accepts from
// the leader (entries or heartbeat) grants it a lease of Config.LeaseTicks on
// its own clock and refuses to promise any other proposer until the grant
// runs out, telling a refused candidate how long is left. The leader counts
// each grant from the tick it sent the request, shortened by the drift bound
// (Config.DriftPPM) and one tick, and is master only while a majority of
// grants is live and everything chosen before its leadership is applied. A
// restarted acceptor, which cannot remember its grants, promises nothing for
// LeaseTicks after NewNode. HandOver (handover.go) hands mastership to a
// caught-up successor without waiting out the lease: the master finishes
// its slots, stops being master, and only then releases its lease and
// tells the successor to campaign at once; StepDown does the same without
// waiting for its slots or the successor.
//
// Pre-vote (prevote.go): a follower whose election timer fires does not
// raise a ballot at once. It asks every peer (MsgPreVote) whether it would
// vote for it, and campaigns only once a majority, itself included, says
// yes within ElectionTicks. A replica says no while it still hears a live
// master: it leads with a live lease, or it follows a leader whose Accept
// or heartbeat it received within the last ElectionTicks ticks, or it holds
// a live lease grant to another replica. Status.PreVote reports a pre-vote
// in progress. Without it, a replica that was cut off or restarted and
// whose timer fired would campaign with a higher ballot; the acceptors
// refuse that ballot while their grants to the master live, but the
// returning replica itself has promised it, refuses the master's next
// heartbeat with it, and the master steps down: a needless fail-over. A
// successor named by StepDown (MsgTimeoutNow) campaigns without a
// pre-vote: the master asked it to, and a hand-over should cost no extra
// round trip.
//
// Safety. A pre-vote writes nothing durable, promises nothing, accepts
// nothing and grants no lease; its messages depend on no persistence and a
// grant binds nobody (the grantor may promise any ballot afterwards). The
// campaign that follows is an ordinary Phase 1. So every argument in this
// documentation holds with pre-vote exactly as without it: pre-vote only
// removes campaigns, it never adds a vote. Its only risk is liveness, which
// it keeps: when the master is gone no replica hears it, so after
// ElectionTicks every follower grants, and a pre-candidate asks again every
// HeartbeatTicks; a refusal for a live grant lasts no longer than the grant,
// which the Prepare would wait out anyway. Answers carry a nonce, so an
// answer to an earlier pre-vote (perhaps before a restart) never counts.
//
// Mixed versions. MsgPreVote and MsgPreVoteResp are appended to the message
// types, so every older type keeps its wire number. A replica without
// pre-vote refuses the unknown type (ErrInvalidMessage; the cell counts and
// drops it) and campaigns directly, as before. So in a cell of old and new
// replicas, if a majority that can talk includes an old replica, that one
// campaigns when its timer fires and the new replicas promise as before;
// if it holds only new replicas, they answer each other. Elections happen
// either way; only the old replicas can still depose a live master, as
// they always could, until they are upgraded.
//
// Membership changes add a value field (Value.Conf) and two message fields
// (Message.ConfIndex, Message.Learner) that older replicas do not know: an
// older replica would apply a membership change as an ordinary command and
// ignore it. Upgrade every replica before the first membership change.
//
// Every vote a proposer collects (a promise, an accept's acknowledgement, a
// lease grant) counts at the proposer only for a bounded time: while its own
// tick count is below t + E, where t is its tick count when it sent the
// request that drew the vote (Prepare and Accept carry it in Tick; Promise
// and Accepted echo it) and E = (LeaseTicks-1)/(1+DriftPPM/1e6), the lease
// term shortened by the drift bound. A candidate completes Phase 1 only with
// a majority of promises that count at that moment (it asks again for one
// that no longer counts); a leader deems a slot chosen only when a majority
// of acknowledgements count (it retransmits to a peer whose acknowledgement
// lapsed). In real time a vote so counts for at most E*P_c after the request
// left, P_c the proposer's tick period, which by the drift bound is at most
// (LeaseTicks-1)*P_a for any acceptor's period P_a: no longer than
// LeaseTicks ticks of the acceptor that cast it. Votes normally come back
// within milliseconds, so the bound costs nothing but a retry after a long
// partition.
//
// # Lost state
//
// Paxos is safe only if an acceptor never forgets a vote. A replica whose
// durable state was lost or damaged (a wiped or replaced disk, a log that
// lost acknowledged records, a store moved aside as corrupt) has forgotten
// some: promises (it may accept a ballot below one it promised, behind the
// back of the proposer that counted that promise), accepts (a quorum it
// belonged to chose a value it no longer reports, so a later Phase 1 over a
// quorum that includes it may miss the value) and lease grants (it may help
// a second master while the first still counts its grant). The caller
// detects the loss and starts the node with Config.Rebuild (the cell's
// evidence is described in cell/store.go). Such a node is a learner: it
// promises nothing, accepts nothing and grants no lease; it learns chosen
// values (facts, which it may also serve to others) and votes again only
// after four steps (rebuild.go), a stronger condition than Paxos Made Live
// §5.1's "observe one complete instance started after recovery", which says
// nothing of promises collected before the loss and counted after it:
//
//  1. Wait LeaseTicks of its own ticks after NewNode (T0), which takes at
//     least (LeaseTicks-1)*P_a of real time. Lemma 1: every vote it cast
//     before losing its state was drawn by a request sent before T0, so by
//     the bound above no proposer counts it after the wait ends (T_w). The
//     same wait covers its forgotten lease grants.
//  2. Ask every peer, with a fresh nonce, for its promised ballot and its
//     highest accepted (or snapshot) slot, and take answers from a majority
//     M of the cell not counting itself; only voting replicas answer.
//     Answers are given after T_w.
//  3. Learn chosen values until it knows every slot up to H, the highest
//     slot in the answers, chosen (asking the leader to fill the log to H
//     with no-ops when nothing else would get it there).
//  4. Take B, the highest ballot in the answers, as its promise, clear the
//     Rebuilding flag, make that durable, and only then vote.
//
// Why that suffices. Call a vote used if a proposer counted it: a promise
// in a completed Phase 1, an acknowledgement in a majority that made a slot
// chosen. By Lemma 1, every forgotten vote of the rebuilt replica R that
// was ever used was used before T_w. (a) A used forgotten promise of ballot
// b: the Phase 1 it completed had a majority Q of promises, all made before
// T_w. Q minus R and M (a majority without R) must meet, since together
// they hold at least n members among the n-1 others; the replica X in both
// promised b before T_w and answered after, so answered a ballot of at
// least b (promises only grow; if X itself lost state since, its own
// rebuild took at least b by this same argument at an earlier time). So
// B >= b: R never accepts below a ballot whose Phase 1 counted its
// forgotten promise. (b) A used forgotten acknowledgement of slot s: s was
// chosen before T_w by a majority Q, and the replica in both Q minus R and
// M had accepted s before answering, so H >= s: R knows s chosen (and its
// value) before it votes, and reports it as chosen in every later Promise.
// (c) Unused forgotten votes can no longer be used (Lemma 1): for every
// proposer they are as if their messages had been lost, which Paxos
// tolerates. (d) A forgotten grant was counted by a leader only until T_w,
// and R grants nothing before. What R still holds after the loss is a true
// prefix of its history, and learned values are chosen values, so after
// rejoining R behaves as an acceptor that never cast its unused forgotten
// votes and never went below its used ones. No two values are chosen for a
// slot and no two masters overlap, given that no more than a minority of
// the cell is without its state at once (fewer voters than a majority
// cannot answer step 2, and the rebuild waits) and that tick rates stay
// within DriftPPM. Restarting during a rebuild starts it over (the flag is
// durable), which only waits longer.
//
// Timing is used exactly as the master lease uses it: the proposer side of
// the bound (counting votes only for E of its own ticks) is enforced by
// this package; the acceptor side is the rebuild's wait.
//
// # Membership
//
// The replica set is replicated state (membership.go). A Membership lists
// voters, who promise, accept and grant leases, and learners, who receive
// every chosen value and vote in nothing. Config.Replicas is the initial
// membership; a change is a log entry (Value.Conf holds the whole new
// membership) proposed with ProposeConfChange, and Snapshot.Members
// carries the membership past compaction. Each change moves one replica:
// ConfAddLearner, ConfPromote (learner to voter) or ConfRemove. So the
// voters of two consecutive memberships differ by at most one replica, and
// any majority of the one shares a replica with any majority of the other
// (single-server change; no joint consensus). Four rules make it safe in
// this multi-Paxos with a master lease:
//
//  1. When it takes effect. A membership change chosen in slot s governs
//     slots s+1 onward: their quorums (acknowledgements, promises, lease
//     grants) are majorities of its voters. A replica uses a membership
//     only once it knows its slot chosen (Membership.Index is that slot);
//     nothing uses a proposed one. One change at a time: the leader places
//     a change only once every slot it proposed is chosen, and places
//     nothing after it until it is chosen (ErrConfChangePending for a
//     second one). A new leader that recovers an unchosen change in slot s
//     also proposes nothing new beyond s until s is chosen; it marks slots
//     chosen in order, so each slot past s is counted under the membership
//     s makes, which by then it knows.
//  2. Who may accept a change. An acceptor accepts a membership change in
//     slot s only if it knows every slot below s chosen (it learns first;
//     the leader retransmits). So every replica that voted for the change
//     making membership M_k+1 knew M_k.
//  3. Who counts in Phase 1. A candidate that knows membership M_k counts
//     promises only from M_k's voters, and only those whose sender knows no
//     later membership (Promise.ConfIndex <= M_k.Index); it learns the later
//     ones first. Lemma M: no value was then chosen at a lower ballot by a
//     quorum of M_k+2 or later. For M_k+2's own entry was accepted at a
//     lower ballot by a majority V of M_k+1, each of whom knew M_k+1 (rule
//     2); the candidate's quorum Q, a majority of M_k, meets V (consecutive
//     memberships), and the replica in both accepted before it promised, so
//     its promise named a membership past M_k and was not counted. So Q
//     meets the quorum of every value chosen at a lower ballot in a slot it
//     recovers (those of M_k and M_k+1), which is what Phase 1 needs. A
//     replica that was removed but has not learned so is such a candidate
//     (with M_k): if it wins, it re-proposes its own removal, learns it
//     chosen and steps down.
//  4. The master lease. A leader counts lease grants only from the voters
//     of the membership it knows (leaseEnd), and a candidate needs a
//     majority of its own membership's voters, which by Lemma M is the
//     leader's or the one just before or after it: the two majorities meet,
//     and the replica in both refuses the candidate while its grant lives.
//     A removed voter's grant stops counting at the leader the moment the
//     removal is chosen, and no candidate that knows of the removal asks
//     it. A new voter has promised nothing and granted nothing; it has
//     forgotten nothing either (invariant 8 concerns lost votes).
//
// A new replica starts outside the membership (its ID not in
// Config.Replicas; it must never reuse the ID of a former member whose
// durable state it does not hold, since ballots carry IDs). It votes in
// nothing. Once ConfAddLearner is chosen the leader sends it Accepts; it
// learns the log, by snapshot first if the leader has compacted, and
// answers with an empty Accepted that tells the leader how far it knows the
// log chosen. ConfPromote is refused (ErrNotCaughtUp) until that is within
// MaxInflight slots of the leader and past its compaction point, so that a
// new voter can report the chosen values a Promise must carry.
//
// A removed replica, once it knows the removal chosen, is no voter: it
// promises, accepts, grants and campaigns no more. A master that removed
// itself hands over when the removal is chosen: it stops being master,
// releases its lease and sends TimeoutNow to the most advanced remaining
// voter (as StepDown). A voter refuses messages from a replica outside the
// membership it knows (ErrInvalidMessage), except a former member's Release
// and TimeoutNow, which only give up its own lease, and its LearnReq:
// chosen values are facts, and the master keeps sending Accepts to former
// members, so a removed replica that missed its removal learns it and
// stops. A replica that does not vote (a learner, a new or removed replica,
// a rebuilding one) takes messages from any replica: it only learns, and a
// new replica knows only the initial membership.
//
// # The caller's duties
//
// The caller runs one loop around a Node (the cell's run loop). Each time
// round it calls Tick when its ticker fires, Step for each message that
// arrived, Propose for each command, and then, if HasReady reports work,
// takes rd := Ready() and does, in this order (without Config.AsyncWrites;
// the next section gives the duties with it):
//
//  1. Persist rd.HardState (unless zero) and rd.Entries as one atomic batch
//     (Saver.Save), and if rd.MustSync, make it durable (fsync) before going
//     on. This is invariant 2: a promise or an accepted value is on stable
//     storage before any message that depends on it leaves the replica.
//  2. Only then send rd.Messages (in any order; they may be lost, delayed,
//     duplicated or reordered: the protocol copes). If rd.SoftState says
//     this replica is no longer master, stop serving reads before sending
//     any of them: they may release its lease (a step-down), after which
//     a successor may serve at once. Messages for which
//     Message.DependsOnPersist is false may be sent before step 1, so
//     that a leader's own fsync overlaps its followers', and a
//     candidate's fsync of its own promise overlaps the acceptors'.
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
// # Writing the log off the loop
//
// With Config.AsyncWrites (etcd-io/raft calls it asynchronous storage
// writes) the loop need not wait for a write's fsync: while one is in
// flight it keeps stepping peers' answers, placing new proposals and
// ticking. The duties become:
//
//  1. Hand rd.HardState and rd.Entries, if rd.WriteID is not 0, to a
//     writer that carries out writes strictly in WriteID order (it may
//     combine several into one batch and one fsync), syncing each whose
//     Ready said MustSync.
//  2. Send every one of rd.Messages at once (after stopping serving reads
//     if rd.SoftState says this replica is no longer master, as above).
//     The node itself holds back each message that depends on a write
//     still in flight (Message.DependsOnPersist) and hands it out in a
//     later Ready, once that write is reported durable.
//  3. Install rd.Snapshot (after every earlier write is carried out:
//     the snapshot replaces the log below it), apply rd.Chosen in order,
//     note rd.SoftState, deliver rd.Outcomes, and call Advance(rd). A
//     chosen value is handed out only once this replica's own write of it
//     (if any) is durable, so the application never runs ahead of the log.
//  4. When the writer reports write id carried out, call Persisted(id).
//     Only now does the node count its own promise (a candidate wins only
//     then) and its own accepts (a leader deems a slot chosen without
//     them meanwhile, with a majority of other replicas' acknowledgements,
//     which each leave only after their own write is durable), and release
//     the answers that depended on the write.
//
// So nothing is counted or answered on the strength of a write that is not
// durable, and a crash at any point, with writes in flight or between a
// write and the messages it released, loses only writes that no message
// and no count relied on: the same cases as a crash between persisting
// and sending in the synchronous list.
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
