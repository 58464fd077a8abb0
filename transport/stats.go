package transport

import "sync/atomic"

// counters are the Endpoint's live counters.
type counters struct {
	peerFramesSent, peerBytesSent         atomic.Uint64
	peerFramesReceived, peerBytesReceived atomic.Uint64
	clientFramesSent, clientBytesSent     atomic.Uint64
	clientFramesReceived                  atomic.Uint64
	clientBytesReceived                   atomic.Uint64
	dropsQueueFull, dropsFault            atomic.Uint64
	dropsDisconnected, dropsClientCut     atomic.Uint64
	dials, dialFailures, reconnects       atomic.Uint64
	refusedHandshakes, refusedConnLimit   atomic.Uint64
	refusedNotPeer                        atomic.Uint64
	clientFullHandshakes, clientResumed   atomic.Uint64
	badFrames                             atomic.Uint64
	clientConns, clientStreams            atomic.Int64
}

// Stats is a snapshot of an Endpoint's counters. Counters only grow, except
// the gauges ClientConns, ClientStreams and the per-peer Connected and
// Queued. The cell exports them as Prometheus metrics.
type Stats struct {
	// PeerFramesSent and PeerBytesSent count frames (duplicates included)
	// and bytes (headers included) written to peer streams.
	PeerFramesSent, PeerBytesSent uint64
	// PeerFramesReceived and PeerBytesReceived count frames and bytes read
	// from peer streams, before receive-side faults.
	PeerFramesReceived, PeerBytesReceived uint64
	// ClientFramesSent, ClientBytesSent, ClientFramesReceived and
	// ClientBytesReceived count the frames of client streams.
	ClientFramesSent, ClientBytesSent, ClientFramesReceived, ClientBytesReceived uint64
	// DropsQueueFull counts peer messages dropped, oldest first, because a
	// peer's queue was full.
	DropsQueueFull uint64
	// DropsFault counts peer messages dropped by injected faults, on the
	// send or the receive path.
	DropsFault uint64
	// DropsDisconnected counts peer messages lost in a batch whose
	// connection broke while it was written.
	DropsDisconnected uint64
	// DropsClientCut counts client datagrams dropped by Faults.ClientsCut.
	DropsClientCut uint64
	// Dials counts dial attempts to peers; DialFailures the ones that failed;
	// Reconnects the successful dials after a peer's first.
	Dials, DialFailures, Reconnects uint64
	// RefusedHandshakes counts handshakes this endpoint refused: a
	// certificate not from the cell CA, of the wrong kind or naming the
	// wrong replica, or no acceptable ALPN. It includes refusals of the
	// certificates of peers we dialed.
	RefusedHandshakes uint64
	// RefusedNotPeer counts the replicas refused for not being in the peer
	// set: a replica's certificate at a handshake (also counted in
	// RefusedHandshakes), or a frame on a connection accepted before
	// SetPeers took its sender out of the set.
	RefusedNotPeer uint64
	// RefusedConnLimit counts connection attempts refused by MaxConnsPerIP
	// (per Initial packet, so one attempt may count more than once).
	RefusedConnLimit uint64
	// ClientFullHandshakes and ClientResumed count the client connections
	// accepted, by how their handshake went: a full one (certificates
	// signed and checked), or the resumption of a session this replica
	// gave the client earlier (a PSK; the certificates it carries are
	// checked again, but nobody signs). See Config.TicketKeyRotation.
	ClientFullHandshakes, ClientResumed uint64
	// BadFrames counts oversize, truncated or malformed frames received
	// from peers or clients.
	BadFrames uint64
	// ClientConns and ClientStreams are the client connections and streams
	// open now.
	ClientConns, ClientStreams int64
	// Peers holds one entry per peer, by increasing id.
	Peers []PeerStats
}

// PeerStats describes the sending side towards one peer.
type PeerStats struct {
	// ID and Addr are the peer's id and configured address.
	ID   uint64
	Addr string
	// Connected reports whether an outgoing connection is up now.
	Connected bool
	// Queued is the number of messages waiting in the queue now.
	Queued int
	// Sent counts frames written; Dropped counts messages dropped for any
	// reason (queue full, fault, broken connection); Dials counts dial
	// attempts.
	Sent, Dropped, Dials uint64
}

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	c := &e.stats
	s := Stats{
		PeerFramesSent:       c.peerFramesSent.Load(),
		PeerBytesSent:        c.peerBytesSent.Load(),
		PeerFramesReceived:   c.peerFramesReceived.Load(),
		PeerBytesReceived:    c.peerBytesReceived.Load(),
		ClientFramesSent:     c.clientFramesSent.Load(),
		ClientBytesSent:      c.clientBytesSent.Load(),
		ClientFramesReceived: c.clientFramesReceived.Load(),
		ClientBytesReceived:  c.clientBytesReceived.Load(),
		DropsQueueFull:       c.dropsQueueFull.Load(),
		DropsFault:           c.dropsFault.Load(),
		DropsDisconnected:    c.dropsDisconnected.Load(),
		DropsClientCut:       c.dropsClientCut.Load(),
		Dials:                c.dials.Load(),
		DialFailures:         c.dialFailures.Load(),
		Reconnects:           c.reconnects.Load(),
		RefusedHandshakes:    c.refusedHandshakes.Load(),
		RefusedNotPeer:       c.refusedNotPeer.Load(),
		RefusedConnLimit:     c.refusedConnLimit.Load(),
		ClientFullHandshakes: c.clientFullHandshakes.Load(),
		ClientResumed:        c.clientResumed.Load(),
		BadFrames:            c.badFrames.Load(),
		ClientConns:          c.clientConns.Load(),
		ClientStreams:        c.clientStreams.Load(),
	}
	peers := e.set.Load().peers
	for _, id := range sortedPeerIDs(peers) {
		p := peers[id]
		s.Peers = append(s.Peers, PeerStats{
			ID:        id,
			Addr:      p.addr,
			Connected: p.connected.Load(),
			Queued:    p.queued(),
			Sent:      p.sent.Load(),
			Dropped:   p.dropped.Load(),
			Dials:     p.dials.Load(),
		})
	}
	return s
}
