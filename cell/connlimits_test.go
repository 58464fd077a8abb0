package cell_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/transport"
)

// TestConnLimitPerIPNamed: with MaxConnsPerIP 3, three clients from one
// address connect and keep their sessions; a fourth from that address is
// told at once which limit it hit (client.ErrTooManyConns naming
// max_conns_per_ip), while a client from another address connects. When
// one of the three closes, the fourth gets in.
func TestConnLimitPerIPNamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Tune: func(cfg *cell.Config) { cfg.MaxConnsPerIP = 3 }})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg := c.ClientConfig("", "alice")
		cfg.PacketConn = c.PacketConnFrom("10.2.0.1")
		// No probes of every replica beside the search for the master: each
		// client then holds exactly one connection to the master.
		cfg.DialPatience = -1
		var clients []*client.Client
		for i := range 3 {
			cl, err := c.TryDial(ctx, cfg)
			if err != nil {
				t.Fatalf("client %d from one address: %v", i, err)
			}
			if _, err := cl.NewSession(ctx); err != nil {
				t.Fatalf("client %d: session: %v", i, err)
			}
			clients = append(clients, cl)
			// Its probes of the other replicas close (one cut off in its
			// handshake lingers at the replica until the handshake timeout).
			time.Sleep(4 * transport.DefaultHandshakeTimeout)
		}
		_, err := c.TryDial(ctx, cfg)
		if !errors.Is(err, client.ErrTooManyConns) || !strings.Contains(err.Error(), "max_conns_per_ip") {
			t.Fatalf("fourth client from one address: %v, want ErrTooManyConns naming max_conns_per_ip", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the refused dial waited for its context to end")
		}
		other := c.ClientConfig("", "alice")
		if _, err := c.TryDial(ctx, other); err != nil {
			t.Fatalf("client from another address: %v", err)
		}
		clients[0].Close()
		time.Sleep(4 * transport.DefaultHandshakeTimeout) // the replica sees the close
		if _, err := c.TryDial(ctx, cfg); err != nil {
			t.Fatalf("after a client from that address closed: %v", err)
		}
	})
}
