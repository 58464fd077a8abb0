package transport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// The peer set: which replicas this endpoint dials and sends to, and whose
// connections it accepts. Config.Peers is the first set; SetPeers replaces
// it while the endpoint runs, so that the cell can follow its membership
// (a replica added, one removed, one moved to a new address) without a
// restart.

// errNotPeer ends the reading of a connection whose replica left the peer
// set.
var errNotPeer = errors.New("transport: sender is not a peer")

// peerSet is one peer set in force. It is never modified once stored:
// SetPeers builds a new one and swaps it in.
type peerSet struct {
	// peers are the replicas this endpoint sends to, each with its sender.
	peers map[uint64]*peer
	// accept are the replicas whose peer handshakes and frames are
	// accepted; a subset of peers' keys.
	accept map[uint64]bool
	// addrs holds the resolved addresses of the accepted peers: their
	// connections are exempt from MaxConnsPerIP and from ClientsCut.
	addrs map[netip.AddrPort]bool
}

// SetPeers replaces the peer set. peers maps each replica this endpoint
// exchanges messages with to its address: they are dialled and sent to,
// and their connections are accepted. sendOnly maps replicas it still
// sends to but no longer accepts: a replica removed from the cell, which
// should hear of its removal from the master's messages while everything
// it sends is refused. An entry for this endpoint's own ID is ignored;
// a replica in both maps is taken as in peers.
//
// From the moment SetPeers returns, a replica in neither map is neither
// sent to (Send returns ErrUnknownPeer) nor heard: its handshakes are
// refused, its open connections are closed with ConnCodeNotPeer, and a
// frame it sent that is still being read is dropped (all counted in
// Stats.RefusedNotPeer), as is every frame from a sendOnly replica. A
// replica that stays, at the same address, keeps its connections and
// its queue; one at a new address is dialled there afresh.
//
// It returns an error wrapping ErrInvalidConfig, and changes nothing, if
// an address does not resolve (ctx bounds the look-ups; literal IP
// addresses need none), and ErrClosed after Close.
func (e *Endpoint) SetPeers(ctx context.Context, peers, sendOnly map[uint64]string) error {
	e.setMu.Lock()
	defer e.setMu.Unlock()
	if e.ctx.Err() != nil {
		return ErrClosed
	}
	old := e.set.Load()
	next := &peerSet{peers: map[uint64]*peer{}, accept: map[uint64]bool{}, addrs: map[netip.AddrPort]bool{}}
	want := map[uint64]string{}
	for id, addr := range sendOnly {
		want[id] = addr
	}
	for id, addr := range peers {
		want[id] = addr
	}
	delete(want, e.cfg.ID)
	var started []*peer
	for id, addr := range want {
		ap, err := resolve(ctx, addr)
		if err != nil {
			return fmt.Errorf("%w: peer %d at %q: %v", ErrInvalidConfig, id, addr, err)
		}
		_, member := peers[id]
		if member {
			next.accept[id] = true
			next.addrs[ap] = true
		}
		if p, ok := old.peers[id]; ok && p.addr == addr {
			next.peers[id] = p
			continue
		}
		p := newPeer(e, id, addr)
		next.peers[id] = p
		started = append(started, p)
	}
	e.set.Store(next)
	for _, p := range started {
		p.start()
	}
	for id, p := range old.peers {
		if next.peers[id] != p {
			p.stop()
		}
	}
	// Close what the refused replicas opened to us.
	e.mu.Lock()
	var refused []*inboundPeer
	for id, in := range e.mu.inbound {
		if !next.accept[id] {
			refused = append(refused, in)
		}
	}
	e.mu.Unlock()
	for _, in := range refused {
		_ = in.conn.CloseWithError(ConnCodeNotPeer, "not a peer of this replica")
	}
	if len(started) > 0 || len(old.peers) != len(next.peers) || len(refused) > 0 {
		e.log.Info("transport: peer set changed", "peers", slices.Sorted(maps.Keys(next.accept)), "send_only", len(next.peers)-len(next.accept))
	}
	return nil
}

// Peers returns the ids of the replicas whose connections this endpoint
// accepts, in increasing order.
func (e *Endpoint) Peers() []uint64 {
	return slices.Sorted(maps.Keys(e.set.Load().accept))
}

// RefusedNotPeer is Stats().RefusedNotPeer, without the rest of Stats.
func (e *Endpoint) RefusedNotPeer() uint64 { return e.stats.refusedNotPeer.Load() }
