package client

import "github.com/lockcell/lockcell/internal/monotime"

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
	return c.mu.dialing != nil
}
