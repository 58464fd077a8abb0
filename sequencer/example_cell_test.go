package sequencer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/sequencer"
)

// A protected server validates every write's sequencer: signed by the
// cell, not older than the newest grant seen, and (with a Checker) still
// held. The write runs inside Do, atomically with the check.
func ExampleValidator() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, _ := os.MkdirTemp("", "lockcell-example-")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: dir, Replicas: 3, Cell: "example", DevTenant: "t", Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lc.Close()
	cert, _ := lc.ClientCertificate("t", "app")
	c, err := client.Dial(ctx, client.Config{Addrs: lc.Addrs(), CA: lc.CA.Pool(), Certificate: &cert, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, _ := c.NewSession(ctx)

	// The protected server's side: the cell's public key, and a session to
	// confirm sequencers with the cell.
	v, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: lc.PublicKey(), Cell: "example", Checker: s})
	var stored string
	write := func(seq sequencer.Sequencer, value string) error {
		return v.Do(ctx, seq, func() error { stored = value; return nil })
	}

	m := client.NewMutex(s, "/t/resource")
	first, _ := m.Lock(ctx)
	fmt.Println("write with the current grant:", write(first.Sequencer(), "v1"))
	first.Release(ctx)
	second, _ := m.Lock(ctx)
	fmt.Println("write with the new grant:", write(second.Sequencer(), "v2"))
	err = write(first.Sequencer(), "stale")
	fmt.Println("write with the released grant rejected:", errors.Is(err, sequencer.ErrStale))
	forged := second.Sequencer()
	forged.Generation++
	err = write(forged, "forged")
	fmt.Println("forged sequencer rejected:", errors.Is(err, sequencer.ErrForged))
	fmt.Println("stored:", stored)
	// Output:
	// write with the current grant: <nil>
	// write with the new grant: <nil>
	// write with the released grant rejected: true
	// forged sequencer rejected: true
	// stored: v2
}
