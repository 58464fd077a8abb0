package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/certs"
)

// TestDialErrorClasses dials cells that cannot serve the client for
// different reasons and checks that Dial tells each apart, with its own
// sentinel and a message naming the cause, well before the context's
// generous deadline (which only bounds a hang, it is no timing claim).
// Each case runs its own simulated cell (celltest under synctest), so
// waiting out a master lease or a handshake timeout costs no real time.
func TestDialErrorClasses(t *testing.T) {
	other, err := certs.NewCA("other", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, err := other.IssueClient(certs.ClientID{Tenant: "t", Principal: "alice"}, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T) *celltest.Cell {
		t.Helper()
		return celltest.Start(t, celltest.Options{Replicas: 3})
	}
	dialErr := func(t *testing.T, cfg client.Config) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, cfg)
		if err == nil {
			c.Close()
			t.Fatal("Dial succeeded")
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial waited out its context: %v", err)
		}
		return err
	}
	check := func(t *testing.T, err, class error, words ...string) {
		t.Helper()
		if !errors.Is(err, class) {
			t.Fatalf("Dial: %v; want %v", err, class)
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("Dial: %q does not say %q", err, w)
			}
		}
		t.Logf("%v", err)
	}

	t.Run("wrong CA", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := start(t).ClientConfig("", "alice")
			cfg.CA = other.Pool()
			check(t, dialErr(t, cfg), client.ErrCertificate, "configured CA", "issued by \"CN=lockcell cell CA test")
		})
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := start(t).ClientConfig("", "alice")
			cfg.Certificate = &strangerCert
			check(t, dialErr(t, cfg), client.ErrCertificate, "refused", "t/alice")
		})
	})
	t.Run("revoked token", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tc := start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			admCert, err := tc.AdminCertificate()
			if err != nil {
				t.Fatal(err)
			}
			admCfg := tc.ClientConfig("", "alice")
			admCfg.Certificate = &admCert
			adm := tc.Dial(ctx, admCfg)
			tok, info, err := operator.New(adm).IssueToken(ctx, "t", "robot")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := operator.New(adm).RevokeToken(ctx, "t", info.ID); err != nil {
				t.Fatal(err)
			}
			cfg := tc.ClientConfig("", "alice")
			cfg.Certificate, cfg.Token = nil, tok
			err = dialErr(t, cfg)
			check(t, err, client.ErrUnauthenticated, "token", info.ID)
			if !errors.Is(err, api.ErrUnauthenticated) {
				t.Fatalf("%v does not match api.ErrUnauthenticated", err)
			}
			if secret := tok[strings.Index(tok, info.ID)+len(info.ID)+1:]; strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows the token's secret: %v", err)
			}
		})
	})
	t.Run("no quorum", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			nq := start(t)
			cfg := nq.ClientConfig("", "alice")
			rs := nq.Running()
			nq.Crash(rs[0].ID())
			nq.Crash(rs[1].ID())
			// The survivor serves as master until its master lease has
			// run out; Dial may connect until then.
			for i := 0; rs[2].Status().Master; i++ {
				if i == 300 {
					t.Fatal("the survivor of a cell without quorum still says it is master after 30 s")
				}
				time.Sleep(100 * time.Millisecond)
			}
			check(t, dialErr(t, cfg), client.ErrNoMaster, "answered", "none is master", "no answer")
		})
	})
	t.Run("stopped cell", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tc := start(t)
			cfg := tc.ClientConfig("", "alice")
			tc.Close()
			check(t, dialErr(t, cfg), client.ErrUnreachable, "no replica answered", cfg.Addrs[0])
		})
	})
}
