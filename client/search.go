package client

import (
	"context"
	"fmt"
	"sync"
)

// One search for the master per client, however many sessions look.
//
// A session whose KeepAlive goes unanswered past the master's cadence (or
// fails without naming a successor, or lapses into jeopardy) looks for the
// serving master (findServingMaster). The sessions of one client share its
// connection, so when the master is slow, cut off or gone they all notice
// at about the same moment. Each running a search of its own cost one
// handshake per replica per session: with thousands of sessions on a
// client, thousands of TLS handshakes at once, which saturated the
// client's process and the replicas, kept the KeepAlives that would have
// ended the silence from being read or answered, and made a new
// connection's dial time out ("no replica answered within 3 s") while
// opening 100,000 sessions. So a search runs once per client: the first
// session to look starts it, the others that look while it runs wait for
// its result, and it ends with its result or when the last of them has
// stopped waiting.

// searches is a client's search for the serving master, if one runs.
type searches struct {
	mu  sync.Mutex
	cur *search // guarded by mu; nil if none runs
	// started counts the searches begun (tests: SearchesStarted).
	started uint64 // guarded by mu
}

// search is one search for the serving master and the sessions waiting
// for it.
type search struct {
	done    chan struct{} // closed once addr and err are set
	addr    string
	err     error
	waiters int // guarded by searches.mu
	cancel  context.CancelFunc
}

// sharedSearch returns the address of the serving master, as
// findServingMaster does, from the search the client runs now or from a
// new one. It returns ctx's error (wrapped) if ctx ends first; the search
// goes on while another session waits for it.
func (c *Client) sharedSearch(ctx context.Context) (string, error) {
	c.search.mu.Lock()
	s := c.search.cur
	if s == nil {
		sctx, cancel := context.WithCancel(c.ctx)
		s = &search{done: make(chan struct{}), cancel: cancel}
		c.search.cur = s
		c.search.started++
		go func() {
			addr, err := c.findServingMaster(sctx)
			c.search.mu.Lock()
			if c.search.cur == s {
				c.search.cur = nil
			}
			s.addr, s.err = addr, err
			c.search.mu.Unlock()
			close(s.done)
			cancel()
		}()
	}
	s.waiters++
	c.search.mu.Unlock()
	select {
	case <-s.done:
		return s.addr, s.err
	case <-ctx.Done():
		c.search.mu.Lock()
		if s.waiters--; s.waiters == 0 {
			// Nobody waits for it any more: end it, and let the next
			// session to look start afresh.
			if c.search.cur == s {
				c.search.cur = nil
			}
			s.cancel()
		}
		c.search.mu.Unlock()
		return "", fmt.Errorf("client: looking for the master: %w", ctx.Err())
	}
}
