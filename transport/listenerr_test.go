package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/lockcell/lockcell/internal/certs"
)

// TestListenAddrInUse: Listen on a bound UDP port returns a *ListenError
// that matches ErrListen and syscall.EADDRINUSE and says the address and
// the cause once each.
func TestListenAddrInUse(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ca, err := certs.NewCA("c", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueReplica(1, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.LocalAddr().String()
	e, err := Listen(context.Background(), Config{ID: 1, Addr: addr, CA: ca.Pool(), Certificate: cert, Logger: testLogger()})
	if err == nil {
		e.Close()
		t.Fatal("Listen on a bound port succeeded")
	}
	var le *ListenError
	if !errors.As(err, &le) || le.Addr != addr {
		t.Fatalf("err = %v (%T); want a *ListenError for %s", err, err, addr)
	}
	if !errors.Is(err, ErrListen) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("err = %v; want it to match ErrListen and EADDRINUSE", err)
	}
	want := "transport: listen on " + addr + " (QUIC): address already in use"
	if err.Error() != want {
		t.Fatalf("err = %q; want %q", err, want)
	}
	if strings.Count(err.Error(), "listen") != 1 {
		t.Fatalf("err = %q repeats itself", err)
	}
}
