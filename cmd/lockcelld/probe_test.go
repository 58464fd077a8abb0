package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/monotime"
)

// quorumProbe writes a counter file one write after another and records,
// on this process's monotonic clock, when each write was acknowledged. A
// cell without a quorum acknowledges nothing, so the longest gap between
// two acknowledged writes (or between the probe's start and its first
// acknowledged write, or its last and the probe's end) bounds the longest
// time the cell went without a quorum and a master. Every acknowledged
// value must still be readable at the end: the file holds at least the
// last one.
type quorumProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
	path   string

	mu struct {
		sync.Mutex
		began, ended monotime.Time
		stopped      bool            // ended is set
		acks         []monotime.Time // when each write was acknowledged
		last         int             // the last value acknowledged
		failed       int             // writes not acknowledged (allowed)
		failures     []string        // the first few
		lost         []string        // the session's jeopardy or end
	}
}

// startQuorumProbe starts a probe of tenant "t" on path, with a session of
// its own.
func (c *procCell) startQuorumProbe(ctx context.Context, path string) *quorumProbe {
	c.t.Helper()
	pctx, cancel := context.WithCancel(ctx)
	p := &quorumProbe{cancel: cancel, done: make(chan struct{}), path: path}
	cl, s := c.session(ctx)
	h, err := s.Open(ctx, path, client.OpenOptions{Create: true, Contents: []byte("0")})
	if err != nil {
		c.t.Fatalf("probe: creating %s: %v", path, err)
	}
	p.mu.began = monotime.Now()
	go func() {
		defer close(p.done)
		defer cl.Close()
		for n := 1; pctx.Err() == nil; {
			// A bound on each write keeps a stuck call from hiding what
			// follows; it is no measure of speed.
			wctx, wcancel := context.WithTimeout(pctx, 30*time.Second)
			_, err := h.SetContents(wctx, []byte(strconv.Itoa(n)))
			wcancel()
			now := monotime.Now()
			p.mu.Lock()
			if err == nil {
				p.mu.acks = append(p.mu.acks, now)
				p.mu.last = n
				n++
			} else if pctx.Err() == nil {
				p.mu.failed++
				if len(p.mu.failures) < 5 {
					p.mu.failures = append(p.mu.failures, err.Error())
				}
			}
			p.mu.Unlock()
			if err != nil {
				rollPause(pctx)
			}
			select {
			case ev := <-s.Events():
				if ev.Kind == client.EventJeopardy || ev.Kind == client.EventExpired {
					p.lose(fmt.Sprintf("probe session %d: %s", s.ID(), ev))
				}
			default:
			}
			if err := s.Err(); err != nil && !errors.Is(err, client.ErrClosed) {
				p.lose(fmt.Sprintf("probe session %d ended: %v", s.ID(), err))
				return
			}
		}
	}()
	c.t.Cleanup(p.stop)
	return p
}

func (p *quorumProbe) lose(what string) {
	p.mu.Lock()
	p.mu.lost = append(p.mu.lost, what)
	p.mu.Unlock()
}

// stop ends the probe and waits for it.
func (p *quorumProbe) stop() {
	p.cancel()
	<-p.done
	p.mu.Lock()
	if !p.mu.stopped {
		p.mu.ended, p.mu.stopped = monotime.Now(), true
	}
	p.mu.Unlock()
}

// acked returns the number of acknowledged writes so far.
func (p *quorumProbe) acked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.acks)
}

// longestGap returns the longest time without an acknowledged write while
// the probe ran (up to now if it still runs), and how long after the
// probe's start that gap began.
func (p *quorumProbe) longestGap() (gap, at time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	end := p.mu.ended
	if !p.mu.stopped {
		end = monotime.Now()
	}
	prev := p.mu.began
	for _, a := range append(append([]monotime.Time(nil), p.mu.acks...), end) {
		if d := a.Sub(prev); d > gap {
			gap, at = d, prev.Sub(p.mu.began)
		}
		prev = a
	}
	return gap, at
}

// summary describes the probe for the log.
func (p *quorumProbe) summary() string {
	gap, at := p.longestGap()
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("probe: %d writes acknowledged, %d not (allowed: %q); longest gap %v, %v after its start",
		len(p.mu.acks), p.mu.failed, p.mu.failures, gap.Round(time.Millisecond), at.Round(time.Millisecond))
}

// check stops the probe and judges it: at least floor writes
// acknowledged, no gap longer than bound, the session never in jeopardy,
// and the file holding at least the last acknowledged value.
func (p *quorumProbe) check(c *procCell, floor int, bound time.Duration) {
	t := c.t
	t.Helper()
	p.stop()
	gap, at := p.longestGap()
	t.Log(p.summary())
	p.mu.Lock()
	acks, last, lost := len(p.mu.acks), p.mu.last, p.mu.lost
	p.mu.Unlock()
	if acks < floor {
		t.Errorf("probe: %d writes acknowledged; floor %d", acks, floor)
	}
	for _, l := range lost {
		t.Errorf("probe: %s", l)
	}
	if gap > bound {
		t.Errorf("probe: no write acknowledged for %v (from %v after its start): the cell was without a quorum longer than %v", gap.Round(time.Millisecond), at.Round(time.Millisecond), bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, s := c.session(ctx)
	defer cl.Close()
	h, err := s.Open(ctx, p.path, client.OpenOptions{})
	if err != nil {
		t.Fatalf("probe: opening %s: %v", p.path, err)
	}
	b, _, err := h.GetContents(ctx)
	if err != nil {
		t.Fatalf("probe: reading %s: %v", p.path, err)
	}
	if n, err := strconv.Atoi(string(b)); err != nil || n < last {
		t.Errorf("probe: %s holds %q; the last acknowledged write was %d", p.path, b, last)
	}
}
