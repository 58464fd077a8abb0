package nemesis

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

var lagDuration = flag.Duration("nemesis.lag", 0, "run the TestFollowerLag diagnostic with this long a workload (0: skip it)")

// TestFollowerLag is a diagnostic, not a check: it reports, and never fails
// on, how far the replicas of a real five-process cell fall behind. Clients
// create new files as fast as the cell takes them (every create adds
// entries to each replica's namespace cache) while every 10 s the master is
// killed and restarted, so that, as in a nemesis run, the master is a young
// process; replica 5 is never restarted (it is paused instead when it is
// master), so it is the oldest process. It logs every replica's applied and
// chosen slot every 10 s and, once the workload stops, how long the
// replicas take to converge. A follower whose apply costs grow with its
// process's age falls behind the young masters' pace and shows the
// nemesis's follower stall: applied one beyond the chosen slot its status
// last published (a slot being applied), crawling. Run it with
// -nemesis.lag=150s.
func TestFollowerLag(t *testing.T) {
	if *lagDuration == 0 {
		t.Skip("a diagnostic on real processes; run it with -nemesis.lag=150s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *lagDuration+10*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir(), Lockcelld: testLockcelld(t), SessionLease: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.KillAll()
	if _, err := c.WaitMaster(ctx); err != nil {
		t.Fatal(err)
	}
	work, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() { defer wg.Done(); createFiles(work, c, i) }()
	}
	start := time.Now()
	statuses := func() (applied []uint64, line string) {
		for _, id := range c.IDs() {
			st, err := c.Status(ctx, id)
			if err != nil {
				line += fmt.Sprintf(" %d:unreachable", id)
				continue
			}
			applied = append(applied, st.Applied)
			line += fmt.Sprintf(" %d:%d/%d", id, st.Applied, st.Chosen)
		}
		return applied, line
	}
	for time.Since(start) < *lagDuration {
		time.Sleep(10 * time.Second)
		_, line := statuses()
		t.Logf("%6.1fs applied/chosen:%s", time.Since(start).Seconds(), line)
		m, err := c.WaitMaster(ctx)
		if err != nil {
			continue
		}
		if m == 5 {
			_ = c.Pause(m)
			time.Sleep(3 * time.Second)
			_ = c.Resume(m)
			continue
		}
		c.Kill(m)
		time.Sleep(time.Second)
		if err := c.Start(m); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	wg.Wait()
	drained := time.Now()
	for time.Since(drained) < 3*time.Minute {
		applied, line := statuses()
		t.Logf("%6.1fs after the workload: applied/chosen:%s", time.Since(drained).Seconds(), line)
		same := len(applied) == len(c.IDs())
		for _, a := range applied {
			same = same && a == applied[0]
		}
		if same {
			t.Logf("converged %v after the workload stopped", time.Since(drained).Round(100*time.Millisecond))
			return
		}
		time.Sleep(5 * time.Second)
	}
	t.Logf("not converged 3 min after the workload stopped")
}

// createFiles creates new files in sessions of its own until ctx ends.
func createFiles(ctx context.Context, c *Cluster, i int) {
	for ctx.Err() == nil {
		cl, err := c.WorkerClient(ctx, 2*time.Second)
		if err != nil {
			continue
		}
		s, err := cl.NewSession(ctx)
		if err != nil {
			_ = cl.Close()
			continue
		}
		for n := 0; ctx.Err() == nil && s.Err() == nil; n++ {
			op, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := s.Open(op, fmt.Sprintf("/%s/lag-%d-%d-%d", Tenant, i, time.Now().UnixNano(), n), client.OpenOptions{Create: true, Contents: []byte("x")})
			if err == nil {
				_ = h.Close(op)
			}
			cancel()
		}
		_ = cl.Close()
	}
}
