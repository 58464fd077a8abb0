package client

import (
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/transport"
)

// WithClock returns cfg with the sessions' clock (lease accounting,
// KeepAlive timers, grace period) set to clk. Only tests may substitute the
// clock.
func WithClock(cfg Config, clk monotime.Clock) Config {
	cfg.clock = clk
	return cfg
}

// ExactLease reports whether this build makes lock contexts and the session
// state exact (false under the lockcell_weaken_lockctx tag).
const ExactLease = exactLease

// Dialing reports whether the client is dialing a replica now (not
// counting the connections of a search for the master).
func Dialing(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.dial != nil
}

// HoldKeepAlives makes s lose the replies to the KeepAlives it sends from
// now on (hold true): the master gets each and renews the lease, but the
// session never hears, so its local lease runs out. false lets the next
// replies through.
func HoldKeepAlives(s *Session, hold bool) { s.holdKA.Store(hold) }

// CurrentConn returns the client's current connection (nil if none).
func CurrentConn(c *Client) *transport.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.conn
}

// OnDrain has f told (under the client's lock: f must not block or call
// the client) of every connection a redirect retires while calls are
// still on it.
func OnDrain(c *Client, f func(*transport.ClientConn)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.onDrain = f
}

// Lookups returns how many searches for the master the client started,
// how many liveness probes it sent, and whether a search is under way.
func Lookups(c *Client) (lookups, probes uint64, busy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.lookups, c.mu.probes, c.mu.look != nil
}

// QueuedOpens returns how many NewSession calls wait for the next
// CreateSessions call (createbatch.go).
func QueuedOpens(c *Client) int {
	c.opens.mu.Lock()
	defer c.opens.mu.Unlock()
	return len(c.opens.mu.queue)
}

// OpenBatches returns how many CreateSessions calls the client sent.
func OpenBatches(c *Client) uint64 { return c.opens.calls.Load() }

// HeldSessions returns how many sessions the client holds.
func HeldSessions(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.sessions)
}
