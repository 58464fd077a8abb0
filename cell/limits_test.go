package cell

import (
	"errors"
	"math"
	"strings"
	"testing"
	"testing/quick"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// TestBucket checks the token bucket against its definition: a full burst
// at first, then exactly rate tokens per second, never more than burst.
func TestBucket(t *testing.T) {
	var b bucket
	now := monotime.Time(1_000_000)
	for i := 0; i < 5; i++ {
		if ok, _ := b.take(now, 5, 5); !ok {
			t.Fatalf("take %d of a full bucket of 5 refused", i)
		}
	}
	ok, wait := b.take(now, 5, 5)
	if ok || wait != 200*time.Millisecond {
		t.Fatalf("empty bucket: ok=%v wait=%v; want refused, 200ms", ok, wait)
	}
	now = now.Add(200 * time.Millisecond)
	if ok, _ := b.take(now, 5, 5); !ok {
		t.Fatal("a token refilled after 1/rate was refused")
	}
	if ok, _ := b.take(now, 5, 5); ok {
		t.Fatal("1/rate refilled more than one token")
	}
	now = now.Add(time.Hour)
	n := 0
	for {
		if ok, _ := b.take(now, 5, 5); !ok {
			break
		}
		n++
	}
	if n != 5 {
		t.Fatalf("after an idle hour the bucket gave %d tokens; want the burst, 5", n)
	}
	if ok, _ := b.take(now, 0, 0); !ok {
		t.Fatal("rate 0 (unlimited) refused")
	}
}

// TestBucketProperty: over any schedule of takes, the tokens granted never
// exceed burst + rate × elapsed (the dumb reference bound).
func TestBucketProperty(t *testing.T) {
	f := func(rate8 uint8, gaps []uint16) bool {
		rate := float64(rate8%50 + 1)
		var b bucket
		start := monotime.Time(0)
		now := start
		granted := 0
		for _, g := range gaps {
			now = now.Add(time.Duration(g%100) * time.Millisecond)
			if ok, _ := b.take(now, rate, rate); ok {
				granted++
			}
		}
		bound := rate + rate*now.Sub(start).Seconds()
		return float64(granted) <= math.Floor(bound)+1e-9
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

// limRecord is what a test limiter reported through its deps.
type limRecord struct {
	now    monotime.Time
	loads  map[string]int // quota look-ups per tenant
	shed   map[string]int // "tenant/reason" → count
	quotas map[string]api.TenantQuota
}

// testLimiter builds a limiter on fake dependencies alone: quotas from a
// map (a tenant not in it does not exist), a clock that moves only when
// the test moves rec.now, and a shed counter.
func testLimiter(readCap, queue int, quotas map[string]api.TenantQuota) (*limiter, *limRecord) {
	rec := &limRecord{now: monotime.Time(1_000_000), loads: map[string]int{}, shed: map[string]int{}, quotas: quotas}
	l := newLimiter(limiterDeps{
		quota: func(tenant string) (api.TenantQuota, bool) {
			rec.loads[tenant]++
			q, ok := rec.quotas[tenant]
			return q, ok
		},
		readCap: readCap,
		queue:   queue,
		shed:    func(tenant, reason string) { rec.shed[tenant+"/"+reason]++ },
		now:     func() monotime.Time { return rec.now },
	})
	return l, rec
}

// TestLimiterShedding: each master-side limit sheds on its own quota,
// taken from the applied state (here a map) once per tenant, with
// ResourceExhausted naming the quota, a RetryAfter where waiting helps,
// and one shed count by reason; another tenant is not affected; a tenant
// that does not exist yet is looked up again until it does.
func TestLimiterShedding(t *testing.T) {
	l, rec := testLimiter(1, 1, map[string]api.TenantQuota{
		"a": {OpsPerSecond: 2, KeepAlivesPerSecond: 1, MaxWaiters: 1},
		"b": {},
	})
	refused := func(err error, quota string, retry bool) bool {
		var ae *api.Error
		return errors.As(err, &ae) && ae.Code == api.ResourceExhausted && strings.Contains(ae.Msg, quota) && (ae.RetryAfter > 0) == retry
	}
	judged := 0
	for i := 0; i < 2; i++ {
		if err := l.allowOp("a"); err != nil {
			t.Fatalf("call %d of a budget of 2: %v", i, err)
		}
	}
	if err := l.allowOp("a"); !refused(err, "ops_per_second", true) {
		t.Fatalf("third call in the same instant: %v; want ops_per_second refused with RetryAfter", err)
	}
	judged++
	for i := 0; i < 10; i++ {
		if err := l.allowOp("b"); err != nil {
			t.Fatalf("an unlimited tenant's call was refused: %v", err)
		}
	}
	rec.now = rec.now.Add(500 * time.Millisecond)
	if err := l.allowOp("a"); err != nil {
		t.Fatalf("a call after 1/rate: %v", err)
	}
	if err := l.allowKeepAlive("a"); err != nil {
		t.Fatal(err)
	}
	if err := l.allowKeepAlive("a"); !refused(err, "keepalives_per_second", true) {
		t.Fatalf("second KeepAlive of a budget of 1: %v; want keepalives_per_second refused", err)
	}
	judged++
	if err := l.addWaiter("a"); err != nil {
		t.Fatal(err)
	}
	if err := l.addWaiter("a"); !refused(err, "max_waiters", false) {
		t.Fatalf("second waiter of a maximum of 1: %v; want max_waiters refused", err)
	}
	judged++
	l.removeWaiter("a")
	if err := l.addWaiter("a"); err != nil || l.waiters("a") != 1 {
		t.Fatalf("a waiter after one left: %v (%d waiting); want admitted, 1", err, l.waiters("a"))
	}
	want := map[string]int{"a/ops_per_second": 1, "a/keepalives_per_second": 1, "a/max_waiters": 1}
	if len(rec.shed) != len(want) {
		t.Fatalf("shed counts %v; want %v", rec.shed, want)
	}
	for k, n := range want {
		if rec.shed[k] != n {
			t.Fatalf("shed counts %v; want %v", rec.shed, want)
		}
	}
	if rec.loads["a"] != 1 || rec.loads["b"] != 1 {
		t.Fatalf("quota look-ups %v; want one per tenant", rec.loads)
	}

	// A tenant unknown to the applied state has no limits here, and is
	// looked up again: once it exists, its quota applies.
	if err := l.allowOp("c"); err != nil {
		t.Fatalf("a tenant unknown to the state: %v; want no master-side limit", err)
	}
	rec.quotas["c"] = api.TenantQuota{OpsPerSecond: 1}
	if err := l.allowOp("c"); err != nil {
		t.Fatal(err)
	}
	if err := l.allowOp("c"); !refused(err, "ops_per_second", true) {
		t.Fatalf("a tenant's call beyond the quota it got since: %v; want refused", err)
	}
	judged++
	if rec.loads["c"] != 2 {
		t.Fatalf("tenant c looked up %d times; want 2 (missing, then found)", rec.loads["c"])
	}
	// setQuota (an applied quota change) replaces the loaded one.
	l.setQuota("c", api.TenantQuota{})
	if err := l.allowOp("c"); err != nil {
		t.Fatalf("after the quota was lifted: %v", err)
	}
	if judged != 4 {
		t.Fatalf("judged %d refusals; want 4", judged)
	}
}

// TestReadCap: a tenant's reads beyond its cap wait, beyond twice the cap
// they are shed, and another tenant's are not affected.
func TestReadCap(t *testing.T) { synctest.Test(t, testReadCap) }

func testReadCap(t *testing.T) {
	l, _ := testLimiter(2, 2, map[string]api.TenantQuota{"a": {}, "b": {}})
	never := make(chan struct{})
	var ends []func()
	for i := 0; i < 2; i++ {
		end, err := l.beginRead(never, "a")
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	got := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			end, err := l.beginRead(never, "a")
			if err == nil {
				end()
			}
			got <- err
		}()
	}
	// Both extra reads wait; a fifth is shed.
	synctest.Wait()
	l.mu.Lock()
	q := l.mu.tenants["a"].readQueue
	l.mu.Unlock()
	if q != 2 {
		t.Fatalf("%d reads wait; want 2", q)
	}
	if _, err := l.beginRead(never, "a"); !errors.Is(err, api.ErrResourceExhausted) {
		t.Fatalf("read beyond the queue: %v; want ResourceExhausted", err)
	}
	endB, err := l.beginRead(never, "b")
	if err != nil {
		t.Fatalf("another tenant's read: %v", err)
	}
	endB()
	for _, end := range ends {
		end()
	}
	for i := 0; i < 2; i++ {
		if err := <-got; err != nil {
			t.Fatalf("a waiting read: %v", err)
		}
	}
}
