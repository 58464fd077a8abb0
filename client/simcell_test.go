package client_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// startSimCell starts a celltest cell of n replicas on the simulated
// network with the short session lease of startCell (testLease), then
// tune's changes. Call it inside a synctest bubble: every timer of the
// cell and its clients then runs on the bubble's fake clock.
func startSimCell(t testing.TB, n int, tune func(*cell.Config)) *celltest.Cell {
	t.Helper()
	return celltest.Start(t, celltest.Options{Replicas: n, Tune: func(c *cell.Config) {
		c.SessionLease = testLease
		if tune != nil {
			tune(c)
		}
	}})
}

// simConfig is tc.ClientConfig for principal of tenant t with the test
// timings of testCell.config (grace period, handshake and idle timeouts).
func simConfig(tc *celltest.Cell, principal string) client.Config {
	return withTestTimings(tc.ClientConfig("", principal))
}

// simConfigWith is simConfig for the holder of cert.
func simConfigWith(tc *celltest.Cell, cert tls.Certificate) client.Config {
	return withTestTimings(client.Config{
		Addrs:       tc.Addrs(),
		CA:          tc.CAPool(),
		Certificate: &cert,
		Logger:      quietLogger(),
		PacketConn:  tc.PacketConn,
	})
}

func withTestTimings(cfg client.Config) client.Config {
	cfg.GracePeriod = 3 * time.Second
	cfg.HandshakeTimeout = 300 * time.Millisecond
	cfg.IdleTimeout = time.Second
	return cfg
}

// simSession dials tc with simConfig and opens a session for principal.
func simSession(t testing.TB, ctx context.Context, tc *celltest.Cell, principal string) *client.Session {
	t.Helper()
	s, err := tc.Dial(ctx, simConfig(tc, principal)).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
