package client

import (
	"sync/atomic"

	"github.com/lockcell/lockcell/transport"
)

// ConnStats counts the connections a Client made to replicas, for
// operators and benchmarks: how much a fail-over cost the cell in
// handshakes.
type ConnStats struct {
	// Dials counts the connections made (handshakes that completed), for
	// every purpose: to the master, by searches for it, by Dial's probes.
	// Resumed counts those of them that resumed a TLS session the replica
	// gave on an earlier connection (no certificate signed or sent; see
	// transport.DialConfig.SessionCache) rather than a full handshake.
	Dials, Resumed uint64
	// Searches counts the searches for the master (one per fail-over the
	// client noticed, however many sessions it holds); SearchDials the
	// connections they made. A search asks on the client's own connection
	// when it can, and one replica at a time otherwise, so it makes one
	// connection or none when all goes well; when the replica it asked
	// was the master, the search's connection becomes the client's
	// (unless the client was already dialing it).
	Searches, SearchDials uint64
}

// connCounters are a Client's live counts (Config.counts).
type connCounters struct {
	dials, resumed, searchDials atomic.Uint64
}

// dialed counts cc, the result of a dial (nil: it failed).
func (k *connCounters) dialed(cc *transport.ClientConn) {
	if k == nil || cc == nil {
		return
	}
	k.dials.Add(1)
	if cc.Resumed() {
		k.resumed.Add(1)
	}
}

// ConnStats returns the counts of the connections the client made.
func (c *Client) ConnStats() ConnStats {
	c.mu.Lock()
	searches := c.mu.lookups
	c.mu.Unlock()
	k := c.cfg.counts
	return ConnStats{Dials: k.dials.Load(), Resumed: k.resumed.Load(), Searches: searches, SearchDials: k.searchDials.Load()}
}
