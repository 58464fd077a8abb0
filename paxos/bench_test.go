package paxos

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The benchmarks push proposals through a 5-replica cell in-process: one
// goroutine, every message delivered at once, every Ready persisted
// (MustSync honoured) before its messages are sent. Each round proposes
// batch commands at the leader (they fill one slot) and delivers until the
// cell is quiet, so a round costs one synced write at the leader and one at
// each acceptor, one after another. proposals/s is the figure to read.

type benchReplica struct {
	node    *Node
	st      LogStore
	applied Slot
	snapAt  Slot
}

type benchCell struct {
	b     *testing.B
	reps  []*benchReplica
	queue []Message
}

func newBenchCell(b *testing.B, batch int, stores []LogStore) *benchCell {
	c := &benchCell{b: b}
	for i, st := range stores {
		n, err := NewNode(Config{ID: ID(i + 1), Replicas: ids(len(stores)), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 22,
			MaxBatch: batch, Seed: uint64(i), Storage: st})
		if err != nil {
			b.Fatal(err)
		}
		c.reps = append(c.reps, &benchReplica{node: n, st: st})
	}
	return c
}

func (c *benchCell) handle(r *benchReplica) {
	for r.node.HasReady() {
		rd := r.node.Ready()
		if err := r.st.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
			c.b.Fatal(err)
		}
		if !rd.Snapshot.IsEmpty() {
			if err := r.st.SaveSnapshot(rd.Snapshot); err != nil {
				c.b.Fatal(err)
			}
		}
		if k := len(rd.Chosen); k > 0 {
			r.applied = rd.Chosen[k-1].Slot
		}
		c.queue = append(c.queue, rd.Messages...)
		r.node.Advance(rd)
		// Keep the log short, as the cell would by snapshotting.
		if r.applied >= r.snapAt+64 {
			if err := r.st.SaveSnapshot(Snapshot{Slot: r.applied, Data: []byte("app")}); err != nil {
				c.b.Fatal(err)
			}
			if err := r.node.Compact(r.applied); err != nil {
				c.b.Fatal(err)
			}
			r.snapAt = r.applied
		}
	}
}

func (c *benchCell) deliver() {
	for _, r := range c.reps {
		c.handle(r)
	}
	for len(c.queue) > 0 {
		m := c.queue[0]
		c.queue = c.queue[1:]
		r := c.reps[m.To-1]
		if err := r.node.Step(m); err != nil {
			c.b.Fatal(err)
		}
		c.handle(r)
	}
	if cap(c.queue) > 4096 {
		c.queue = nil
	}
}

func (c *benchCell) leader() *benchReplica {
	for i := 0; i < 500; i++ {
		for _, r := range c.reps {
			if r.node.Status().Master {
				return r
			}
		}
		for _, r := range c.reps {
			r.node.Tick()
		}
		c.deliver()
	}
	c.b.Fatal("no master")
	return nil
}

func runProposeBench(b *testing.B, batch int, stores []LogStore) {
	c := newBenchCell(b, batch, stores)
	l := c.leader()
	data := make([]byte, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	done := 0
	for done < b.N {
		k := min(batch, b.N-done)
		for i := 0; i < k; i++ {
			if _, err := l.node.Propose(data); err != nil {
				b.Fatal(err)
			}
		}
		c.deliver()
		done += k
	}
	b.StopTimer()
	if st := l.node.Status(); st.Pending != 0 || !st.IsLeader {
		b.Fatalf("leader lost or proposals stuck: %+v", st)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
}

func BenchmarkProposeMemory(b *testing.B) {
	for _, batch := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			stores := make([]LogStore, 5)
			for i := range stores {
				stores[i] = NewMemoryStorage()
			}
			runProposeBench(b, batch, stores)
		})
	}
}

// benchQuietLogger keeps Pebble's informational logging out of the output.
type benchQuietLogger struct{}

func (benchQuietLogger) Infof(string, ...any)  {}
func (benchQuietLogger) Errorf(string, ...any) {}
func (benchQuietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// BenchmarkProposePebble is the same with the Pebble LogStore on real disk
// (a temp dir), every MustSync write fsynced.
func BenchmarkProposePebble(b *testing.B) {
	for _, batch := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			stores := make([]LogStore, 5)
			for i := range stores {
				db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: benchQuietLogger{}})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = db.Close() })
				st, err := NewPebbleStorage(db)
				if err != nil {
					b.Fatal(err)
				}
				stores[i] = st
			}
			runProposeBench(b, batch, stores)
		})
	}
}
