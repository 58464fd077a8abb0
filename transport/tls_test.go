package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
	"github.com/quic-go/quic-go"
)

// rawDial opens a QUIC connection from address from to address to with the
// given ALPN and (if cert has one) client certificate, accepting any server
// certificate: it tests what the server lets in. It returns the dial error.
func rawDialErr(t *testing.T, s *sim, from, to, alpn string, cert tls.Certificate) (*quic.Conn, error) {
	t.Helper()
	pc, err := s.net.Listen(from)
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { tr.Close(); pc.Close() })
	conf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}
	if len(cert.Certificate) > 0 {
		conf.Certificates = []tls.Certificate{cert}
	}
	ua, _ := net.ResolveUDPAddr("udp", to)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tr.Dial(ctx, ua, conf, &quic.Config{HandshakeIdleTimeout: 2 * time.Second, MaxIdleTimeout: 5 * time.Second})
}

func rawDial(t *testing.T, s *sim, from, to, alpn string, cert tls.Certificate, _ any) *quic.Conn {
	t.Helper()
	c, err := rawDialErr(t, s, from, to, alpn, cert)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectRefused asserts that a connection attempt failed: either the dial
// returned an error, or (TLS 1.3 lets a client finish before the server has
// checked its certificate) the server closed the connection at once, before
// any stream could carry data.
func expectRefused(t *testing.T, conn *quic.Conn, err error) {
	t.Helper()
	if err != nil {
		return
	}
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("connection was accepted")
	}
}

func otherCA(t *testing.T) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA("impostor", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestPeerHandshakeRefusals: the server side of the peer ALPN lets in only
// certificates of the cell CA naming one of its peers.
func TestPeerHandshakeRefusals(t *testing.T) {
	cases := []struct {
		name string
		cert func(s *sim) tls.Certificate
	}{
		{"wrong CA", func(s *sim) tls.Certificate {
			c, err := otherCA(t).IssueReplica(2, certs.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"unknown replica", func(s *sim) tls.Certificate { return s.replicaCert(9) }},
		{"own id", func(s *sim) tls.Certificate { return s.replicaCert(1) }},
		{"client certificate", func(s *sim) tls.Certificate {
			c, err := s.ca.IssueClient(certs.ClientID{Tenant: "t", Principal: "p"}, certs.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"no certificate", func(s *sim) tls.Certificate { return tls.Certificate{} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, 1, 2)
				a := s.start(1, func(c *Config) {
					c.ClientHandler = func(ctx context.Context, s *ServerStream) {}
				})
				defer s.closeAll()
				conn, err := rawDialErr(t, s, "10.0.0.50:1", simAddr(1), ALPNPeer, tc.cert(s))
				expectRefused(t, conn, err)
				if conn != nil {
					// Even if the dial returned, nothing it sends is delivered.
					if st, err := conn.OpenStream(); err == nil {
						b, _ := AppendFrame(nil, 1, testMsg{}, 0)
						st.Write(b)
					}
				}
				time.Sleep(time.Second)
				synctest.Wait()
				noMessage(t, a)
				if n := a.Stats().RefusedHandshakes; n != 1 {
					t.Fatalf("RefusedHandshakes = %d, want 1", n)
				}
			})
		})
	}
}

// TestPeerDialRefusesWrongReplica: replica 1 expects replica 2 at an
// address where replica 3 answers; it refuses the connection and delivers
// nothing, while its link to the real replica 2 would work.
func TestPeerDialRefusesWrongReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2, 3)
		a := s.start(1, nil)
		// An impostor: replica 3's certificate on replica 2's address.
		imp := s.start(3, func(c *Config) {
			pc, err := s.net.Listen(simAddr(2))
			if err != nil {
				t.Fatal(err)
			}
			c.PacketConn.Close()
			c.PacketConn = pc
		})
		defer s.closeAll()
		_ = a.Send(2, 1, testMsg{Seq: 1})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		noMessage(t, imp)
		st := a.Stats()
		if st.RefusedHandshakes == 0 || st.DialFailures == 0 || st.Peers[0].Connected {
			t.Fatalf("replica 1 accepted the impostor: %+v", st)
		}
	})
}

// TestPeerWrongCAEndpoints: two endpoints from different CAs refuse each
// other both ways.
func TestPeerWrongCAEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		a := s.start(1, nil)
		other := otherCA(t)
		b := s.start(2, func(c *Config) {
			cert, err := other.IssueReplica(2, certs.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c.Certificate, c.CA = cert, other.Pool()
		})
		defer s.closeAll()
		_ = a.Send(2, 1, testMsg{})
		_ = b.Send(1, 1, testMsg{})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		noMessage(t, a)
		noMessage(t, b)
		if a.Stats().RefusedHandshakes == 0 || b.Stats().RefusedHandshakes == 0 {
			t.Fatalf("refusals: %d, %d", a.Stats().RefusedHandshakes, b.Stats().RefusedHandshakes)
		}
	})
}

// TestClientHandshakeRefusals covers the client ALPN.
func TestClientHandshakeRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		served := make(chan Identity, 10)
		a := s.start(1, func(c *Config) {
			c.ClientHandler = func(ctx context.Context, st *ServerStream) {
				served <- st.Identity()
				f, err := st.ReadFrame(ctx)
				if err == nil {
					st.WriteFrame(ctx, f.Tag, msgpackRaw(f.Body))
				}
			}
		})
		defer s.closeAll()
		dial := func(cfg DialConfig) (*ClientConn, error) {
			cfg.Addrs = []string{simAddr(1)}
			if cfg.CA == nil {
				cfg.CA = s.ca.Pool()
			}
			cfg.PacketConn = s.clientConn("10.1.0.1")
			cfg.Logger = testLogger()
			return Dial(context.Background(), cfg)
		}
		call := func(c *ClientConn) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := c.Call(ctx, 1, testMsg{})
			return err
		}

		// A client certificate from another CA: refused.
		bad, err := otherCA(t).IssueClient(certs.ClientID{Tenant: "t", Principal: "p"}, certs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := dial(DialConfig{Certificate: &bad}); err == nil {
			if err := call(c); err == nil {
				t.Fatal("client with a foreign certificate was served")
			}
			c.Close()
		}
		// A replica certificate names no client: refused.
		rc := s.replicaCert(2)
		if c, err := dial(DialConfig{Certificate: &rc}); err == nil {
			if err := call(c); err == nil {
				t.Fatal("client with a replica certificate was served")
			}
			c.Close()
		}
		if n := a.Stats().RefusedHandshakes; n != 2 {
			t.Fatalf("RefusedHandshakes = %d, want 2", n)
		}
		select {
		case id := <-served:
			t.Fatalf("a refused client reached the handler as %v", id)
		default:
		}
		// A client that does not trust the cell's CA refuses the replica.
		if _, err := dial(DialConfig{CA: otherCA(t).Pool()}); !errors.Is(err, ErrNoReplica) {
			t.Fatalf("dial with the wrong CA: %v", err)
		}
		// No certificate: anonymous but served.
		c, err := dial(DialConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := call(c); err != nil {
			t.Fatal(err)
		}
		if id := within(t, served, time.Second); !id.Anonymous() {
			t.Fatalf("identity %v", id)
		}
		c.Close()
		// A client certificate of the cell CA: its identity reaches the handler.
		good, err := s.ca.IssueClient(certs.ClientID{Tenant: "acme", Principal: "alice@acme"}, certs.Options{KeyType: certs.Ed25519})
		if err != nil {
			t.Fatal(err)
		}
		c, err = dial(DialConfig{Certificate: &good})
		if err != nil {
			t.Fatal(err)
		}
		if err := call(c); err != nil {
			t.Fatal(err)
		}
		if id := within(t, served, time.Second); id.Tenant != "acme" || id.Principal != "alice@acme" {
			t.Fatalf("identity %v", id)
		}
		if c.ReplicaID() != 1 {
			t.Fatalf("ReplicaID %d", c.ReplicaID())
		}
		c.Close()
	})
}

// TestClientALPNWithoutHandler: an Endpoint with no ClientHandler refuses
// clients, and an unknown ALPN is refused.
func TestClientALPNWithoutHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		a := s.start(1, nil)
		defer s.closeAll()
		_, err := Dial(context.Background(), DialConfig{Addrs: []string{simAddr(1)}, CA: s.ca.Pool(), PacketConn: s.clientConn("10.1.0.1"), Logger: testLogger()})
		if !errors.Is(err, ErrNoReplica) {
			t.Fatalf("dial: %v", err)
		}
		conn, err := rawDialErr(t, s, "10.1.0.2:1", simAddr(1), "h3", s.replicaCert(2))
		expectRefused(t, conn, err)
		if n := a.Stats().RefusedHandshakes; n != 2 {
			t.Fatalf("RefusedHandshakes = %d", n)
		}
	})
}
