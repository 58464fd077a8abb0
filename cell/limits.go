package cell

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// Master-side limits per tenant. The quotas that bound state
// (nodes, bytes, sessions, held locks, contents size) are enforced where the
// state changes, in namespace's apply, so they hold across fail-over. The
// limits here bound what lives only in the master's memory or time: the
// rate of calls (TenantQuota.OpsPerSecond), the KeepAlive budget
// (KeepAlivesPerSecond), blocked Acquire calls (MaxWaiters) and concurrent
// reads (fair share). Their values come from the replicated tenant record,
// so a new master applies the same limits; the token buckets and counts
// themselves start afresh with each master, which errs on the side of the
// tenant for at most one second's burst.

// bucket is a token bucket. The zero value is full on first use.
type bucket struct {
	tokens float64
	last   monotime.Time
	used   bool
}

// take takes one token at now from a bucket refilled at rate per second up
// to burst, and reports whether one was there; if not, wait is how long
// until one will be. rate 0 means unlimited.
func (b *bucket) take(now monotime.Time, rate, burst float64) (ok bool, wait time.Duration) {
	if rate <= 0 {
		return true, 0
	}
	if burst < 1 {
		burst = 1
	}
	if !b.used {
		b.used, b.tokens, b.last = true, burst, now
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(burst, b.tokens+el.Seconds()*rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// takeUpTo takes as many of n tokens as the bucket holds at now (see
// take), and reports how many it took; if fewer than n, wait is how long
// until the next token.
func (b *bucket) takeUpTo(now monotime.Time, rate, burst float64, n int) (took int, wait time.Duration) {
	for took < n {
		ok, w := b.take(now, rate, burst)
		if !ok {
			return took, w
		}
		took++
	}
	return took, 0
}

// tenantLimits is one tenant's master-side accounting.
type tenantLimits struct {
	quota      api.TenantQuota
	loaded     bool
	ops        bucket
	keepalives bucket
	waiters    uint64
	reads      int // reads in progress
	readQueue  int // reads waiting for a slot
	readFree   chan struct{}
}

// limiter holds the master's per-tenant limits.
type limiter struct {
	d limiterDeps

	mu struct {
		sync.Mutex
		tenants map[string]*tenantLimits
	}
}

// limiterDeps is everything the limiter needs from outside: two numbers of
// the replica's configuration and the functions its master role builds
// (newMaster). Every function must be set.
type limiterDeps struct {
	// quota returns tenant's quota from the applied state, and false if
	// the tenant does not exist (or its record cannot be read now). It is
	// called with the limiter's mutex held, so it must not call back into
	// the limiter.
	quota func(tenant string) (api.TenantQuota, bool)
	// readCap is Config.TenantReadConcurrency: the reads a tenant may run
	// at once per unit of weight.
	readCap int
	// queue is Config.TenantQueue: the reads a tenant may have waiting per
	// unit of weight before more are shed.
	queue int
	// shed counts a call of tenant refused by a limit, by reason.
	shed func(tenant, reason string)
	// now is the monotonic clock the token buckets refill by.
	now func() monotime.Time
}

func newLimiter(d limiterDeps) *limiter {
	l := &limiter{d: d}
	l.mu.tenants = map[string]*tenantLimits{}
	return l
}

// tenantLocked returns tenant's accounting, loading its quota from the
// applied state on first use.
// REQUIRES: l.mu held.
func (l *limiter) tenantLocked(tenant string) *tenantLimits {
	t := l.mu.tenants[tenant]
	if t == nil {
		t = &tenantLimits{readFree: make(chan struct{}, 1)}
		l.mu.tenants[tenant] = t
	}
	if !t.loaded {
		if q, ok := l.d.quota(tenant); ok {
			t.quota, t.loaded = q, true
		}
		// A tenant that does not exist has no limits here: every call of
		// its principals fails in the namespace (Unauthenticated).
	}
	return t
}

// setQuota records a tenant's quota as just applied (create or update).
func (l *limiter) setQuota(tenant string, q api.TenantQuota) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenantLocked(tenant)
	t.quota, t.loaded = q, true
}

// quota returns tenant's quota as the master knows it.
func (l *limiter) quota(tenant string) api.TenantQuota {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tenantLocked(tenant).quota
}

// weight returns tenant's fair-share weight (at least 1).
func weightOf(q api.TenantQuota) int {
	switch {
	case q.Weight == 0:
		return 1
	case q.Weight > 1000:
		return 1000
	}
	return int(q.Weight)
}

// allowOp charges one call of tenant against its OpsPerSecond.
func (l *limiter) allowOp(tenant string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenantLocked(tenant)
	rate := float64(t.quota.OpsPerSecond)
	if ok, wait := t.ops.take(l.d.now(), rate, rate); !ok {
		l.d.shed(tenant, "ops_per_second")
		return api.RetryAfterError(fmt.Sprintf("tenant %q: quota ops_per_second (%d) exceeded", tenant, t.quota.OpsPerSecond), wait)
	}
	return nil
}

// allowOps charges up to n calls of tenant against its OpsPerSecond, as
// n calls of allowOp would, and returns how many it let in; none let in is
// the error allowOp returns. A call admitted as several (CreateSessions)
// then sheds the rest with shed, which carries the wait until the next
// token.
func (l *limiter) allowOps(tenant string, n int) (granted int, shed error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenantLocked(tenant)
	rate := float64(t.quota.OpsPerSecond)
	granted, wait := t.ops.takeUpTo(l.d.now(), rate, rate, n)
	if granted == n {
		return n, nil
	}
	l.d.shed(tenant, "ops_per_second")
	shed = api.RetryAfterError(fmt.Sprintf("tenant %q: quota ops_per_second (%d) exceeded", tenant, t.quota.OpsPerSecond), wait)
	if granted == 0 {
		return 0, shed
	}
	return granted, shed
}

// allowKeepAlive charges one KeepAlive of tenant against its budget.
func (l *limiter) allowKeepAlive(tenant string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenantLocked(tenant)
	rate := float64(t.quota.KeepAlivesPerSecond)
	if ok, wait := t.keepalives.take(l.d.now(), rate, rate); !ok {
		l.d.shed(tenant, "keepalives_per_second")
		return api.RetryAfterError(fmt.Sprintf("tenant %q: quota keepalives_per_second (%d) exceeded", tenant, t.quota.KeepAlivesPerSecond), wait)
	}
	return nil
}

// addWaiter counts a new blocked Acquire of tenant against MaxWaiters; the
// caller must call removeWaiter when it stops waiting.
func (l *limiter) addWaiter(tenant string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenantLocked(tenant)
	if max := t.quota.MaxWaiters; max != 0 && t.waiters >= max {
		l.d.shed(tenant, "max_waiters")
		return api.QuotaError(tenant, "max_waiters", max)
	}
	t.waiters++
	return nil
}

func (l *limiter) removeWaiter(tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.mu.tenants[tenant]; t != nil && t.waiters > 0 {
		t.waiters--
	}
}

// waiters returns tenant's blocked Acquire calls.
func (l *limiter) waiters(tenant string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.mu.tenants[tenant]; t != nil {
		return t.waiters
	}
	return 0
}

// beginRead admits one read of tenant: at most readCap×weight run at once
// per tenant, and as many again may wait for a slot; beyond that the read
// is shed. The returned end must be called when the read is done.
func (l *limiter) beginRead(done <-chan struct{}, tenant string) (end func(), err error) {
	capOf := func(t *tenantLimits) int { return l.d.readCap * weightOf(t.quota) }
	l.mu.Lock()
	t := l.tenantLocked(tenant)
	if t.reads < capOf(t) {
		t.reads++
		l.mu.Unlock()
		return func() { l.endRead(t) }, nil
	}
	// Reads are short: queue as many as the tenant may queue proposals
	// (TenantQueue per unit of weight) before shedding, so that one tenant
	// alone on the cell is never refused.
	if t.readQueue >= l.d.queue*weightOf(t.quota) {
		l.mu.Unlock()
		l.d.shed(tenant, "read_concurrency")
		return nil, api.RetryAfterError(fmt.Sprintf("tenant %q: too many concurrent reads; the master is saturated", tenant), 10*time.Millisecond)
	}
	t.readQueue++
	l.mu.Unlock()
	for {
		select {
		case <-t.readFree:
		case <-done:
			l.mu.Lock()
			t.readQueue--
			l.mu.Unlock()
			return nil, errCanceled
		}
		l.mu.Lock()
		if t.reads < capOf(t) {
			t.reads++
			t.readQueue--
			more := t.readQueue > 0 && t.reads < capOf(t)
			l.mu.Unlock()
			if more {
				l.signal(t)
			}
			return func() { l.endRead(t) }, nil
		}
		l.mu.Unlock()
	}
}

func (l *limiter) endRead(t *tenantLimits) {
	l.mu.Lock()
	t.reads--
	waiting := t.readQueue > 0
	l.mu.Unlock()
	if waiting {
		l.signal(t)
	}
}

func (l *limiter) signal(t *tenantLimits) {
	select {
	case t.readFree <- struct{}{}:
	default:
	}
}

var errCanceled = apiErr(api.Canceled, "the request was canceled")
