package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/transport/memnet"
	"github.com/vmihailenco/msgpack/v5"
)

// testLogger discards logs unless TRANSPORT_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("TRANSPORT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// simAddr is replica id's address on a memnet network.
func simAddr(id uint64) string { return fmt.Sprintf("10.0.0.%d:4000", id) }

// sim is an in-process cell network for tests under synctest: a CA, a
// memnet network and the endpoints started on it.
type sim struct {
	t      testing.TB
	ca     *certs.CA
	net    *memnet.Network
	faults *Faults
	ids    []uint64
	eps    map[uint64]*Endpoint
	// sameIP puts every replica on 10.0.0.1, at port 4000+id.
	sameIP bool
}

// addr is replica id's address.
func (s *sim) addr(id uint64) string {
	if s.sameIP {
		return fmt.Sprintf("10.0.0.1:%d", 4000+id)
	}
	return simAddr(id)
}

func newSim(t testing.TB, ids ...uint64) *sim {
	t.Helper()
	ca, err := certs.NewCA("test", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, ca: ca, net: &memnet.Network{}, faults: NewFaults(1), ids: ids, eps: map[uint64]*Endpoint{}}
}

func (s *sim) peers() map[uint64]string {
	m := map[uint64]string{}
	for _, id := range s.ids {
		m[id] = s.addr(id)
	}
	return m
}

func (s *sim) replicaCert(id uint64) tls.Certificate {
	s.t.Helper()
	c, err := s.ca.IssueReplica(id, certs.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// config returns the Config of replica id on the sim network.
func (s *sim) config(id uint64) Config {
	s.t.Helper()
	pc, err := s.net.Listen(s.addr(id))
	if err != nil {
		s.t.Fatal(err)
	}
	return Config{
		ID:          id,
		PacketConn:  pc,
		Peers:       s.peers(),
		CA:          s.ca.Pool(),
		Certificate: s.replicaCert(id),
		Faults:      s.faults,
		Logger:      testLogger().With("ep", id),
	}
}

// start starts replica id, with mod applied to its Config.
func (s *sim) start(id uint64, mod func(*Config)) *Endpoint {
	s.t.Helper()
	cfg := s.config(id)
	if mod != nil {
		mod(&cfg)
	}
	e, err := Listen(context.Background(), cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.eps[id] = e
	s.t.Cleanup(func() { e.Close() })
	return e
}

func (s *sim) startAll(mod func(*Config)) {
	for _, id := range s.ids {
		s.start(id, mod)
	}
}

func (s *sim) closeAll() {
	for id, e := range s.eps {
		e.Close()
		delete(s.eps, id)
	}
}

// clientPC returns a fresh memnet socket for a client.
var clientPort = 5000

func (s *sim) clientConn(ip string) *memnet.Conn {
	s.t.Helper()
	clientPort++
	pc, err := s.net.Listen(fmt.Sprintf("%s:%d", ip, clientPort))
	if err != nil {
		s.t.Fatal(err)
	}
	return pc
}

// recvOne waits for one message on e, failing after d of (fake) time.
func recvOne(t testing.TB, e *Endpoint, d time.Duration) PeerMessage {
	t.Helper()
	select {
	case m, ok := <-e.Recv():
		if !ok {
			t.Fatal("Recv closed")
		}
		return m
	case <-time.After(d):
		t.Fatalf("replica %d: no message within %v", e.ID(), d)
	}
	return PeerMessage{}
}

// noMessage asserts nothing is waiting on e's Recv.
func noMessage(t testing.TB, e *Endpoint) {
	t.Helper()
	select {
	case m := <-e.Recv():
		t.Fatalf("replica %d: unexpected message from %d tag %d", e.ID(), m.From, m.Tag)
	default:
	}
}

type testMsg struct {
	Seq  int    `msgpack:"seq"`
	Data []byte `msgpack:"data,omitempty"`
}

// msgpackRaw re-sends a body verbatim.
func msgpackRaw(b []byte) msgpack.RawMessage { return msgpack.RawMessage(b) }

// within receives from ch, failing after d of (fake) time, so a broken
// implementation fails a test instead of hanging it.
func within[T any](t testing.TB, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("nothing received within %v", d)
	}
	var zero T
	return zero
}
