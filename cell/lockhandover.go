package cell

import (
	"context"

	"github.com/lockcell/lockcell/namespace"
)

// One-slot hand-over of a contended lock.
//
// A lock with waiters used to change hands in two Paxos slots in a row:
// the command that frees it (a Release, an ExpireSession) was chosen and
// applied, the master woke the head waiter (lockFreed), and only then
// proposed the head's Acquire. Now the master puts the head's Acquire into
// the freeing command itself, as a namespace.Grant, and every replica
// applies it right after the lock is freed, in the same slot: the lock
// passes over in one round. The Grant is the very Acquire the master would
// have proposed next (lockQueues.handOver), so the rules of an Acquire in
// flight hold unchanged: at most one per lock, the head's; a waiter that
// cancels meanwhile leaves when the outcome arrives and a grant it got is
// given back; a lock-delay is honored (the grant then fails with
// LockDelay and the head retries when it ends). The sequencer's generation
// comes from the same counter as any grant's, so it is greater than the
// released one's.
//
// A queue that starts with shared waiters is handed over as a run: the
// command carries one grant per shared waiter at the head (up to
// maxHandOverRun), tried in order in the same slot, so k readers behind a
// writer take the lock in one round instead of k. They share one
// generation, as readers who joined one after another would. A writer
// behind the run is not carried; it waits for the last reader's release.
// Replicas that cannot apply several grants of one lock (FeatureHandOverRun)
// keep the master at one grant per lock.
//
// What was tried before: proposing the head's Acquire as a separate
// command right behind the Release, in the hope that both share a slot.
// The Paxos core packs pending proposals into slots by count and window,
// so nothing guarantees it, and a Release that fails (stale, shed) would
// leave an Acquire in Paxos that then fails Locked. One command is applied
// atomically by every replica, with one outcome per grant.

// handOvers settles the grants one command carries, in order: each entry
// settles the grants of one lock (handOver's settle) and says how many
// there are.
type handOvers []handOver

// handOver is the settle function of one lock's grants and their number.
type handOver struct {
	n      int
	settle func([]namespace.Handed, bool)
}

// attach readies the hand-over of each of paths to its head waiter, or
// the run of shared waiters at its head (lockQueues.handOver), and returns
// the grants for the command to carry and their settle functions.
func (l *lockQueues) attach(paths ...string) ([]namespace.Grant, handOvers) {
	if l.deps.twoRound != nil && l.deps.twoRound() {
		return nil, nil
	}
	var grants []namespace.Grant
	var hs handOvers
	for _, p := range paths {
		if gs, settle, ok := l.handOver(p); ok {
			grants = append(grants, gs...)
			hs = append(hs, handOver{n: len(gs), settle: settle})
		}
	}
	return grants, hs
}

// settle hands each lock's grants their outcomes from the command's: their
// Handed entries if the command was applied and succeeded, else "not
// tried". It is the command's done (or part of it): it does not block.
func (hs handOvers) settle(res namespace.Result, err error) {
	total := 0
	for _, h := range hs {
		total += h.n
	}
	applied := err == nil && res.Err == nil && len(res.Handed) == total
	at := 0
	for _, h := range hs {
		var handed []namespace.Handed
		if applied {
			handed = res.Handed[at : at+h.n]
		}
		at += h.n
		h.settle(handed, applied)
	}
}

// proposeHandingOver runs a Release (or another command carrying the
// grants that hs settles) as the caller's request and waits for its
// outcome, like propose; the grants are settled whatever happens to the
// call (its context may end while the command is in Paxos).
func (c *rpcCall) proposeHandingOver(ctx context.Context, op namespace.Op, hs handOvers) (namespace.Result, error) {
	if len(hs) == 0 {
		return c.propose(ctx, op)
	}
	type outcome struct {
		res namespace.Result
		err error
	}
	ch := make(chan outcome, 1)
	c.d.submit(ctx, c.m, c.caller, op, func(res namespace.Result, err error) {
		hs.settle(res, err)
		ch <- outcome{res, err}
	})
	select {
	case out := <-ch:
		return out.res, out.err
	case <-ctx.Done():
		return namespace.Result{}, ctxError(ctx)
	}
}

// heldHandOvers readies the hand-over of each lock session sess holds to
// that lock's head waiter, for the command that ends the session. The
// locks are those of the applied state now; a lock the session takes or
// gives back before its end is applied is handed over by the ordinary path
// (lockFreed), and a grant whose lock the end does not free is not tried.
func (m *master) heldHandOvers(sess uint64) ([]namespace.Grant, handOvers) {
	paths, err := m.deps.state.HeldLocks(m.deps.cellCaller, sess)
	if err != nil {
		m.deps.log.Warn("listing an ending session's locks; its waiters wake after its end", "session", sess, "err", err)
		return nil, nil
	}
	return m.locks.attach(paths...)
}

// expire proposes the end of session sess, whose lease ran out or whose
// token was revoked, handing each lock it holds to that lock's head waiter
// in the same command; done, if not nil, gets the outcome. It does not
// block.
func (m *master) expire(sess uint64, done func(namespace.Result, error)) {
	op := &namespace.ExpireSession{Session: sess}
	var hs handOvers
	op.Then, hs = m.heldHandOvers(sess)
	m.deps.submit(context.Background(), m, originCell, m.deps.cellCaller, op, func(res namespace.Result, err error) {
		hs.settle(res, err)
		if done != nil {
			done(res, err)
		}
	})
}
