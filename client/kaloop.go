package client

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
)

// kaLoop drives the KeepAlive state machines of all of a Client's
// sessions from one goroutine: each session's state (lease end, jeopardy,
// grace end, the KeepAlives it has in flight, the master's cadence) is a
// plain struct (loop, session_keepalive.go), and kaLoop keeps them in one
// heap ordered by the next instant each has something to do, with one
// timer for the soonest. Replies, failures, nudges and the ends of
// searches for the master arrive in one inbox; each round takes the whole
// inbox, lets every session concerned handle its part, runs the sessions
// whose instant has come, and hands the KeepAlives started in the round to
// the sender as one lot. A second goroutine, the sender, gets a connection
// and the KeepAlive stream for each lot and writes it; replies come back
// through the stream's reader (kastream.go). So an idle session costs its
// structs and an entry in the heap, and no goroutine, timer or channel.
//
// Neither goroutine waits for anything a session does: the inbox is a
// slice under a mutex, so the stream's reader never blocks on the loop,
// and the sender's waits (for a dial, for a stream, for a frame to be
// written) never hold up the loop's timers. A session's loop methods run
// only on the loop goroutine, as they ran on the session's own goroutine
// before: one session's trouble (jeopardy, a search for the master) is
// handled in its struct, and the shared connection is closed on its
// account only if it fell silent for everyone (dropIfSilent).
//
// What was tried: a goroutine per session, each with its own timer and
// select, and a goroutine per KeepAlive in flight waiting for its reply:
// about three goroutines and 45 KB per idle session, so that a process
// holding 80,000 sessions spent a core on timers and scheduling alone.
type kaLoop struct {
	c    *Client
	once sync.Once
	// wake pokes the loop, swake the sender (buffers of one).
	wake  chan struct{}
	swake chan struct{}

	mu struct {
		sync.Mutex
		added   []*loop
		results []kaResult
		kicked  []*loop
		looks   []*lookup
		// outbox is the sender's next lot.
		outbox []*kaCall
		// closed: the loop ended with the client; the inbox stays empty.
		closed bool
	}

	// The loop goroutine's own state.
	heap     loopHeap
	watching map[*lookup]struct{}
	// local are results the loop made itself (KeepAlives it gave up),
	// handled in the next round; out are the KeepAlives started in this
	// round, handed to the sender at its end; dirty are the sessions to
	// run in this round.
	local []kaResult
	out   []*kaCall
	dirty []*loop
}

// start starts the loop and the sender, once per client.
func (k *kaLoop) start(c *Client) {
	k.once.Do(func() {
		k.c = c
		k.wake = make(chan struct{}, 1)
		k.swake = make(chan struct{}, 1)
		k.watching = map[*lookup]struct{}{}
		go k.run()
		go k.send()
	})
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// add hands a new session's state to the loop, which runs it at once.
func (k *kaLoop) add(l *loop) {
	k.start(l.s.c)
	k.queue(k.wake, func() { k.mu.added = append(k.mu.added, l) })
}

// queue runs push under k.mu, unless the loop is closed, and then pokes
// wake (the loop's or the sender's). Everything handed to the loop or its
// sender from other goroutines goes through it.
func (k *kaLoop) queue(wake chan struct{}, push func()) {
	k.mu.Lock()
	if k.mu.closed {
		k.mu.Unlock()
		return
	}
	push()
	k.mu.Unlock()
	poke(wake)
}

// kick asks for a KeepAlive of l now (Session.nudge), or, for a session
// that ended, for its KeepAlives to be forgotten.
func (k *kaLoop) kick(l *loop) {
	k.queue(k.wake, func() { k.mu.kicked = append(k.mu.kicked, l) })
}

// post hands KeepAlive results to the loop.
func (k *kaLoop) post(rs []kaResult) {
	if len(rs) == 0 {
		return
	}
	k.queue(k.wake, func() { k.mu.results = append(k.mu.results, rs...) })
}

// fail reports kcs failed with err (except those given up: the loop made
// their failure already; and those whose replies are lost on purpose, which
// wait to be given up).
func (k *kaLoop) fail(kcs []*kaCall, err error) {
	rs := make([]kaResult, 0, len(kcs))
	for _, kc := range kcs {
		if kc.given.Load() || kc.hold {
			continue
		}
		rs = append(rs, kaResult{l: kc.l, id: kc.id, sent: kc.sent, err: err,
			redirected: k.c.redirectedSince(kc.before, err), replica: kc.replica})
	}
	k.post(rs)
}

// resend puts kcs back into the sender's next lot.
func (k *kaLoop) resend(kcs []*kaCall) {
	if len(kcs) == 0 {
		return
	}
	k.queue(k.swake, func() { k.mu.outbox = append(k.mu.outbox, kcs...) })
}

// watch has the loop told when lk ends, so that the sessions waiting for
// it take its result: one goroutine per search, however many wait.
func (k *kaLoop) watch(lk *lookup) {
	if _, ok := k.watching[lk]; ok {
		return
	}
	k.watching[lk] = struct{}{}
	go func() {
		select {
		case <-lk.done:
		case <-k.c.ctx.Done():
			return
		}
		k.queue(k.wake, func() { k.mu.looks = append(k.mu.looks, lk) })
	}()
}

// mark puts l among the sessions to run in this round.
func (k *kaLoop) mark(l *loop) {
	if !l.dirty {
		l.dirty = true
		k.dirty = append(k.dirty, l)
	}
}

// run is the loop goroutine.
func (k *kaLoop) run() {
	c := k.c
	clock := c.cfg.clock
	timer := clock.NewTimer(time.Hour)
	defer timer.Stop()
	defer k.stopAll()
	for {
		k.mu.Lock()
		added, results, kicked, looks := k.mu.added, k.mu.results, k.mu.kicked, k.mu.looks
		k.mu.added, k.mu.results, k.mu.kicked, k.mu.looks = nil, nil, nil, nil
		k.mu.Unlock()
		local := k.local
		k.local = nil

		for _, lk := range looks {
			delete(k.watching, lk)
			f := foundMaster{addr: lk.addr, moved: lk.moved}
			for _, l := range k.heap {
				if l.finding && l.look == lk {
					l.moveTo(f)
					k.mark(l)
				}
			}
		}
		for _, l := range added {
			l.idx = -1
			k.mark(l)
		}
		for _, rs := range [][]kaResult{local, results} {
			for _, r := range rs {
				if !r.l.s.isFinal() {
					r.l.handle(r)
				}
				k.mark(r.l)
			}
		}
		for _, l := range kicked {
			// step sends it, after looking at the session's state: a kick
			// that follows a lapse must not go out on the old connection.
			// None is needed if a KeepAlive already heads for the current
			// connection (a search that moved the client nudges every
			// session, and a call that met a fail-over its own): a second
			// would only supersede it at the master.
			if !l.headingFor(true) {
				l.kicked = true
			}
			k.mark(l)
		}
		now := clock.Now()
		for len(k.heap) > 0 && !k.heap[0].wakeAt.After(now) {
			l := heap.Pop(&k.heap).(*loop)
			k.mark(l)
		}
		for _, l := range k.dirty {
			l.dirty = false
			if !l.s.isFinal() {
				l.step(now)
			}
			if l.s.isFinal() {
				if !l.stopped {
					l.stop()
				}
				if l.idx >= 0 {
					heap.Remove(&k.heap, l.idx)
				}
				continue
			}
			l.wakeAt = l.nextWake(now)
			if l.idx >= 0 {
				heap.Fix(&k.heap, l.idx)
			} else {
				heap.Push(&k.heap, l)
			}
		}
		clear(k.dirty)
		k.dirty = k.dirty[:0]
		if len(k.out) > 0 {
			k.mu.Lock()
			k.mu.outbox = append(k.mu.outbox, k.out...)
			k.mu.Unlock()
			clear(k.out)
			k.out = k.out[:0]
			poke(k.swake)
		}
		if len(k.local) > 0 {
			continue
		}
		wait := time.Hour
		if len(k.heap) > 0 {
			wait = max(k.heap[0].wakeAt.Sub(now), time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-k.wake:
		case <-timer.C():
		case <-c.ctx.Done():
			return
		}
	}
}

// stopAll forgets every session's KeepAlives when the client closes, and
// the inbox with them (nothing is put in it afterwards).
func (k *kaLoop) stopAll() {
	for _, l := range k.heap {
		l.stop()
	}
	k.heap, k.dirty, k.local, k.out = nil, nil, nil, nil
	k.mu.Lock()
	k.mu.closed = true
	k.mu.added, k.mu.results, k.mu.kicked, k.mu.looks, k.mu.outbox = nil, nil, nil, nil, nil
	k.mu.Unlock()
}

// send is the sender goroutine: it sends each lot the loop hands over.
func (k *kaLoop) send() {
	c := k.c
	for {
		select {
		case <-k.swake:
		case <-c.ctx.Done():
			return
		}
		k.mu.Lock()
		lot := k.mu.outbox
		k.mu.outbox = nil
		k.mu.Unlock()
		// Those given up meanwhile are left out; the wait for a
		// connection is bounded by the latest deadline of the rest.
		kcs := lot[:0]
		var until monotime.Time
		for _, kc := range lot {
			if kc.given.Load() {
				continue
			}
			if len(kcs) == 0 || kc.deadline.After(until) {
				until = kc.deadline
			}
			kcs = append(kcs, kc)
		}
		if len(kcs) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, max(until.Sub(c.cfg.clock.Now()), time.Millisecond))
		c.sendKeepAlives(ctx, kcs)
		cancel()
	}
}

// loopHeap orders sessions by the next instant each has something to do.
type loopHeap []*loop

func (h loopHeap) Len() int           { return len(h) }
func (h loopHeap) Less(i, j int) bool { return h[i].wakeAt.Before(h[j].wakeAt) }
func (h loopHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h *loopHeap) Push(x any) {
	l := x.(*loop)
	l.idx = len(*h)
	*h = append(*h, l)
}

func (h *loopHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.idx = -1
	return l
}
