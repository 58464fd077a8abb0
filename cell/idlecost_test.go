package cell_test

import (
	"os"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
)

// TestIdleCellHoldsMaster: a five-replica cell left alone keeps its
// master (no election, no lost lease), chooses almost nothing, and every
// replica stays ready (it hears the master). An idle cell's work is its
// ticks, its lease renewals and its progress reports; its packets are
// bounded: at most 120 peer frames a second for the five replicas (the
// renewals and their answers, about 40, and progress reports repeated
// twice a second while they do not change; reports every 100 ms made
// about 240).
// LOCKCELL_IDLE_SECONDS sets how long it idles (10 s if unset), for
// counting an idle cell's instructions per second under callgrind at two
// lengths.
func TestIdleCellHoldsMaster(t *testing.T) {
	idle := 10 * time.Second
	if v := os.Getenv("LOCKCELL_IDLE_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LOCKCELL_IDLE_SECONDS=%q: want a positive count", v)
		}
		idle = time.Duration(n) * time.Second
	}
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		m := c.Master()
		if m == nil {
			t.Fatal("no master")
		}
		before := m.Status()
		frames := func() (n uint64) {
			for _, id := range c.IDs() {
				n += c.Replica(id).PeerFramesSent()
			}
			return n
		}
		f0 := frames()
		time.Sleep(idle)
		after := m.Status()
		perSecond := float64(frames()-f0) / idle.Seconds()
		t.Logf("idle for %v: %.0f peer frames a second, %d slots chosen", idle, perSecond, after.Chosen-before.Chosen)
		// Floor: the cell did talk (renewals at least), so the bound judged
		// something.
		if perSecond < 10 {
			t.Fatalf("%.1f peer frames a second: the idle cell did not renew its lease", perSecond)
		}
		if perSecond > 120 {
			t.Errorf("an idle cell of five sends %.0f peer frames a second; want at most 120", perSecond)
		}
		if !after.Master || after.Epoch != before.Epoch {
			t.Fatalf("the master did not hold through %v idle: before %+v, after %+v", idle, before, after)
		}
		if slots := after.Chosen - before.Chosen; slots > uint64(idle/time.Second) {
			t.Errorf("an idle cell chose %d slots in %v", slots, idle)
		}
		for _, id := range c.IDs() {
			if id == m.ID() {
				continue
			}
			st := c.Replica(id).Status()
			if st.Leader != m.ID() || st.Applied != after.Applied {
				t.Errorf("replica %d: leader %d, applied %d; the master is %d at %d", id, st.Leader, st.Applied, m.ID(), after.Applied)
			}
			if ok, why := c.Replica(id).Readiness(); !ok {
				t.Errorf("replica %d not ready after %v idle: %s", id, idle, why)
			}
		}
	})
}
