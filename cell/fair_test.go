package cell

import (
	"errors"
	"slices"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// schedRecord is what a test scheduler reported through its deps.
type schedRecord struct {
	queued map[string]int // the queue gauges
	shed   map[string]int // "tenant/reason" → count
	wakes  int
}

// errTestStopped stands for NotMaster in scheduler tests.
var errTestStopped = errors.New("test: the master role ended")

// testScheduler builds a scheduler on fake dependencies alone: no Replica,
// no metrics registry, no run loop.
func testScheduler(window, queue int, weights map[string]int) (*scheduler, *schedRecord) {
	rec := &schedRecord{queued: map[string]int{}, shed: map[string]int{}}
	s := newScheduler(schedDeps{
		window: window,
		queue:  queue,
		weight: func(t string) int {
			if w := weights[t]; w > 0 {
				return w
			}
			return 1
		},
		wake:    func() { rec.wakes++ },
		stopped: func() error { return errTestStopped },
		shed:    func(tenant, reason string) { rec.shed[tenant+"/"+reason]++ },
		queued:  func(tenant string, d int) { rec.queued[tenant] += d },
	})
	return s, rec
}

func submitN(t *testing.T, s *scheduler, tenant string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := s.submit(tenant, &proposal{caller: namespace.Caller{Tenant: tenant, Principal: "p"}, op: &namespace.CreateSession{}, done: func(namespace.Result, error) {}}, false); err != nil {
			t.Fatal(err)
		}
	}
}

// drainOrder takes everything the scheduler would dispatch (the window
// freed after each), in order.
func drainOrder(s *scheduler) []string {
	var out []string
	for {
		s.mu.Lock()
		tenant, it, u := s.nextLocked()
		if it != nil {
			s.mu.inflight -= u
		}
		s.mu.Unlock()
		if it == nil {
			return out
		}
		out = append(out, tenant)
	}
}

// TestSchedulerWeightedRoundRobin: a flooding tenant's backlog does not
// delay another tenant's commands beyond one turn; weights share turns.
func TestSchedulerWeightedRoundRobin(t *testing.T) {
	s, _ := testScheduler(1000, 100, map[string]int{"c": 2})
	submitN(t, s, "a", 10) // the flood arrives first
	submitN(t, s, "b", 2)
	submitN(t, s, "c", 4)
	got := drainOrder(s)
	want := []string{"a", "b", "c", "c", "a", "b", "c", "c", "a", "a", "a", "a", "a", "a", "a", "a"}
	if len(got) != len(want) {
		t.Fatalf("dispatched %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("dispatch order %v; want %v", got, want)
		}
	}
}

// TestSchedulerWindowAndShedding: at most ProposalWindow commands are out
// at once, and a tenant's full queue sheds with ResourceExhausted and a
// RetryAfter while another tenant's still accepts.
func TestSchedulerWindowAndShedding(t *testing.T) {
	s, rec := testScheduler(2, 3, nil)
	submitN(t, s, "a", 3)
	err := s.submit("a", &proposal{done: func(namespace.Result, error) {}}, false)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.ResourceExhausted || ae.RetryAfter <= 0 {
		t.Fatalf("submit to a full queue: %v; want ResourceExhausted with RetryAfter", err)
	}
	if rec.shed["a/queue_full"] != 1 || len(rec.shed) != 1 || rec.queued["a"] != 3 {
		t.Fatalf("after one shed: shed %v, queued %v; want a/queue_full once and 3 queued", rec.shed, rec.queued)
	}
	if err := s.submit("a", &proposal{done: func(namespace.Result, error) {}}, true); err != nil {
		t.Fatalf("a forced submit was shed: %v", err)
	}
	submitN(t, s, "b", 1)
	s.mu.Lock()
	var out []string
	for {
		tenant, it, _ := s.nextLocked()
		if it == nil {
			break
		}
		out = append(out, tenant)
	}
	s.mu.Unlock()
	if len(out) != 2 || out[0] != "a" || out[1] != "b" {
		t.Fatalf("with a window of 2 dispatched %v; want [a b]", out)
	}
	s.finished(1)
	s.mu.Lock()
	tenant, it, _ := s.nextLocked()
	s.mu.Unlock()
	if it == nil || tenant != "a" {
		t.Fatalf("after one finished: %q %v; want a", tenant, it)
	}
}

// TestSchedulerClose: closing answers every queued command with the
// stopped error exactly once (none was proposed), refuses later submits
// with it, wakes the run loop, and gives the queue gauges back to zero;
// a command already dispatched is not answered by close.
func TestSchedulerClose(t *testing.T) {
	s, rec := testScheduler(1, 10, map[string]int{"b": 3})
	outcomes := map[string][]error{}
	submit := func(tenant string, n int) {
		for i := 0; i < n; i++ {
			if err := s.submit(tenant, &proposal{done: func(_ namespace.Result, err error) {
				outcomes[tenant] = append(outcomes[tenant], err)
			}}, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit("a", 2)
	submit("b", 4)
	if rec.queued["a"] != 2 || rec.queued["b"] != 4 || rec.wakes != 6 {
		t.Fatalf("queued %v after %d wakes; want a:2 b:4 after 6", rec.queued, rec.wakes)
	}
	first := s.next()
	if first == nil || rec.queued["a"] != 1 {
		t.Fatalf("next: %v, queued %v; want a's first, a:1", first, rec.queued)
	}
	wakes := rec.wakes
	s.close()
	if rec.wakes != wakes+1 {
		t.Fatalf("close woke the run loop %d times; want once", rec.wakes-wakes)
	}
	if rec.queued["a"] != 0 || rec.queued["b"] != 0 {
		t.Fatalf("queue gauges after close: %v; want zero", rec.queued)
	}
	judged := 0
	for tenant, want := range map[string]int{"a": 1, "b": 4} {
		if len(outcomes[tenant]) != want {
			t.Fatalf("tenant %s: %d answers at close; want %d (its queued commands, not the dispatched one)", tenant, len(outcomes[tenant]), want)
		}
		for _, err := range outcomes[tenant] {
			if !errors.Is(err, errTestStopped) {
				t.Fatalf("a queued command was answered %v at close; want the stopped error", err)
			}
			judged++
		}
	}
	if judged != 5 {
		t.Fatalf("judged %d answers; want 5", judged)
	}
	if err := s.submit("a", &proposal{done: func(namespace.Result, error) {}}, true); !errors.Is(err, errTestStopped) {
		t.Fatalf("submit after close: %v; want the stopped error", err)
	}
	if p := s.next(); p != nil {
		t.Fatal("next after close dispatched a command")
	}
}

// TestSchedulerGroupDebt: a group costs its tenant's turn ceil(n/8)
// units, so a tenant of weight 1 that sent a group of 24 (3 units) sits
// out two turns while another tenant's single commands go, then gets its
// turn back; both queues' bounds count units.
func TestSchedulerGroupDebt(t *testing.T) {
	s, rec := testScheduler(1000, 4, nil)
	group := &proposal{done: func(namespace.Result, error) {}}
	for range 23 {
		group.members = append(group.members, &proposal{done: func(namespace.Result, error) {}})
	}
	if err := s.submit("a", group, false); err != nil {
		t.Fatal(err)
	}
	submitN(t, s, "a", 1) // 4 units queued: the bound
	err := s.submit("a", &proposal{done: func(namespace.Result, error) {}}, false)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.ResourceExhausted || rec.shed["a/queue_full"] != 1 {
		t.Fatalf("submit with 4 units queued against a bound of 4: %v; want shed", err)
	}
	submitN(t, s, "b", 4)
	var got []string
	var units []int
	for {
		s.mu.Lock()
		tenant, it, u := s.nextLocked()
		if it != nil {
			s.mu.inflight -= u
		}
		s.mu.Unlock()
		if it == nil {
			break
		}
		got = append(got, tenant)
		units = append(units, u)
	}
	want := []string{"a", "b", "b", "b", "a", "b"}
	if !slices.Equal(got, want) || units[0] != 3 || units[1] != 1 {
		t.Fatalf("dispatched %v costing %v; want %v, the first costing 3", got, units, want)
	}
}
