package cell

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestStalledMasterStopsServing: the master's run loop stalls (a long
// fsync, a GC pause) for three master leases. Its RPC handlers must stop
// serving when the lease runs out in real time, although the loop cannot
// update the status, and after the stall it must not count the stalled
// time as lease time: at no sampled instant do two replicas serve.
func TestStalledMasterStopsServing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := StartLocal(ctx, LocalConfig{Dir: t.TempDir(), Replicas: 3, Cell: "stall",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	old, err := lc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stall := 3 * time.Second // three leases of 100 ticks of 10 ms
	stalled := make(chan struct{})
	go func() { old.ctlC <- func() { close(stalled); time.Sleep(stall) } }()
	<-stalled
	end := time.Now().Add(stall + time.Second)
	var sawOther bool
	for time.Now().Before(end) {
		serving := 0
		for _, r := range lc.Running() {
			if r.serving() != nil {
				serving++
				sawOther = sawOther || r != old
			}
		}
		if serving > 1 {
			t.Fatalf("two replicas serve at once (the stalled master kept serving)")
		}
		time.Sleep(time.Millisecond)
	}
	if !sawOther {
		t.Fatal("no other replica took over during the stall")
	}
}
