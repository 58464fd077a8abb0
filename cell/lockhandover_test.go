package cell_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
)

// paxosCounts is what the master's metrics say of the Paxos work done:
// commands it proposed, slots it applied, synced log writes.
type paxosCounts struct{ commands, slots, fsyncs float64 }

func countPaxos(r *cell.Replica) paxosCounts {
	body := r.MetricsText()
	return paxosCounts{
		commands: metricValue(body, "lockcell_paxos_proposals_total"),
		slots:    metricValue(body, "lockcell_paxos_batch_commands_count"),
		fsyncs:   metricValue(body, "lockcell_paxos_fsync_seconds_count"),
	}
}

func (a paxosCounts) minus(b paxosCounts) paxosCounts {
	return paxosCounts{a.commands - b.commands, a.slots - b.slots, a.fsyncs - b.fsyncs}
}

// handOverCell is a three-replica simulated cell with clients that keep
// their sessions alive until the test ends (or stopKA[name] is called).
type handOverCell struct {
	lc      interface{ Master() *cell.Replica }
	clients map[string]*testClient
	stopKA  map[string]context.CancelFunc
}

func startHandOverCell(t *testing.T, ctx context.Context, tune func(*cell.Config), names ...string) *handOverCell {
	t.Helper()
	lc := simCell(t, 3, tune)
	hc := &handOverCell{lc: lc, clients: map[string]*testClient{}, stopKA: map[string]context.CancelFunc{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, stop := range hc.stopKA {
			stop()
		}
		wg.Wait()
	})
	for _, name := range names {
		c := newTestClient(t, lc, "t", name)
		c.createSession(ctx)
		kaCtx, stop := context.WithCancel(ctx)
		hc.stopKA[name] = stop
		wg.Add(1)
		go func() { defer wg.Done(); c.keepAliveLoop(kaCtx, make(chan api.Event, 64)) }()
		hc.clients[name] = c
	}
	return hc
}

type acquired struct {
	seq api.SequencerResponse
	err error
}

// goAcquire starts a blocking exclusive Acquire of h by c and waits until
// the master counts one more lock waiter.
func goAcquire(t *testing.T, ctx context.Context, m *cell.Replica, c *testClient, h api.Handle) <-chan acquired {
	t.Helper()
	return goAcquireMode(t, ctx, m, c, h, api.LockExclusive)
}

// goAcquireMode is goAcquire in mode.
func goAcquireMode(t *testing.T, ctx context.Context, m *cell.Replica, c *testClient, h api.Handle, mode api.LockMode) <-chan acquired {
	t.Helper()
	before := m.Status().LockWaiters
	ch := make(chan acquired, 1)
	go func() {
		seq, err := c.acquire(ctx, h, mode, true)
		ch <- acquired{seq, err}
	}()
	synctest.Wait()
	if n := m.Status().LockWaiters; n != before+1 {
		t.Fatalf("%d lock waiters after a blocked Acquire; want %d", n, before+1)
	}
	return ch
}

// TestContendedHandOverOneRound: when a holder releases a lock that
// another session waits for, the waiter gets it in the Release's own Paxos
// slot: the master proposes one command (the Release carrying the
// waiter's grant) and every replica applies one slot, where handing over
// in two rounds took two of each. The grant's generation is greater than
// the released one's. Counted, not timed: the cell runs on synctest's
// clock and the counts come from the master's metrics.
func TestContendedHandOverOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, 60*time.Second)
		hc := startHandOverCell(t, ctx, nil, "alice", "bob", "carol")
		alice, bob, carol := hc.clients["alice"], hc.clients["bob"], hc.clients["carol"]
		m := hc.lc.Master()
		ha, hb, hcar := alice.mustOpen(ctx, "/t/q"), bob.mustOpen(ctx, "/t/q"), carol.mustOpen(ctx, "/t/q")
		ga, err := alice.acquire(ctx, ha, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		bobc := goAcquire(t, ctx, m, bob, hb)
		carolc := goAcquire(t, ctx, m, carol, hcar)

		gen := ga.Generation
		for i, next := range []struct {
			name string
			h    api.Handle
			ch   <-chan acquired
			c    *testClient
		}{{"bob", hb, bobc, bob}, {"carol", hcar, carolc, carol}} {
			prevHolder, prevHandle := alice, ha
			if i == 1 {
				prevHolder, prevHandle = bob, hb
			}
			synctest.Wait()
			before := countPaxos(m)
			if err := prevHolder.release(ctx, prevHandle, gen); err != nil {
				t.Fatal(err)
			}
			out := <-next.ch
			if out.err != nil {
				t.Fatalf("%s's blocked Acquire: %v", next.name, out.err)
			}
			synctest.Wait()
			d := countPaxos(m).minus(before)
			t.Logf("hand-over to %s: %v commands, %v slots, %v fsyncs on the master", next.name, d.commands, d.slots, d.fsyncs)
			if d.commands != 1 || d.slots != 1 {
				t.Fatalf("hand-over to %s took %v commands in %v slots; want 1 command in 1 slot", next.name, d.commands, d.slots)
			}
			if out.seq.Generation <= gen {
				t.Fatalf("%s's generation %d is not greater than the released %d", next.name, out.seq.Generation, gen)
			}
			gen = out.seq.Generation
			if r, err := next.c.checkSequencer(ctx, out.seq.Sequencer); err != nil || !r.Valid {
				t.Fatalf("%s's sequencer: %+v, %v", next.name, r, err)
			}
		}
		if n := m.Status().LockWaiters; n != 0 {
			t.Fatalf("%d lock waiters left", n)
		}
	})
}

// TestSharedRunHandOverOneSlot: when a writer releases a lock whose queue
// starts with a run of readers (shared waiters) and has another writer
// behind them, all the readers get the lock in the Release's own Paxos
// slot — one command, one slot, however many readers — at one generation
// greater than the released one's, with valid sequencers; the writer
// behind them stays queued until the last reader lets go, and gets the
// lock in that release's slot. While one replica runs a binary that cannot
// apply a run (FeatureHandOverRun), the release hands the lock to the
// first reader alone and the others follow one slot each. Counted from the
// master's metrics on synctest's clock.
func TestSharedRunHandOverOneSlot(t *testing.T) {
	t.Run("every replica applies runs", func(t *testing.T) { testSharedRunHandOver(t, false) })
	t.Run("one replica without runs", func(t *testing.T) { testSharedRunHandOver(t, true) })
}

func testSharedRunHandOver(t *testing.T, oldReplica bool) {
	const readers = 4
	wantSlots := 1.0
	var tune func(*cell.Config)
	if oldReplica {
		wantSlots = readers
		tune = func(c *cell.Config) {
			if c.ID == gateOldReplica {
				cell.SetFeatures(c, func() cell.Features { return cell.AllFeatures &^ cell.FeatureHandOverRun })
			}
		}
	}
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, 60*time.Second)
		names := []string{"writer", "writer2"}
		for i := 0; i < readers; i++ {
			names = append(names, fmt.Sprintf("reader%d", i))
		}
		hc := startHandOverCell(t, ctx, tune, names...)
		m := hc.lc.Master()
		time.Sleep(time.Second) // every replica reports its features to the master
		handles := map[string]api.Handle{}
		for _, name := range names {
			handles[name] = hc.clients[name].mustOpen(ctx, "/t/run")
		}
		w, err := hc.clients["writer"].acquire(ctx, handles["writer"], api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		var rchs []<-chan acquired
		for i := 0; i < readers; i++ {
			name := fmt.Sprintf("reader%d", i)
			rchs = append(rchs, goAcquireMode(t, ctx, m, hc.clients[name], handles[name], api.LockShared))
		}
		w2ch := goAcquire(t, ctx, m, hc.clients["writer2"], handles["writer2"])

		synctest.Wait()
		before := countPaxos(m)
		if err := hc.clients["writer"].release(ctx, handles["writer"], w.Generation); err != nil {
			t.Fatal(err)
		}
		var gen uint64
		judged := 0
		for i, ch := range rchs {
			out := <-ch
			if out.err != nil {
				t.Fatalf("reader%d's blocked Acquire: %v", i, out.err)
			}
			if out.seq.Mode != api.LockShared || out.seq.Generation <= w.Generation || gen != 0 && out.seq.Generation != gen {
				t.Fatalf("reader%d got mode %v at generation %d; want shared at one generation above %d (the others': %d)",
					i, out.seq.Mode, out.seq.Generation, w.Generation, gen)
			}
			gen = out.seq.Generation
			if r, err := hc.clients[fmt.Sprintf("reader%d", i)].checkSequencer(ctx, out.seq.Sequencer); err != nil || !r.Valid {
				t.Fatalf("reader%d's sequencer: %+v, %v", i, r, err)
			}
			judged++
		}
		synctest.Wait()
		d := countPaxos(m).minus(before)
		t.Logf("hand-over to %d readers: %v commands, %v slots, %v fsyncs on the master", judged, d.commands, d.slots, d.fsyncs)
		if judged != readers {
			t.Fatalf("judged %d readers, want %d", judged, readers)
		}
		if d.commands != wantSlots || d.slots != wantSlots {
			t.Fatalf("hand-over to %d readers took %v commands in %v slots; want %v of each", readers, d.commands, d.slots, wantSlots)
		}
		select {
		case out := <-w2ch:
			t.Fatalf("the writer behind the readers returned while they hold the lock: %+v, %v", out.seq, out.err)
		default:
		}
		if n := m.Status().LockWaiters; n != 1 {
			t.Fatalf("%d lock waiters while the readers hold the lock; want 1 (the writer)", n)
		}
		// The readers let go one by one; the last release hands the lock
		// to the writer in its own slot.
		before = countPaxos(m)
		for i := 0; i < readers; i++ {
			name := fmt.Sprintf("reader%d", i)
			if err := hc.clients[name].release(ctx, handles[name], gen); err != nil {
				t.Fatalf("%s's release: %v", name, err)
			}
		}
		out := <-w2ch
		if out.err != nil || out.seq.Mode != api.LockExclusive || out.seq.Generation <= gen {
			t.Fatalf("the writer behind the readers: %+v, %v; want exclusive above generation %d", out.seq, out.err, gen)
		}
		synctest.Wait()
		if d := countPaxos(m).minus(before); d.commands != readers || d.slots != readers {
			t.Fatalf("%d releases and the writer's grant took %v commands in %v slots; want %d of each", readers, d.commands, d.slots, readers)
		}
	})
}

// TestHandOverOnExpiry: a session that expires holding a lock others wait
// for hands it to the head waiter in the ExpireSession's own slot when the
// lock has no lock-delay; with a lock-delay the waiter gets it when the
// delay ends, and not before (the grant in the expiry fails with
// LockDelay and the head retries once).
func TestHandOverOnExpiry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delay    time.Duration
		commands float64
	}{
		{"no lock-delay", -1, 1},
		{"lock-delay 3s", 3 * time.Second, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := testCtx(t, 120*time.Second)
				hc := startHandOverCell(t, ctx, nil, "alice", "bob")
				alice, bob := hc.clients["alice"], hc.clients["bob"]
				m := hc.lc.Master()
				open, err := alice.open(ctx, api.OpenRequest{Header: alice.header(), Path: "/t/e", Create: true, LockDelay: int64(tc.delay)})
				if err != nil {
					t.Fatal(err)
				}
				ga, err := alice.acquire(ctx, open.Handle, api.LockExclusive, false)
				if err != nil {
					t.Fatal(err)
				}
				hb := bob.mustOpen(ctx, "/t/e")
				bobc := goAcquire(t, ctx, m, bob, hb)
				before := countPaxos(m)
				// alice's process dies: its lease runs out on the master.
				hc.stopKA["alice"]()
				expired := time.Now()
				var out acquired
				select {
				case out = <-bobc:
				case <-ctx.Done():
					t.Fatal("bob never got the lock")
				}
				if out.err != nil {
					t.Fatalf("bob's blocked Acquire: %v", out.err)
				}
				waited := time.Since(expired)
				synctest.Wait()
				d := countPaxos(m).minus(before)
				t.Logf("hand-over on expiry after %v: %v commands, %v slots", waited, d.commands, d.slots)
				if d.commands != tc.commands {
					t.Fatalf("hand-over on expiry took %v commands; want %v", d.commands, tc.commands)
				}
				if out.seq.Generation <= ga.Generation {
					t.Fatalf("bob's generation %d is not greater than alice's %d", out.seq.Generation, ga.Generation)
				}
				if r, err := bob.checkSequencer(ctx, ga.Sequencer); err != nil || r.Valid {
					t.Fatalf("alice's sequencer after her expiry: %+v, %v; want invalid", r, err)
				}
				if tc.delay > 0 && waited < cell.DefaultSessionLease+tc.delay-time.Second {
					t.Fatalf("bob got the lock %v after alice stopped; the lease and lock-delay alone are %v", waited, cell.DefaultSessionLease+tc.delay)
				}
			})
		})
	}
}

// TestHandOverOnClose: a session closed while it holds a lock another
// session waits for hands the lock over in the CloseSession's own slot (no
// lock-delay: the holder let go).
func TestHandOverOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, 60*time.Second)
		hc := startHandOverCell(t, ctx, nil, "alice", "bob")
		alice, bob := hc.clients["alice"], hc.clients["bob"]
		m := hc.lc.Master()
		ha, hb := alice.mustOpen(ctx, "/t/c"), bob.mustOpen(ctx, "/t/c")
		ga, err := alice.acquire(ctx, ha, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		bobc := goAcquire(t, ctx, m, bob, hb)
		hc.stopKA["alice"]()
		synctest.Wait()
		before := countPaxos(m)
		if err := alice.call(ctx, api.MethodCloseSession, &api.CloseSessionRequest{Header: alice.header()}, &api.Empty{}, false); err != nil {
			t.Fatal(err)
		}
		out := <-bobc
		if out.err != nil {
			t.Fatalf("bob's blocked Acquire: %v", out.err)
		}
		synctest.Wait()
		d := countPaxos(m).minus(before)
		if d.commands != 1 || d.slots != 1 {
			t.Fatalf("hand-over on close took %v commands in %v slots; want 1 in 1", d.commands, d.slots)
		}
		if out.seq.Generation <= ga.Generation {
			t.Fatalf("bob's generation %d is not greater than alice's %d", out.seq.Generation, ga.Generation)
		}
	})
}

// TestHandOverCancelledWaiter: the head waiter cancels while the grant
// that rides on the holder's Release is in Paxos, and the grant comes back
// granted: the cancelled waiter keeps nothing (the master gives the grant
// back, handing the lock on to the next waiter in that same command), and
// the next waiter gets the lock. The interleaving is forced by holding the
// grant's outcome until the master has seen the cancellation.
func TestHandOverCancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Only a grant is held: the waiters' first Acquires come back
		// Locked.
		tune, held := holdHeadOutcome("/t/q", func(err error) bool { return err == nil })
		ctx := testCtx(t, 60*time.Second)
		hc := startHandOverCell(t, ctx, tune, "alice", "bob", "carol")
		alice, bob, carol := hc.clients["alice"], hc.clients["bob"], hc.clients["carol"]
		m := hc.lc.Master()
		ha, hb, hcar := alice.mustOpen(ctx, "/t/q"), bob.mustOpen(ctx, "/t/q"), carol.mustOpen(ctx, "/t/q")
		ga, err := alice.acquire(ctx, ha, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		bctx, cancelBob := context.WithCancel(ctx)
		defer cancelBob()
		bobc := goAcquire(t, bctx, m, bob, hb)
		carolc := goAcquire(t, ctx, m, carol, hcar)
		before := countPaxos(m)
		if err := alice.release(ctx, ha, ga.Generation); err != nil {
			t.Fatal(err)
		}
		var out heldOutcome
		select {
		case out = <-held:
		case <-ctx.Done():
			t.Fatal("the grant riding on alice's release never came back")
		}
		cancelBob()
		if r := <-bobc; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("bob's cancelled Acquire: %+v, %v; want context.Canceled", r.seq, r.err)
		}
		<-out.gone
		if n := m.Status().LockWaiters; n != 2 {
			t.Fatalf("%d waiters while bob's grant is held back; want 2 (the interleaving was not forced)", n)
		}
		out.deliver()
		r := <-carolc
		if r.err != nil {
			t.Fatalf("carol's blocked Acquire after bob cancelled: %v", r.err)
		}
		synctest.Wait()
		d := countPaxos(m).minus(before)
		// alice's Release with bob's grant, then bob's grant given back
		// with carol's: two commands where four were needed.
		if d.commands != 2 {
			t.Fatalf("%v commands from alice's release to carol's grant; want 2", d.commands)
		}
		if r.seq.Generation <= ga.Generation+1 {
			t.Fatalf("carol's generation %d; want greater than bob's, which was greater than alice's %d", r.seq.Generation, ga.Generation)
		}
		if n := m.Status().LockWaiters; n != 0 {
			t.Fatalf("%d waiters left", n)
		}
		// bob holds nothing: carol's grant is exclusive, and bob may take
		// the lock once carol gives it back.
		if err := carol.release(ctx, hcar, r.seq.Generation); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.acquire(ctx, hb, api.LockExclusive, false); err != nil {
			t.Fatalf("bob's TryAcquire after carol released: %v", err)
		}
	})
}

var (
	flagHandOvers = flag.Int("cell.handovers", 24, "hand-overs TestHandOverCost makes (bench/scripts/cpu-per-command.sh runs it at two counts under callgrind)")
	flagTwoRounds = flag.Bool("cell.two-rounds", false, "TestHandOverCost hands over in two Paxos rounds, as before the grant rode on the release")
)

// TestHandOverCost: three sessions pass one lock round and round, each
// queueing again behind the others as soon as it gave the lock up, so
// every cycle is one hand-over and nothing else. Each hand-over costs the
// master exactly one command in one slot (two of each with
// -cell.two-rounds), and the grants' generations only grow.
// bench/scripts/cpu-per-command.sh runs it under callgrind with two values
// of -cell.handovers, in both modes, for the whole cell's instructions per
// hand-over: the cell runs on synctest's clock, so callgrind's slowness
// changes no lease and no count.
func TestHandOverCost(t *testing.T) {
	n := *flagHandOvers
	perHandOver := 1.0
	var tune func(*cell.Config)
	if *flagTwoRounds {
		perHandOver, tune = 2, cell.SetTwoRoundHandOver
	}
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, time.Duration(n+60)*time.Second)
		names := []string{"alice", "bob", "carol"}
		hc := startHandOverCell(t, ctx, tune, names...)
		m := hc.lc.Master()
		handles := make([]api.Handle, len(names))
		for i, name := range names {
			handles[i] = hc.clients[name].mustOpen(ctx, "/t/cost")
		}
		g, err := hc.clients["alice"].acquire(ctx, handles[0], api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		gen := g.Generation
		waits := make([]<-chan acquired, len(names))
		for i := 1; i < len(names); i++ {
			waits[i] = goAcquire(t, ctx, m, hc.clients[names[i]], handles[i])
		}
		var total paxosCounts
		for k := 0; k < n; k++ {
			holder, next := k%len(names), (k+1)%len(names)
			synctest.Wait()
			before := countPaxos(m)
			if err := hc.clients[names[holder]].release(ctx, handles[holder], gen); err != nil {
				t.Fatalf("hand-over %d: release: %v", k, err)
			}
			out := <-waits[next]
			if out.err != nil {
				t.Fatalf("hand-over %d: %s's Acquire: %v", k, names[next], out.err)
			}
			synctest.Wait()
			d := countPaxos(m).minus(before)
			if d.commands != perHandOver || d.slots != perHandOver {
				t.Fatalf("hand-over %d took %v commands in %v slots; want %v", k, d.commands, d.slots, perHandOver)
			}
			total.commands += d.commands
			total.slots += d.slots
			total.fsyncs += d.fsyncs
			if out.seq.Generation <= gen {
				t.Fatalf("hand-over %d: generation %d after %d", k, out.seq.Generation, gen)
			}
			gen = out.seq.Generation
			waits[holder] = goAcquire(t, ctx, m, hc.clients[names[holder]], handles[holder])
		}
		if n < 1 {
			t.Fatalf("-cell.handovers=%d: no hand-over judged", n)
		}
		t.Logf("%d hand-overs: %.2f commands, %.2f slots, %.2f fsyncs per hand-over on the master",
			n, total.commands/float64(n), total.slots/float64(n), total.fsyncs/float64(n))
	})
}
