package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/internal/proccell"
)

// TestRollingRestart follows the rolling-restart runbook of
// docs/operations.md on a cell of five real `lockcelld serve` processes:
// every follower in turn is stopped (SIGTERM), started again and waited
// for until it is ready (/readyz) and has applied everything the master
// had chosen when it came back; then `lockctl cell stepdown` hands
// mastership over, and the old master, now a follower, is restarted the
// same way. Throughout, three sessions take turns on one exclusive lock and
// increment a counter file under it, and a fourth session creates files
// with contents. At the end no session went into jeopardy or expired, no
// holder lost a lock it held, every acknowledged write is in the cell, and
// the holds, stamped on this process's monotonic clock, never overlapped.
//
// Nothing here is timed: every wait is for a condition, with a generous
// bound that only stops a stuck run.
func TestRollingRestart(t *testing.T) {
	began := time.Now()
	c := startProcCell(t, 5)
	lockctl := lockctlBinary(t)
	t.Logf("%v: cell of five processes up", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l := c.startRollLoad(ctx, 3)
	defer l.stop()
	c.rollWaitProgress(ctx, l, "the load to start")
	t.Logf("%v: load running: %s", time.Since(began).Round(time.Millisecond), l.summary())

	// The followers, one at a time. The master is looked up before each
	// restart: should mastership move on its own (a loaded machine), the
	// replica that holds it is still the one left for last.
	done := map[int]bool{}
	for len(done) < c.n-1 {
		m := c.waitMaster()
		id := 0
		for _, f := range c.followers(m) {
			if !done[f] {
				id = f
				break
			}
		}
		if id == 0 {
			break // the master moved to the only replica not yet restarted
		}
		c.rollRestart(ctx, l, id)
		done[id] = true
	}

	// The master last, after handing mastership over.
	m := 0
	for id := 1; id <= c.n; id++ {
		if !done[id] {
			m = id
		}
	}
	c.rollWaitCaughtUp(ctx, 0)
	if c.waitMaster() != m {
		t.Logf("replica %d, the last to restart, lost mastership on its own; restarting it as a follower", m)
		c.rollRestart(ctx, l, m)
	} else {
		out, err := exec.CommandContext(ctx, lockctl, "--config", filepath.Join(c.dir, "admin.json"), "cell", "stepdown").CombinedOutput()
		if err != nil {
			t.Fatalf("lockctl cell stepdown: %v\n%s", err, out)
		}
		t.Logf("$ lockctl cell stepdown\n%s", strings.TrimSpace(string(out)))
		var next int
		if !pollUntil(ctx, func() bool {
			next = c.master()
			st, ok := c.status(m)
			return next != 0 && next != m && ok && st.Role != api.RoleMaster && st.Master == uint64(next)
		}) {
			t.Fatalf("no hand-over: replica %d still master or no other master known (ctx: %v)", m, ctx.Err())
		}
		t.Logf("replica %d handed mastership over to replica %d", m, next)
		c.rollRestart(ctx, l, m)
	}

	l.stop()
	c.rollWaitCaughtUp(ctx, 0)
	l.check(c)
}

// lockctlBinary builds cmd/lockctl once per test run, beside lockcelld.
var lockctlOnce struct {
	sync.Once
	bin string
	err error
}

func lockctlBinary(t *testing.T) string {
	t.Helper()
	lockcelldBinary(t) // makes buildDir
	lockctlOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		lockctlOnce.bin, lockctlOnce.err = proccell.Build(ctx, buildDir, "lockctl", "", "github.com/lockcell/lockcell/cmd/lockctl")
	})
	if lockctlOnce.err != nil {
		t.Fatal(lockctlOnce.err)
	}
	return lockctlOnce.bin
}

// rollRestart restarts replica id (SIGTERM, start) and waits until it is
// caught up and the load has made progress with it back.
func (c *procCell) rollRestart(ctx context.Context, l *rollLoad, id int) {
	c.t.Helper()
	if m := c.master(); m == id {
		c.t.Fatalf("replica %d is master: the runbook restarts followers only", id)
	}
	c.stop(id, syscall.SIGTERM)
	c.start(id)
	c.rollWaitCaughtUp(ctx, id)
	c.rollWaitProgress(ctx, l, fmt.Sprintf("the load to go on after replica %d's restart", id))
	c.t.Logf("%v: replica %d restarted and caught up; %s", time.Since(l.began).Round(time.Millisecond), id, l.summary())
}

// rollWaitCaughtUp waits until replica id (every running replica if id is
// 0) answers /readyz with 200 and has applied at least the slot the master
// reported chosen once it was ready.
func (c *procCell) rollWaitCaughtUp(ctx context.Context, id int) {
	c.t.Helper()
	ids := []int{id}
	if id == 0 {
		ids = c.ids()
	}
	for _, id := range ids {
		var code int
		var body string
		if !pollUntil(ctx, func() bool { code, body = c.probe(ctx, id, "/readyz"); return code == http.StatusOK }) {
			c.t.Fatalf("replica %d never ready: %d %q", id, code, body)
		}
		var target uint64
		if !pollUntil(ctx, func() bool {
			m := c.master()
			st, ok := c.status(m)
			target = st.Chosen
			return m != 0 && ok
		}) {
			c.t.Fatalf("no master to measure replica %d's catch-up against", id)
		}
		var st procStatus
		if !pollUntil(ctx, func() bool {
			var ok bool
			st, ok = c.status(id)
			return ok && st.Applied >= target
		}) {
			c.t.Fatalf("replica %d applied %d, never reached the master's chosen slot %d", id, st.Applied, target)
		}
	}
}

// rollWaitProgress waits until every locker completed two more holds and
// the writer five more creates; it fails at once on a loss.
func (c *procCell) rollWaitProgress(ctx context.Context, l *rollLoad, what string) {
	c.t.Helper()
	before := l.progress()
	var lost []string
	if !pollUntil(ctx, func() bool {
		now := l.progress()
		if lost = now.lost; len(lost) > 0 {
			return true // no point waiting: the test fails
		}
		for i := range now.holds {
			if now.holds[i] < before.holds[i]+2 {
				return false
			}
		}
		return now.creates >= before.creates+5
	}) {
		c.t.Fatalf("waited for %s: %s", what, l.summary())
	}
	if len(lost) > 0 {
		c.t.Fatalf("while waiting for %s: %d losses, the first: %q", what, len(lost), lost[:min(5, len(lost))])
	}
}

// rollLoad is the client load of TestRollingRestart: lockers that take
// turns on one exclusive lock and increment a counter under it, and a
// writer that creates files with contents.
type rollLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	began  time.Time // for the log only

	mu struct {
		sync.Mutex
		holds    []int       // completed holds per locker
		spans    []rollSpan  // every hold, on this process's monotonic clock
		counters []rollWrite // acknowledged counter writes
		creates  []string    // acknowledged creates
		lost     []string    // locks lost while held, sessions lost
		failed   int         // calls that failed (not acknowledged)
		failures []string    // the first few failures
	}
}

// rollSpan is one hold of the lock: from the moment Acquire returned to
// the moment before Release was sent.
type rollSpan struct {
	locker     int
	start, end monotime.Time
}

// rollWrite is an acknowledged counter write made under the lock.
type rollWrite struct {
	start monotime.Time // the hold it was made in
	value int
}

type rollProgress struct {
	holds   []int
	creates int
	lost    []string
}

const (
	rollLockPath    = "/t/roll-lock"
	rollCounterPath = "/t/roll-counter"
)

// startRollLoad starts lockers sessions on the lock and one writer.
func (c *procCell) startRollLoad(ctx context.Context, lockers int) *rollLoad {
	c.t.Helper()
	lctx, cancel := context.WithCancel(ctx)
	l := &rollLoad{cancel: cancel, began: time.Now()}
	l.mu.holds = make([]int, lockers)
	// Create the lock and the counter first.
	cl, s := c.session(ctx)
	for _, p := range []struct {
		path     string
		contents string
	}{{rollLockPath, ""}, {rollCounterPath, "0"}} {
		if _, err := s.Open(ctx, p.path, client.OpenOptions{Create: true, Contents: []byte(p.contents)}); err != nil {
			c.t.Fatalf("creating %s: %v", p.path, err)
		}
	}
	_ = s.Close(ctx)
	_ = cl.Close()
	for i := range lockers {
		cl, s := c.session(ctx)
		l.watchSession(fmt.Sprintf("locker %d", i), s)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer cl.Close()
			l.locker(lctx, i, s)
		}()
	}
	cl, s = c.session(ctx)
	l.watchSession("writer", s)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer cl.Close()
		l.writer(lctx, s)
	}()
	c.t.Cleanup(l.stop)
	return l
}

// watchSession records every jeopardy and expiry of s, and its end for
// any reason but Close.
func (l *rollLoad) watchSession(name string, s *client.Session) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		seen := func(ev client.Event) {
			if ev.Kind == client.EventJeopardy || ev.Kind == client.EventExpired && !errors.Is(s.Err(), client.ErrClosed) {
				l.lose(fmt.Sprintf("%s's session %d: %s", name, s.ID(), ev))
			}
		}
		for {
			select {
			case ev := <-s.Events():
				seen(ev)
				continue
			case <-s.Done():
			}
			break
		}
		for {
			select {
			case ev := <-s.Events():
				seen(ev)
				continue
			default:
			}
			break
		}
		if err := s.Err(); !errors.Is(err, client.ErrClosed) {
			l.lose(fmt.Sprintf("%s's session %d ended: %v", name, s.ID(), err))
		}
		if n := s.DroppedEvents(); n > 0 {
			l.lose(fmt.Sprintf("%s's session %d dropped %d events unread: jeopardy cannot be judged", name, s.ID(), n))
		}
	}()
}

func (l *rollLoad) lose(what string) {
	l.mu.Lock()
	l.mu.lost = append(l.mu.lost, what)
	l.mu.Unlock()
}

func (l *rollLoad) fail(what string, err error) {
	l.mu.Lock()
	l.mu.failed++
	if len(l.mu.failures) < 10 {
		l.mu.failures = append(l.mu.failures, what+": "+err.Error())
	}
	l.mu.Unlock()
}

// locker takes the lock, increments the counter under it and releases it,
// until ctx ends.
func (l *rollLoad) locker(ctx context.Context, i int, s *client.Session) {
	var h *client.Handle
	for ctx.Err() == nil {
		if h == nil {
			var err error
			if h, err = s.Open(ctx, rollLockPath, client.OpenOptions{}); err != nil {
				l.fail("open the lock", err)
				rollPause(ctx)
				continue
			}
		}
		lk, err := h.Acquire(ctx, api.LockExclusive)
		if err != nil {
			if ctx.Err() == nil {
				l.fail("acquire", err)
			}
			rollPause(ctx)
			continue
		}
		start := monotime.Now()
		if err := lk.Err(); err != nil {
			l.lose(fmt.Sprintf("locker %d: lock lost as Acquire returned: %v", i, err))
		}
		value, acked := l.increment(ctx, s)
		if err := lk.Err(); err != nil {
			l.lose(fmt.Sprintf("locker %d: lock (generation %d) lost while held: %v", i, lk.Generation(), err))
		}
		end := monotime.Now()
		l.mu.Lock()
		l.mu.spans = append(l.mu.spans, rollSpan{locker: i, start: start, end: end})
		if acked {
			l.mu.counters = append(l.mu.counters, rollWrite{start: start, value: value})
		}
		l.mu.holds[i]++
		l.mu.Unlock()
		// The release runs to its end even when the test is stopping, so
		// that a lock is never left behind for the next holder to wait out.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := lk.Release(rctx); err != nil {
			l.lose(fmt.Sprintf("locker %d: release of generation %d: %v", i, lk.Generation(), err))
		}
		cancel()
	}
}

// increment reads the counter and writes it plus one; it reports the value
// written and whether the cell acknowledged the write.
func (l *rollLoad) increment(ctx context.Context, s *client.Session) (int, bool) {
	h, err := s.Open(ctx, rollCounterPath, client.OpenOptions{})
	if err != nil {
		if ctx.Err() == nil {
			l.fail("open the counter", err)
		}
		return 0, false
	}
	defer func() { _ = h.Close(context.WithoutCancel(ctx)) }()
	b, _, err := h.GetContents(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.fail("read the counter", err)
		}
		return 0, false
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		l.lose(fmt.Sprintf("counter holds %q, not a number", b))
		return 0, false
	}
	if _, err := h.SetContents(ctx, []byte(strconv.Itoa(n+1))); err != nil {
		if ctx.Err() == nil {
			l.fail("write the counter", err)
		}
		return 0, false
	}
	return n + 1, true
}

// writer creates /t/roll-f<i> with contents until ctx ends.
func (l *rollLoad) writer(ctx context.Context, s *client.Session) {
	for i := 0; ctx.Err() == nil; i++ {
		path := fmt.Sprintf("/t/roll-f%d", i)
		_, err := s.Open(ctx, path, client.OpenOptions{MustCreate: true, Contents: []byte(rollPayload(path))})
		if err == nil {
			l.mu.Lock()
			l.mu.creates = append(l.mu.creates, path)
			l.mu.Unlock()
		} else if ctx.Err() == nil {
			l.fail("create "+path, err)
		}
		if err != nil {
			rollPause(ctx)
		}
	}
}

func rollPayload(path string) string { return "contents of " + path }

func (l *rollLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

func (l *rollLoad) progress() rollProgress {
	l.mu.Lock()
	defer l.mu.Unlock()
	return rollProgress{holds: slices.Clone(l.mu.holds), creates: len(l.mu.creates), lost: slices.Clone(l.mu.lost)}
}

func (l *rollLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("holds per locker %v, %d counter writes and %d creates acknowledged, %d calls failed, %d losses",
		l.mu.holds, len(l.mu.counters), len(l.mu.creates), l.mu.failed, len(l.mu.lost))
}

// check judges the load's record after it stopped: no losses, no
// overlapping holds, acknowledged counter writes in hold order, every
// acknowledged create present with its contents. It fails below a floor of
// judged holds and writes.
func (l *rollLoad) check(c *procCell) {
	t := c.t
	t.Helper()
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("judged: %d holds, %d acknowledged counter writes, %d acknowledged creates; %d calls failed (not acknowledged; allowed): %q",
		len(l.mu.spans), len(l.mu.counters), len(l.mu.creates), l.mu.failed, l.mu.failures)
	if len(l.mu.spans) < 30 || len(l.mu.counters) < 30 || len(l.mu.creates) < 50 {
		t.Fatalf("too little judged (floor: 30 holds, 30 counter writes, 50 creates)")
	}
	for _, s := range l.mu.lost {
		t.Errorf("lost: %s", s)
	}
	// Mutual exclusion: sorted by start, each hold ends before the next
	// begins.
	spans := slices.Clone(l.mu.spans)
	slices.SortFunc(spans, func(a, b rollSpan) int { return cmpMono(a.start, b.start) })
	overlaps := 0
	for i := 1; i < len(spans); i++ {
		if p, s := spans[i-1], spans[i]; s.start.Before(p.end) {
			overlaps++
			if overlaps <= 5 {
				t.Errorf("holds overlap: locker %d held until %v after locker %d took the lock", p.locker, p.end.Sub(s.start), s.locker)
			}
		}
	}
	if overlaps > 0 {
		t.Errorf("%d overlapping holds of %d", overlaps, len(spans))
	}
	// Acknowledged counter writes, in the order of their holds, strictly
	// increase: two holders that read the same value would write the same.
	w := slices.Clone(l.mu.counters)
	slices.SortFunc(w, func(a, b rollWrite) int { return cmpMono(a.start, b.start) })
	for i := 1; i < len(w); i++ {
		if w[i].value <= w[i-1].value {
			t.Errorf("acknowledged counter writes out of order: %d after %d", w[i].value, w[i-1].value)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, s := c.session(ctx)
	defer cl.Close()
	h, err := s.Open(ctx, rollCounterPath, client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := h.GetContents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(string(b)); err != nil || len(w) > 0 && n < w[len(w)-1].value {
		t.Errorf("counter holds %q; the last acknowledged write was %d", b, w[len(w)-1].value)
	}
	missing := 0
	for _, p := range l.mu.creates {
		h, err := s.Open(ctx, p, client.OpenOptions{})
		var got []byte
		if err == nil {
			got, _, err = h.GetContents(ctx)
			_ = h.Close(ctx)
		}
		switch {
		case errors.Is(err, api.ErrNotFound):
			missing++
			t.Errorf("acknowledged create %s is missing", p)
		case err != nil:
			t.Fatalf("reading %s: %v", p, err)
		case string(got) != rollPayload(p):
			missing++
			t.Errorf("%s holds %q, want %q", p, got, rollPayload(p))
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged creates missing or wrong", missing, len(l.mu.creates))
	}
}

func cmpMono(a, b monotime.Time) int {
	switch {
	case a.Before(b):
		return -1
	case b.Before(a):
		return 1
	}
	return 0
}

// rollPause waits a little after a failed call, so that a loop of failures
// does not spin.
func rollPause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}
