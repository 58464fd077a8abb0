package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
)

func TestConfigValidation(t *testing.T) {
	ca, err := certs.NewCA("c", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := ca.IssueReplica(1, certs.Options{})
	base := Config{ID: 1, Addr: "127.0.0.1:0", CA: ca.Pool(), Certificate: cert}
	c, err := base.populate()
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPeerFrame != DefaultMaxPeerFrame || c.MaxClientFrame != DefaultMaxClientFrame ||
		c.PeerQueueLen != DefaultPeerQueueLen || c.PeerQueueBytes != DefaultPeerQueueBytes ||
		c.HandshakeTimeout != DefaultHandshakeTimeout || c.ClientIdleTimeout != DefaultClientIdleTimeout ||
		c.MaxConnsPerIP != DefaultMaxConnsPerIP || c.ClientCA != c.CA || c.Logger == nil {
		t.Fatalf("defaults not filled: %+v", c)
	}
	if c.ClientIdleTimeout >= 12*time.Second {
		t.Fatal("client idle timeout does not fit in the 12 s session lease")
	}
	bad := []func(*Config){
		func(c *Config) { c.ID = 0 },
		func(c *Config) { c.CA = nil },
		func(c *Config) { c.Certificate.Certificate = nil },
		func(c *Config) { c.Addr = "" },
		func(c *Config) { c.Peers = map[uint64]string{0: "x:1"} },
		func(c *Config) { c.Peers = map[uint64]string{2: ""} },
		func(c *Config) { c.MaxPeerFrame = -1 },
		func(c *Config) { c.MaxClientFrame = MaxFrameLimit + 1 },
		func(c *Config) { c.PeerQueueLen = -1 },
		func(c *Config) { c.PeerQueueBytes = 100 },
		func(c *Config) { c.HandshakeTimeout = -time.Second },
		func(c *Config) { c.ReconnectMin, c.ReconnectMax = time.Second, time.Millisecond },
	}
	for i, mod := range bad {
		c := base
		mod(&c)
		if _, err := Listen(context.Background(), c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	for i, d := range []DialConfig{
		{},
		{Addrs: []string{"x:1"}},
		{Addrs: []string{"x:1"}, CA: ca.Pool(), Start: -1},
		{Addrs: []string{"x:1"}, CA: ca.Pool(), MaxFrame: -1},
		{Addrs: []string{"x:1"}, CA: ca.Pool(), IdleTimeout: -1},
	} {
		if _, err := Dial(context.Background(), d); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("dial case %d: %v", i, err)
		}
	}
}
