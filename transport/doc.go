// Package transport moves msgpack-framed messages between lockcell
// replicas, and between clients and replicas, over QUIC (quic-go) with
// TLS 1.3. It does not interpret the messages: it knows nothing of Paxos or
// locks. It imports nothing of lockcell's but internal/certs.
//
// # Pieces
//
//   - Frames (frame.go): WriteFrame, ReadFrame, AppendFrame and
//     Frame.Decode, the codec every layer and test shares. A frame is a
//     4-byte length, a 2-byte tag and one msgpack value; the reader checks
//     the length against a maximum before allocating and the body's
//     well-formedness before returning, and never panics.
//   - Endpoint (endpoint.go, peer.go, stream.go): one per replica, on one UDP
//     port. ALPN tells peers (ALPNPeer) from clients (ALPNClient). Peers get
//     a non-blocking Send into bounded per-peer queues and an ordered Recv
//     channel; clients get one handler call per stream (ServerStream).
//   - Dial and ClientConn (client.go): the client side; Call is one stream
//     per request, OpenStream a long-lived stream for long-polls.
//   - Faults (faults.go): drop, delay, duplicate and partition peer
//     messages, and cut clients off, switchable at run time from Go or over
//     HTTP (Faults.Handler).
//   - Stats (stats.go): counters the cell exports as metrics.
//   - transport/memnet: an in-process net.PacketConn network, so tests run
//     real QUIC under testing/synctest.
//
// # Authentication
//
// Certificates come from the cell CA (package internal/certs). A replica's
// certificate names it as the URI SAN lockcell://replica/<id>; a client's
// names lockcell://tenant/<tenant>/principal/<principal>. Peers
// authenticate both ways: each side's certificate must chain to the cell CA,
// and name the replica the dialer meant to reach or, on the accepting side,
// a configured peer. A client verifies that the replica's certificate
// chains to the CA and names a replica, and may present a client
// certificate, whose identity its handler sees (ServerStream.Identity). A
// certificate that names no replica can never open a peer connection. Only
// TLS 1.3, never 0-RTT. A client connection may resume a TLS session the
// same replica gave the same client on an earlier connection
// (DialConfig.SessionCache, Config.TicketKeyRotation): no certificate is
// signed or sent again, but both sides verify the ones the session
// carries, so the identities are those of a full handshake; peer
// connections never resume. Details in tls.go.
//
// # Timeouts
//
// Defaults fit Chubby's 12 s session lease: a 3 s handshake timeout, peer
// connections declared dead after 6 s of silence and client connections
// after 8 s (keep-alives go out every third of that, so only a dead path
// goes silent), leaving a client time to redial another replica before its
// lease runs out.
//
// # Errors
//
// Sentinels, matched with errors.Is: ErrFrameTooLarge, ErrTruncatedFrame,
// ErrMalformedFrame, ErrEncode (frames); ErrInvalidConfig; ErrClosed,
// ErrUnknownPeer (Endpoint); ErrConnClosed, ErrStreamCanceled,
// ErrFrameRejected, ErrNoReplica (streams and dialing); ErrBadCertificate
// (handshakes); ErrBadFaults (fault rules). Stream errors wrap quic-go's
// error as well, for errors.As.
//
// # Concurrency and life cycle
//
// Listen starts an Endpoint's goroutines (an accept loop, one sender per
// peer, one reader per inbound peer connection, one per client connection
// and one per client stream); Close stops them all, waits for client
// handlers to return and closes the Recv channel. Dial returns a ClientConn
// whose Close frees its socket. Everything exported is safe for concurrent
// use, except that a stream allows one reader and one writer at a time.
package transport
