package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/transport"
)

// testLease is the session lease of test cells: short, so that jeopardy
// and expiry happen in seconds.
const testLease = 2 * time.Second

type testCell struct {
	*cell.LocalCell
	faults *transport.Faults
}

// startCell starts an in-process cell over real QUIC on loopback with a
// "t" tenant and a short session lease, stopped when the test ends.
func startCell(t testing.TB, n int, tune func(*cell.Config)) *testCell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	faults := transport.NewFaults(1)
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{
		Dir:       t.TempDir(),
		Replicas:  n,
		Cell:      "test",
		DevTenant: "t",
		Tune: func(c *cell.Config) {
			c.SessionLease = testLease
			c.Faults = faults
			if tune != nil {
				tune(c)
			}
		},
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return &testCell{LocalCell: lc, faults: faults}
}

func quietLogger() *slog.Logger {
	if os.Getenv("LOCKCELL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// config returns a client Config for tenant t's principal, with test
// timings.
func (tc *testCell) config(t testing.TB, principal string) client.Config {
	t.Helper()
	cert, err := tc.ClientCertificate("t", principal)
	if err != nil {
		t.Fatal(err)
	}
	return tc.configWith(cert)
}

func (tc *testCell) configWith(cert tls.Certificate) client.Config {
	return client.Config{
		Addrs:            tc.Addrs(),
		CA:               tc.CA.Pool(),
		Certificate:      &cert,
		GracePeriod:      3 * time.Second,
		HandshakeTimeout: 300 * time.Millisecond,
		IdleTimeout:      time.Second,
		Logger:           quietLogger(),
	}
}

// dial connects a client, closed when the test ends.
func (tc *testCell) dial(t testing.TB, ctx context.Context, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// session dials and opens a session for principal.
func (tc *testCell) session(t testing.TB, ctx context.Context, principal string) *client.Session {
	t.Helper()
	c := tc.dial(t, ctx, tc.config(t, principal))
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitEvent waits for an event of kind on s.
func waitEvent(t testing.TB, ctx context.Context, s *client.Session, kind client.EventKind) client.Event {
	t.Helper()
	for {
		select {
		case ev := <-s.Events():
			if ev.Kind == kind {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %v event: %v", kind, ctx.Err())
		}
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func emptyPool() *x509.CertPool { return x509.NewCertPool() }
