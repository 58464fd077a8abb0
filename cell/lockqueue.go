package cell

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// lockQueues holds the FIFO queues of blocked Acquire calls at this master,
// one per lock path, and decides whose Acquire goes to Paxos next. A
// release wakes exactly the head of the lock's queue (and, for shared
// grants, the run of shared waiters behind it): no thundering herd. At most
// one Acquire per lock is in Paxos at a time, the head's — or, when a
// command that frees the lock hands it over (handOver), the grants of the
// head and the run of shared waiters right behind it, all in that one
// command.
//
// # A canceled Acquire leaves nothing behind
//
// A caller that gives up (its context ends) leaves no waiter in the queue
// and no lock held by its session, whenever it gives up:
//
//   - While queued behind others, or at the head with no Acquire in
//     flight: cancel takes it out; its Acquire is never proposed.
//   - While its Acquire is in Paxos: cancel leaves it in its place (the
//     in-flight Acquire is its), and runOutcome takes it out when the
//     outcome arrives; a grant it got is released.
//   - After its grant was delivered but before it read it: cancel finds the
//     grant in the waiter's result and releases it.
//
// The last two never both happen and never neither: the caller closes
// gone before it takes mu, and runOutcome reads gone and delivers the
// grant under mu, so either runOutcome sees gone (and releases), or the
// grant is in the result when cancel looks. A try (an Acquire that does
// not wait) follows the same protocol without a queue.
//
// # The master role ending
//
// When the role ends (stop) every waiter is told so at once, except those
// whose Acquires are in Paxos: such an Acquire may still be chosen (a new
// leader completes the slots the old one filled), and the pipeline gives
// every command it proposed one definite outcome, even after the role
// ended (applied, preempted, or the replica stopping). Its waiter keeps
// waiting for it, and runOutcome tells it that outcome: the grant, which
// it then holds, or what every other waiter was told. Telling it at stop
// would leave a grant that nobody knows of standing until its session
// ends.
//
// A waiter that left while its Acquire (or a grant carried to it) was in
// Paxos is the exception this side cannot cover: runOutcome gives its
// grant back with a Release of its own, and if the role ends before that
// Release is chosen (a step-down refuses it, a crash loses it), the grant
// stands under the next master, which knows nothing of the cancel. The
// client gives such a grant back once it learns of the next master
// (client/lock.go, orphanGrants).
//
// lockQueues holds no *Replica: it reaches Paxos through a lockProposer and
// the rest of the master through the func fields of lockDeps, so it is
// tested alone (lockqueue_test.go). Its methods are safe for concurrent
// use; wait and try block, the others do not.
type lockQueues struct {
	deps lockDeps

	mu struct {
		sync.Mutex
		queues map[string]*lockQueue
		// stopped is the error every waiter was told when the master role
		// ended; nil while it serves.
		stopped error
	}
}

// lockProposer is how lock queues reach Paxos.
type lockProposer interface {
	// acquire proposes op for caller and calls done exactly once with its
	// applied result, on the run loop goroutine (or at once on the
	// caller's, if it is refused); done must not block. A queued Acquire
	// is never shed (waiters are bounded by MaxWaiters); a try may be.
	acquire(caller namespace.Caller, op *namespace.Acquire, queued bool, done func(namespace.Result, error))
	// release proposes op for caller: it gives back a grant nobody waits
	// for (and may hand the lock on, op.Then). done is called exactly once
	// with the outcome, like acquire's. It must not block and is never
	// shed.
	release(caller namespace.Caller, op *namespace.Release, done func(namespace.Result, error))
}

// lockDeps is what lockQueues needs besides Paxos.
type lockDeps struct {
	prop lockProposer
	// conflict tells the holders of path that someone waits for it; it
	// must not block.
	conflict func(path string)
	// now returns the cell's time (unix nanoseconds, as api.Error.Until of
	// a lock-delay): while a lock-delay runs it follows this replica's
	// monotonic clock, so the difference to Until is the real wait.
	now func() (int64, error)
	// waiting, if set, is told every change of the number of waiters.
	waiting func(delta int)
	// hook, if set, receives the outcome of each head's Acquire instead
	// of handling it at once (see Config.headOutcomeHook).
	hook func(path string, err error, gone <-chan struct{}, deliver func())
	// twoRound, if it returns true, turns handOver off for now: in tests
	// (Config.twoRoundHandOver), and while some replica has not reported
	// that it can apply a hand-over (features.go).
	twoRound func() bool
	// runs, if it returns true, lets handOver hand a run of shared waiters
	// over in one command; while it returns false (some replica has not
	// reported that it applies such a command, features.go) or is nil,
	// handOver hands over the head alone.
	runs func() bool
}

// maxHandOverRun bounds the shared waiters one command hands a lock to,
// so that a long run of readers does not make one slot arbitrarily large;
// the readers behind the run join the lock one Acquire after another
// (runOutcome lets the next shared waiter in).
const maxHandOverRun = 64

// lockQueue is the FIFO of sessions waiting for one lock.
type lockQueue struct {
	path    string
	waiters []*lockWaiter
	// inflight is the number of waiters at the front of the queue whose
	// Acquires are in Paxos: 0, or 1 for the head's Acquire (on its own or
	// as the grant of a command that frees the lock), or the length of the
	// run of shared waiters one command hands the lock to (handOver).
	inflight int
	// freedInflight reports that the lock was freed while the head's
	// Acquire was in flight (lockFreed): if that Acquire then leaves the
	// head waiting, the head must ask again.
	freedInflight bool
	// timer retries the head when a lock-delay ends.
	timer *time.Timer
}

// lockWaiter is one blocked Acquire (or one try).
type lockWaiter struct {
	caller  namespace.Caller
	session uint64
	mode    api.LockMode
	// result receives the outcome at most once (buffered).
	result chan waitResult
	once   sync.Once
	// gone is closed when the caller stopped waiting (canceled).
	gone chan struct{}
}

type waitResult struct {
	granted *namespace.Granted
	err     error
}

func newLockWaiter(caller namespace.Caller, sess uint64, mode api.LockMode) *lockWaiter {
	return &lockWaiter{caller: caller, session: sess, mode: mode, result: make(chan waitResult, 1), gone: make(chan struct{})}
}

// finish delivers the outcome; a second call does nothing. It does not
// block.
func (w *lockWaiter) finish(g *namespace.Granted, err error) {
	w.once.Do(func() { w.result <- waitResult{g, err} })
}

func (w *lockWaiter) abandoned() bool {
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

func newLockQueues(deps lockDeps) *lockQueues {
	l := &lockQueues{deps: deps}
	l.mu.queues = map[string]*lockQueue{}
	return l
}

// wait queues an Acquire of path in mode for session sess of caller behind
// the lock's other waiters and returns its grant, or the error that ended
// it (the lock's node was deleted, the session ended, the master stopped,
// ctx ended).
func (l *lockQueues) wait(ctx context.Context, caller namespace.Caller, sess uint64, path string, mode api.LockMode) (*namespace.Granted, error) {
	w := newLockWaiter(caller, sess, mode)
	if err := l.enqueue(path, w); err != nil {
		return nil, err
	}
	select {
	case out := <-w.result:
		return out.granted, out.err
	case <-ctx.Done():
		l.cancel(path, w)
		return nil, ctxError(ctx)
	}
}

// try proposes one Acquire of path that does not wait: it fails with
// api.ErrLocked at once if others wait for the lock (a try never overtakes
// them), and tells the holders of a held lock that someone wanted it.
func (l *lockQueues) try(ctx context.Context, caller namespace.Caller, sess uint64, path string, mode api.LockMode) (*namespace.Granted, error) {
	if l.queued(path) {
		return nil, apiErr(api.Locked, "the lock is held and others are waiting for it")
	}
	w := newLockWaiter(caller, sess, mode)
	l.deps.prop.acquire(caller, &namespace.Acquire{Session: sess, Path: path, Mode: mode}, false, func(res namespace.Result, err error) {
		reply, err := result(res, err)
		g, _ := reply.(*namespace.Granted)
		l.mu.Lock()
		gone := w.abandoned()
		if !gone {
			w.finish(g, err)
		}
		l.mu.Unlock()
		if gone && g != nil {
			l.release(w, path, g)
		}
	})
	select {
	case out := <-w.result:
		if errors.Is(out.err, api.ErrLocked) {
			l.deps.conflict(path)
		}
		return out.granted, out.err
	case <-ctx.Done():
		l.abandon(path, w)
		return nil, ctxError(ctx)
	}
}

// enqueue adds w behind the lock's other waiters and, if it is first, asks
// for the lock at once. A waiter that joins behind others proposes
// nothing: the head has asked already, or is in flight, or was granted
// the lock just now, and the next free (lockFreed, a hand-over) serves the
// queue. (Kicking the head on every arrival cost a command that came back
// Locked, and a conflict event, per arrival at a busy lock.) It fails if
// the master role ended.
func (l *lockQueues) enqueue(path string, w *lockWaiter) error {
	l.mu.Lock()
	if err := l.mu.stopped; err != nil {
		l.mu.Unlock()
		return err
	}
	q := l.mu.queues[path]
	if q == nil {
		q = &lockQueue{path: path}
		l.mu.queues[path] = q
	}
	q.waiters = append(q.waiters, w)
	first := len(q.waiters) == 1
	l.waitingLocked(1)
	l.mu.Unlock()
	if first {
		l.kick(path)
	}
	return nil
}

// cancel takes w (whose caller gave up) out of path's queue, unless its
// Acquire is in Paxos (runOutcome then takes it out), and gives back a
// grant delivered to it that it will not read.
func (l *lockQueues) cancel(path string, w *lockWaiter) {
	close(w.gone)
	l.mu.Lock()
	if q := l.mu.queues[path]; q != nil {
		for i, x := range q.waiters {
			if x != w {
				continue
			}
			if i < q.inflight {
				break // runOutcome sees gone when the outcome arrives
			}
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			l.waitingLocked(-1)
			l.dropIfEmptyLocked(q)
			break
		}
	}
	l.mu.Unlock()
	l.reclaim(path, w)
}

// abandon marks a try's waiter gone and gives back a grant delivered to it
// that it will not read.
func (l *lockQueues) abandon(path string, w *lockWaiter) {
	close(w.gone)
	// Taking mu orders this after any outcome delivery that did not see
	// gone (it delivers under mu).
	l.mu.Lock()
	l.mu.Unlock()
	l.reclaim(path, w)
}

// reclaim releases a grant that was delivered to w before its caller gave
// up. REQUIRES: w.gone closed, and mu taken and released since.
func (l *lockQueues) reclaim(path string, w *lockWaiter) {
	select {
	case out := <-w.result:
		if out.granted != nil {
			l.release(w, path, out.granted)
		}
	default:
	}
}

// release gives back the grant g that w's caller will not read, and hands
// the lock to the next waiter in the same command.
func (l *lockQueues) release(w *lockWaiter, path string, g *namespace.Granted) {
	grants, hs := l.attach(path)
	l.deps.prop.release(w.caller, &namespace.Release{Session: w.session, Path: path, Generation: g.Generation, Then: grants}, hs.settle)
}

// count returns the number of blocked Acquire calls.
func (l *lockQueues) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.mu.queues {
		n += len(q.waiters)
	}
	return n
}

// queued reports whether someone waits for path.
func (l *lockQueues) queued(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.mu.queues[path]
	return q != nil && len(q.waiters) > 0
}

// REQUIRES: l.mu held.
func (l *lockQueues) waitingLocked(delta int) {
	if l.deps.waiting != nil && delta != 0 {
		l.deps.waiting(delta)
	}
}

// skipAbandonedLocked drops the waiters at the head of q that left while
// queued, and q itself if none is left; it reports whether q is now empty.
func (l *lockQueues) skipAbandonedLocked(q *lockQueue) bool {
	n := len(q.waiters)
	for len(q.waiters) > 0 && q.waiters[0].abandoned() {
		q.waiters = q.waiters[1:]
	}
	l.waitingLocked(len(q.waiters) - n)
	if len(q.waiters) == 0 {
		l.dropIfEmptyLocked(q)
		return true
	}
	return false
}

// REQUIRES: l.mu held.
func (l *lockQueues) dropIfEmptyLocked(q *lockQueue) {
	if len(q.waiters) == 0 && q.inflight == 0 {
		if q.timer != nil {
			q.timer.Stop()
		}
		if l.mu.queues[q.path] == q {
			delete(l.mu.queues, q.path)
		}
	}
}

// kick proposes an Acquire for the head waiter of path, unless one is in
// flight already or the master role ended.
func (l *lockQueues) kick(path string) {
	l.mu.Lock()
	q := l.mu.queues[path]
	if q == nil || q.inflight > 0 || len(q.waiters) == 0 || l.mu.stopped != nil {
		l.mu.Unlock()
		return
	}
	if l.skipAbandonedLocked(q) {
		l.mu.Unlock()
		return
	}
	w := q.waiters[0]
	q.inflight = 1
	q.freedInflight = false
	l.mu.Unlock()
	outcome := l.outcomeFor(q, []*lockWaiter{w})
	l.deps.prop.acquire(w.caller, &namespace.Acquire{Session: w.session, Path: path, Mode: w.mode}, true, func(res namespace.Result, err error) {
		outcome([]waitResult{acquireOutcome(res, err)})
	})
}

// acquireOutcome is the outcome of an Acquire for one waiter: its grant,
// or the error that refused it (err, or the command's own).
func acquireOutcome(res namespace.Result, err error) waitResult {
	if err == nil && res.Err != nil {
		err = res.Err
	}
	g, _ := res.Reply.(*namespace.Granted)
	if err != nil {
		g = nil
	}
	return waitResult{granted: g, err: err}
}

// outcomeFor returns the function that takes the outcomes of the
// Acquires in flight for ws, the waiters at the front of q (one per
// waiter, in order): runOutcome, through the test hook if one is set (it
// is shown the first waiter's outcome and delivers the run's).
func (l *lockQueues) outcomeFor(q *lockQueue, ws []*lockWaiter) func([]waitResult) {
	outcome := func(outs []waitResult) { l.runOutcome(q, ws, outs) }
	if hook := l.deps.hook; hook != nil {
		direct := outcome
		outcome = func(outs []waitResult) {
			hook(q.path, outs[0].err, ws[0].gone, func() { direct(outs) })
		}
	}
	return outcome
}

// handOver readies the hand-over of path's lock to the head of its queue
// inside a command that may free the lock (a Release, an ExpireSession),
// so that the hand-over costs one Paxos slot instead of two: the release's,
// then the head's Acquire. If the head is a shared waiter, the run of
// shared waiters right behind it (up to maxHandOverRun in all, and only
// while deps.runs allows) is handed the lock in the same command: each is
// the Acquire it would have proposed, applied in queue order, so they hold
// it together from that slot on, at one generation greater than the freed
// one's, as if each had joined in a slot of its own.
//
// If the head waits and no Acquire of its is in flight, handOver marks the
// run in flight and returns the namespace.Grants for the command to carry
// (one per waiter, in queue order), and settle, which must be called
// exactly once: with the grants' outcomes (one Handed each, in order) if
// the command was applied, or with applied false if it was not (refused,
// shed, never proposed). Otherwise ok is false and the command carries no
// grant for path.
//
// Each grant is the very Acquire kick would propose for its waiter, applied
// in the same slot right after the lock is freed, so everything the type's
// comment says of an Acquire in flight holds for it too: a waiter that
// cancels meanwhile leaves at its outcome, and a grant it got is released.
func (l *lockQueues) handOver(path string) (grants []namespace.Grant, settle func(hs []namespace.Handed, applied bool), ok bool) {
	l.mu.Lock()
	q := l.mu.queues[path]
	if q == nil || q.inflight > 0 || l.mu.stopped != nil {
		l.mu.Unlock()
		return nil, nil, false
	}
	if l.skipAbandonedLocked(q) {
		l.mu.Unlock()
		return nil, nil, false
	}
	n := 1
	if q.waiters[0].mode == api.LockShared && l.deps.runs != nil && l.deps.runs() {
		for n < len(q.waiters) && n < maxHandOverRun && q.waiters[n].mode == api.LockShared {
			n++
		}
	}
	ws := slices.Clone(q.waiters[:n])
	q.inflight = n
	q.freedInflight = false
	l.mu.Unlock()
	outcome := l.outcomeFor(q, ws)
	var once sync.Once
	settle = func(hs []namespace.Handed, applied bool) {
		once.Do(func() {
			// The grants of one lock are tried together or not at all
			// (namespace.Grant): the first says which.
			if !applied || len(hs) != len(ws) || !hs[0].Tried {
				l.notTried(q, ws)
				return
			}
			outs := make([]waitResult, len(ws))
			for i, h := range hs {
				if h.Reply != nil {
					outs[i].granted = h.Reply
				} else {
					outs[i].err = h.Err
				}
			}
			outcome(outs)
		})
	}
	grants = make([]namespace.Grant, n)
	for i, w := range ws {
		grants[i] = namespace.Grant{Caller: w.caller, Session: w.session, Path: path, Mode: w.mode}
	}
	return grants, settle, true
}

// notTried ends the flight of the grants for ws (the waiters at the front
// of q) that were never tried: their command was not applied, or did not
// free the lock (a shared lock that others still hold, a stale release).
// The waiters keep their places and the head asks again only if the lock
// was freed meanwhile; a waiter that canceled leaves, and the next waiter
// gets its turn.
//
// If the master role ended meanwhile (stop kept the waiters in flight for
// this outcome), they leave, told what every other waiter was told.
func (l *lockQueues) notTried(q *lockQueue, ws []*lockWaiter) {
	l.mu.Lock()
	q.inflight = 0
	next := q.freedInflight
	q.freedInflight = false
	var told []*lockWaiter
	for i, w := range ws {
		j := slices.Index(q.waiters, w)
		switch {
		case j < 0:
			next = true
		case w.abandoned():
			q.waiters = slices.Delete(q.waiters, j, j+1)
			l.waitingLocked(-1)
			next = next || i == 0
		case l.mu.stopped != nil:
			q.waiters = slices.Delete(q.waiters, j, j+1)
			l.waitingLocked(-1)
			told = append(told, w)
		}
	}
	next = next && len(q.waiters) > 0
	l.dropIfEmptyLocked(q)
	for _, w := range told {
		w.finish(nil, l.mu.stopped)
	}
	l.mu.Unlock()
	if next {
		go l.kick(q.path)
	}
}

// runOutcome handles the outcomes of the Acquires that were in flight for
// ws, the waiters at the front of q (the head alone, or a run of shared
// waiters handed the lock together), one per waiter in order. It runs on
// the run loop goroutine and must not block. A waiter canceled while its
// Acquire was in Paxos leaves the queue here whatever the outcome, and a
// grant it got is released (see the type's comment).
func (l *lockQueues) runOutcome(q *lockQueue, ws []*lockWaiter, outs []waitResult) {
	l.mu.Lock()
	q.inflight = 0
	freed := q.freedInflight
	q.freedInflight = false
	var (
		release         []*lockWaiter
		releaseGrants   []*namespace.Granted
		granted, stayed bool
		lastShared      bool
		removedOther    bool
		conflict        bool
		delay           time.Duration
	)
	for i, w := range ws {
		g, err := outs[i].granted, outs[i].err
		// w is still queued: while its Acquire is in flight nothing else
		// removes it. The check keeps a surprise from dropping someone
		// else.
		j := slices.Index(q.waiters, w)
		if j < 0 {
			removedOther = true
			continue
		}
		gone := w.abandoned()
		leave := true
		switch {
		case g != nil:
			granted = true
			lastShared = g.Mode == api.LockShared
			if gone {
				release = append(release, w)
				releaseGrants = append(releaseGrants, g)
			} else {
				w.finish(g, nil)
			}
		case gone:
			// Canceled while in Paxos and not granted: it leaves now, and
			// the next waiter gets its turn.
			removedOther = true
		case l.mu.stopped != nil:
			// The role ended while this Acquire was in Paxos (stop kept
			// the waiter for its outcome), and it was not granted: it
			// leaves, told the error of the outcome, or, where it would
			// have stayed (the lock held, a lock-delay), what every other
			// waiter was told.
			if err == nil || errors.Is(err, api.ErrLocked) || errors.Is(err, api.ErrLockDelay) {
				err = l.mu.stopped
			}
			w.finish(nil, err)
		case errors.Is(err, api.ErrLocked):
			// Stay; the release that frees the lock kicks again (or freed
			// it already, while this Acquire was in flight).
			leave, stayed, conflict = false, true, true
		case errors.Is(err, api.ErrLockDelay):
			leave, stayed = false, true
			d := time.Millisecond
			var ae *api.Error
			if errors.As(err, &ae) {
				if now, err := l.deps.now(); err == nil && ae.Until-now > int64(d) {
					d = time.Duration(ae.Until - now)
				}
			}
			delay = max(delay, d)
		default:
			// NotFound, SessionExpired, PermissionDenied, NotMaster...:
			// this waiter is done; the next one gets its turn.
			w.finish(nil, err)
			removedOther = true
		}
		if leave {
			q.waiters = slices.Delete(q.waiters, j, j+1)
			l.waitingLocked(-1)
		}
	}
	headShared := len(q.waiters) > 0 && q.waiters[0].mode == api.LockShared
	// Shared grants let the next shared waiter in at once. (A free noted
	// while these Acquires were in flight came before them: the lock is
	// theirs now.) A lock-delay retries on its timer; a waiter refused
	// because the lock is held waits for the release that frees it, or for
	// a free noted meanwhile. A waiter that left without the lock gives
	// the next its turn.
	next := granted && lastShared && headShared ||
		stayed && delay == 0 && freed ||
		!granted && !stayed && removedOther && len(q.waiters) > 0
	if delay > 0 && l.mu.stopped == nil {
		if q.timer != nil {
			q.timer.Stop()
		}
		q.timer = time.AfterFunc(delay, func() { l.kick(q.path) })
	}
	l.dropIfEmptyLocked(q)
	l.mu.Unlock()
	for i, w := range release {
		l.release(w, q.path, releaseGrants[i])
	}
	if conflict {
		l.deps.conflict(q.path)
	}
	if next {
		go l.kick(q.path)
	}
}

// lockFreed wakes the head waiter of a lock that became free, or fails
// every waiter if its node is gone. It runs on the run loop goroutine and
// does not block.
//
// While the head's Acquire is in flight the outcome of that Acquire decides
// (runOutcome, notTried); lockFreed only notes that the lock was freed, so
// that a head left waiting asks again.
func (l *lockQueues) lockFreed(f namespace.FreedLock) {
	l.mu.Lock()
	q := l.mu.queues[f.Path]
	if q != nil && q.inflight > 0 {
		q.freedInflight = true
		l.mu.Unlock()
		return
	}
	if !f.NodeDeleted {
		l.mu.Unlock()
		go l.kick(f.Path)
		return
	}
	var ws []*lockWaiter
	if q != nil {
		ws = q.waiters
		q.waiters = nil
		l.waitingLocked(-len(ws))
		l.dropIfEmptyLocked(q)
	}
	l.mu.Unlock()
	for _, w := range ws {
		w.finish(nil, apiErr(api.NotFound, "the lock's node was deleted"))
	}
}

// stop ends the queues with the master role: every waiter is told err,
// except a head whose Acquire is in Paxos, which is told that Acquire's
// outcome when it arrives (see the type's comment), and later Acquires
// fail with err at once.
func (l *lockQueues) stop(err error) {
	l.mu.Lock()
	if l.mu.stopped != nil {
		l.mu.Unlock()
		return
	}
	l.mu.stopped = err
	var ws []*lockWaiter
	for _, q := range l.mu.queues {
		if n := min(q.inflight, len(q.waiters)); n > 0 {
			// Only the pending outcome still reaches q (runOutcome).
			ws = append(ws, q.waiters[n:]...)
			q.waiters = q.waiters[:n]
		} else {
			ws = append(ws, q.waiters...)
			q.waiters = nil
		}
		if q.timer != nil {
			q.timer.Stop()
		}
	}
	l.mu.queues = map[string]*lockQueue{}
	l.waitingLocked(-len(ws))
	l.mu.Unlock()
	for _, w := range ws {
		w.finish(nil, err)
	}
}
