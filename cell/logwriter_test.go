package cell_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
)

// TestLoopRunsWhileLogSyncs shows, on synctest's clock, that the master's
// run loop goes on while its Paxos log is being fsynced (pairFsync per
// fsync, a Paxos window of 4 slots), in three ways that writing the log on
// the loop rules out:
//
//   - group commit: the log writer's batches hold more than one Ready's
//     write on average, because the loop stepped answers and placed
//     proposals, making new Readies, while the previous fsync ran;
//   - more than one slot chosen per fsync of the master: proposals that
//     arrived during an fsync were placed in new slots at once (on the
//     loop they would wait for the fsync and share the next slot);
//   - a slot chosen by the followers' durable acknowledgements while the
//     master's own write of it is still in flight: the master's core is
//     seen with slots chosen but not yet applied (it hands a value out to
//     apply only once its own copy is durable) and writes in flight.
func TestLoopRunsWhileLogSyncs(t *testing.T) {
	const pairs = 12
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, 10*time.Minute)
		samples, ahead := 0, 0
		var b0, w0 uint64
		first := true
		m, before, ops := runPairs(t, ctx, pairs, func(cfg *cell.Config) { cfg.MaxInflight = 4 }, func(m *cell.Replica) {
			if first {
				b0, w0 = m.LogWriterCounts()
				first = false
			}
			samples++
			if st := m.CoreStatus(); st.Chosen > st.Applied && st.WritesInFlight > 0 {
				ahead++
			}
		})
		d := countPaxos(m).minus(before)
		b1, w1 := m.LogWriterCounts()
		batches, writes := b1-b0, w1-w0
		t.Logf("%d pairs: %d Readies' writes in %d batches (%.2f per batch), %.0f fsyncs, %.0f slots (%.2f slots per fsync); %d of %d samples saw slots chosen ahead of the master's own durable write",
			ops, writes, batches, float64(writes)/float64(batches), d.fsyncs, d.slots, d.slots/d.fsyncs, ahead, samples)
		if batches < 20 || samples < 100 {
			t.Fatalf("judged %d batches and %d samples: too few", batches, samples)
		}
		if float64(writes) < 1.3*float64(batches) {
			t.Errorf("%d writes in %d batches: the loop made few Readies while an fsync ran (it waits for the log?)", writes, batches)
		}
		if d.slots < 1.3*d.fsyncs {
			t.Errorf("%.0f slots chosen in %.0f fsyncs of the master: no more than one slot per fsync", d.slots, d.fsyncs)
		}
		if ahead == 0 {
			t.Errorf("no sample saw the master's core with a slot chosen ahead of its own durable write")
		}
	})
}
