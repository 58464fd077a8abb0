package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
)

// countingCache is a client session cache that counts the tickets stored
// in it, so that a test knows a ticket arrived before it redials.
type countingCache struct {
	tls.ClientSessionCache
	puts atomic.Int64
}

func newCountingCache() *countingCache {
	return &countingCache{ClientSessionCache: tls.NewLRUClientSessionCache(16)}
}

func (c *countingCache) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.puts.Add(1)
	}
	c.ClientSessionCache.Put(key, cs)
}

// identityHandler answers every request with its tag and records the
// identity of each stream's connection.
type identityHandler struct {
	mu  sync.Mutex
	ids []Identity
}

func (h *identityHandler) serve(ctx context.Context, s *ServerStream) {
	h.mu.Lock()
	h.ids = append(h.ids, s.Identity())
	h.mu.Unlock()
	oneShotHandler(ctx, s)
}

func (h *identityHandler) last() Identity {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ids) == 0 {
		return Identity{}
	}
	return h.ids[len(h.ids)-1]
}

func (s *sim) clientCert(tenant, principal string) *tls.Certificate {
	s.t.Helper()
	c, err := s.ca.IssueClient(certs.ClientID{Tenant: tenant, Principal: principal}, certs.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	return &c
}

// dialCached dials replica 1 with cache and cert, makes one call (whose
// identity h records) and waits until the replica's ticket has reached
// the cache (quic-go sends it once the handshake is confirmed).
func dialCached(t *testing.T, s *sim, cache *countingCache, cert *tls.Certificate, mod func(*DialConfig)) (*ClientConn, error) {
	t.Helper()
	puts := cache.puts.Load()
	pc := s.clientConn("10.1.0.1")
	cfg := DialConfig{Addrs: []string{simAddr(1)}, CA: s.ca.Pool(), PacketConn: pc, Logger: testLogger(), Certificate: cert, SessionCache: cache}
	if mod != nil {
		mod(&cfg)
	}
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	if f, err := c.Call(context.Background(), 7, testMsg{Seq: 1}); err != nil || f.Tag != 7 {
		t.Fatalf("call: tag %d, %v", f.Tag, err)
	}
	synctest.Wait()
	if cache.puts.Load() == puts {
		t.Fatal("no session ticket reached the client")
	}
	return c, nil
}

// TestClientResumption: a client that redials a replica resumes the TLS
// session the replica gave it, and the resumed connection carries the
// same verified identities: the client's tenant and principal at the
// replica, the replica's id at the client. A client that changed its
// certificate makes a full handshake and is known by the new one.
func TestClientResumption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &identityHandler{}
		e := s.start(1, func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		cache := newCountingCache()
		alice := s.clientCert("t", "alice")
		want := Identity{Tenant: "t", Principal: "alice"}

		c1, err := dialCached(t, s, cache, alice, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c1.Resumed() || h.last() != want || c1.ReplicaID() != 1 {
			t.Fatalf("first connection: resumed %v, identity %v, replica %d", c1.Resumed(), h.last(), c1.ReplicaID())
		}
		c1.Close()

		c2, err := dialCached(t, s, cache, alice, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !c2.Resumed() {
			t.Fatal("the redial did not resume the session")
		}
		if got := h.last(); got != want || c2.ReplicaID() != 1 {
			t.Fatalf("resumed connection: identity %v (want %v), replica %d (want 1)", got, want, c2.ReplicaID())
		}
		c2.Close()

		bob := s.clientCert("t", "bob")
		c3, err := dialCached(t, s, cache, bob, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c3.Resumed() {
			t.Fatal("a client with a new certificate resumed the session of its old one")
		}
		if got := h.last(); got != (Identity{Tenant: "t", Principal: "bob"}) {
			t.Fatalf("after the certificate changed the replica knows the client as %v", got)
		}
		c3.Close()

		st := e.Stats()
		if st.ClientFullHandshakes != 2 || st.ClientResumed != 1 {
			t.Fatalf("replica counted %d full handshakes and %d resumed, want 2 and 1", st.ClientFullHandshakes, st.ClientResumed)
		}
		// Floor: three calls were judged.
		if n := len(h.ids); n != 3 {
			t.Fatalf("%d calls served, want 3", n)
		}
	})
}

// TestResumptionReverifiesReplica: a session does not vouch for a replica
// that the client's CA does not: resuming it with another CA pool fails
// the handshake, as a full handshake does (the client checks the
// certificate the session carries again).
func TestResumptionReverifiesReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &identityHandler{}
		e := s.start(1, func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		cache := newCountingCache()
		alice := s.clientCert("t", "alice")
		c1, err := dialCached(t, s, cache, alice, nil)
		if err != nil {
			t.Fatal(err)
		}
		c1.Close()
		other := otherCA(t).Pool()
		c2, err := dialCached(t, s, cache, alice, func(d *DialConfig) { d.CA = other })
		if err == nil {
			t.Fatalf("resumed a session with a replica the CA does not vouch for (resumed %v)", c2.Resumed())
		}
		if !errors.Is(err, ErrBadCertificate) {
			t.Fatalf("dial with another CA: %v, want ErrBadCertificate", err)
		}
		synctest.Wait()
		// Floor: the refused dial offered the session (the replica
		// resumed it and only the client's check ended it).
		if st := e.Stats(); st.ClientFullHandshakes != 1 {
			t.Fatalf("replica counted %d full handshakes, want 1", st.ClientFullHandshakes)
		}
	})
}

// TestTicketLifetime: a replica honours a ticket until the key that
// encrypted it is twice the rotation old, and no longer.
func TestTicketLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rotation = time.Hour
		s := newSim(t, 1)
		h := &identityHandler{}
		e := s.start(1, func(c *Config) { c.ClientHandler = h.serve; c.TicketKeyRotation = rotation })
		defer s.closeAll()
		early, late := newCountingCache(), newCountingCache()
		alice, bob := s.clientCert("t", "alice"), s.clientCert("t", "bob")
		for _, d := range []struct {
			cache *countingCache
			cert  *tls.Certificate
		}{{early, alice}, {late, bob}} {
			c, err := dialCached(t, s, d.cache, d.cert, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		issued := time.Now()
		time.Sleep(rotation + rotation/6)
		c, err := dialCached(t, s, early, alice, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Resumed() {
			t.Fatalf("a ticket %v old (the key rotated since) did not resume", time.Since(issued))
		}
		c.Close()
		time.Sleep(issued.Add(2 * rotation).Sub(time.Now()))
		c, err = dialCached(t, s, late, bob, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Resumed() {
			t.Fatalf("a ticket %v old resumed; the rotation is %v", time.Since(issued), rotation)
		}
		c.Close()
		if st := e.Stats(); st.ClientFullHandshakes != 3 || st.ClientResumed != 1 {
			t.Fatalf("replica counted %d full handshakes and %d resumed, want 3 and 1", st.ClientFullHandshakes, st.ClientResumed)
		}
	})
}

// TestTicketsOff: with TicketKeyRotation negative every client handshake
// is a full one.
func TestTicketsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &identityHandler{}
		e := s.start(1, func(c *Config) { c.ClientHandler = h.serve; c.TicketKeyRotation = -1 })
		defer s.closeAll()
		cache := tls.NewLRUClientSessionCache(4)
		for range 2 {
			c := s.dialClient("10.1.0.1", func(d *DialConfig) { d.SessionCache = cache })
			if _, err := c.Call(context.Background(), 7, testMsg{}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if c.Resumed() {
				t.Fatal("resumed with tickets off")
			}
			c.Close()
		}
		if st := e.Stats(); st.ClientFullHandshakes != 2 || st.ClientResumed != 0 {
			t.Fatalf("replica counted %d full handshakes and %d resumed, want 2 and 0", st.ClientFullHandshakes, st.ClientResumed)
		}
	})
}

// TestResumptionReverifiesClient: a session does not vouch for a client
// certificate that the replica's client CA no longer does (as after the
// CA was replaced): the replica checks the certificate the session
// carries again, and refuses it.
func TestResumptionReverifiesClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &identityHandler{}
		e := s.start(1, func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		cache := newCountingCache()
		alice := s.clientCert("t", "alice")
		c1, err := dialCached(t, s, cache, alice, nil)
		if err != nil {
			t.Fatal(err)
		}
		c1.Close()
		synctest.Wait()
		// NB: no handshake is under way; the next one reads the new pool.
		e.cfg.ClientCA = otherCA(t).Pool()
		pc := s.clientConn("10.1.0.1")
		c2, err := Dial(context.Background(), DialConfig{Addrs: []string{simAddr(1)}, CA: s.ca.Pool(), PacketConn: pc,
			Logger: testLogger(), Certificate: alice, SessionCache: cache})
		if err == nil {
			defer c2.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err = c2.Call(ctx, 7, testMsg{Seq: 2}); err == nil {
				t.Fatalf("a client whose certificate the replica's CA no longer vouches for was served (resumed %v, as %v)", c2.Resumed(), h.last())
			}
		}
		synctest.Wait()
		st := e.Stats()
		if st.RefusedHandshakes != 1 {
			t.Fatalf("replica refused %d handshakes, want 1 (error %v)", st.RefusedHandshakes, err)
		}
		// Floor: the first connection was served, the second not.
		if n := len(h.ids); n != 1 {
			t.Fatalf("%d calls served, want 1", n)
		}
	})
}
