package celltest

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// SimConfig configures one whole-cell simulation run (Simulate). Zero
// values select the documented defaults.
type SimConfig struct {
	// Seed decides the fault schedule and every client's choice of
	// operations.
	Seed uint64
	// Steps is the number of fault steps. If zero, 30.
	Steps int
	// Replicas is the size of the cell. If zero, 5.
	Replicas int
	// Clients is the number of client processes, each with one session.
	// If zero, 3.
	Clients int
	// Locks is the number of lock files the clients contend for. If zero, 2.
	Locks int
	// Logf, if set, receives the run's trace, one line per event.
	Logf func(format string, args ...any)
}

// SimResult is what a simulation judged and found.
type SimResult struct {
	// TraceHash digests Trace. It is a function of the seed (and the
	// SimConfig) alone: two runs of one seed give the same TraceHash (see
	// Simulate for what it covers and what it cannot).
	TraceHash uint64
	// Trace is the run's deterministic trace, one line per event: each
	// replica's clock rate, then every fault injected or undone (its kind,
	// the role it was aimed at, its step, its planned instant and length),
	// then the recovery.
	Trace []string
	// OutcomeHash digests, per client, the sequence of operations it ran
	// and their outcome classes. It is not repeatable: it depends on how
	// the Go scheduler interleaved the cell's goroutines (see Simulate).
	OutcomeHash uint64
	// Faults counts the faults injected by kind (crash, restart, isolate,
	// mute, heal, stall, pause, resume); MasterFaults those that hit the
	// master.
	Faults       map[string]int
	MasterFaults int
	// Failovers counts changes of the serving master seen by the sampler.
	Failovers int
	// Samples is how many instants the sampler checked (master count, lock
	// holders, sessions).
	Samples int
	// Writes, AckedWrites, Reads, Grants and Restarts count client
	// operations: writes issued and acknowledged, reads checked, locks
	// granted, client processes restarted.
	Writes, AckedWrites, Reads, Grants, Restarts int
	// Violations lists every broken invariant, in the order found.
	Violations []string
}

// Simulate runs a cell of cfg.Replicas replicas and cfg.Clients clients
// doing lock, unlock, write and read operations while a seeded fault
// schedule crashes and restarts replicas (the master among them), isolates
// them from their peers, mutes them (a one-way partition: they hear their
// peers, nothing they send arrives), stalls their run loops and pauses them. Each
// replica's clock runs at its own seeded rate, within the drift bound. Under
// testing/synctest (call it inside the bubble) it runs on simulated time.
//
// It checks, at every sampled instant (every 5 ms of simulated time):
//
//   - at most one replica serves as master;
//   - no two clients hold one lock intact: a client's Lock whose context is
//     not cancelled, for a grant the cell acknowledged, while another
//     client's acknowledged grant of the same lock is intact too (a client
//     that has begun releasing no longer counts);
//   - no session has expired: the schedule never keeps a majority down, so
//     every fail-over ends well within the session lease and grace period;
//   - no replica's run loop is stuck in one step (its watchdog, which does
//     not count deliberate stalls);
//
// after every read, that it returned the latest acknowledged write or a
// later one (a deposed master that serves reads returns an older one);
// and at the end, after healing every fault, that every replica applied
// the same state (equal checksums) within convergeWithin of simulated time
// (liveness: no replica stopped learning) and every acknowledged write is
// there. Simulated time does not pass while a goroutine computes, so a
// replica that falls behind because applying costs it too much CPU is not
// found here (see namespace's TestCacheCheckCostBounded for one such cost).
//
// # What a seed repeats
//
// The seed decides, and a replay of it repeats exactly (TraceHash, Trace):
// each replica's clock rate; the fault schedule — every fault's kind, the
// role it is aimed at (the master, or a replica), the step and planned
// instant it is injected and undone, its length, and whether it is
// skipped (only to keep the faulty replicas a minority, which depends on
// the schedule alone); and each client's choice at its k-th operation
// (kind, lock, file, pause: a generator per client and operation, so an
// outcome never shifts a later choice). The schedule keeps its own
// planned clock, so a control that takes simulated time (a crash waits
// for the replica's goroutines) never moves a later fault; a fault aimed
// at a role whose replica is already faulty goes to the lowest-id healthy
// replica rather than being skipped, so how many faults are in force
// never depends on which replica is master.
//
// What the seed cannot fix, and so what TraceHash leaves out: the order
// in which the goroutines runnable at one simulated instant run.
// synctest fixes when things happen, not in which order: with GOMAXPROCS
// above 1 they run in parallel, and even at GOMAXPROCS=1 the runtime picks
// among ready select cases, iterates maps and schedules goroutines with
// its own per-process random seed, which no program can set. The cell has
// many such goroutines (each replica's run loop, RPC handlers, quic-go's
// per-connection loops, Pebble's flushes and compactions, each client's
// KeepAlive loop), and memnet delivers at once, so many events share an
// instant. Downstream of that order: which replica wins an election, and
// so which replica a fault aimed at "the master" hits; which of two
// clients' requests reaches the master first; and every client
// operation's outcome and timing, which is what OutcomeHash digests and
// why it differs between runs of one seed. Other sources not from the
// seed, which matter less: crypto/rand in TLS 1.3 handshakes, QUIC
// connection ids, the cell's token ids and the test CA and signing keys
// (bytes, not timing), and the process-wide math/rand jitter of the
// client's reconnect backoff (client/conn.go) and a replica's peer redial
// (transport/peer.go): with both set to constants, seed 1's outcome
// traces still diverged within the first 2 s of simulated time. The
// fault injector (transport.Faults) draws from one seeded generator shared
// by every replica's endpoint, so the order of its draws follows the
// goroutine order too; the simulator sets only certain rules (drop with
// probability 1), whose effect no draw changes. Each
// replica seeds its election jitter from the clock when it starts
// (cell/replica.go): in the bubble that is simulated time, the same at
// every replay as long as the instant the replica starts is. Because of
// the goroutine order, a failing seed may need a few replays to fail
// again.
func Simulate(t testing.TB, cfg SimConfig) SimResult {
	t.Helper()
	if cfg.Steps == 0 {
		cfg.Steps = 30
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 5
	}
	if cfg.Clients == 0 {
		cfg.Clients = 3
	}
	if cfg.Locks == 0 {
		cfg.Locks = 2
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	s := &sim{cfg: cfg, trace: fnv.New64a()}
	s.mu.res = SimResult{Faults: map[string]int{}}
	s.mu.held = map[int]map[*holder]bool{}
	s.mu.seen = map[string]int{}
	// Every replica's clock runs at its own rate, up to 0.9% slower than
	// real time: within the 1% drift bound the master lease allows for.
	rng := rand.New(rand.NewPCG(cfg.Seed, 1<<32))
	scales := map[uint64]float64{}
	for id := uint64(1); id <= uint64(cfg.Replicas); id++ {
		scales[id] = 1 + float64(rng.IntN(900))/100_000
		s.traceEvent("replica %d: clock rate %.5f", id, scales[id])
	}
	s.c = Start(t, Options{Replicas: cfg.Replicas, Seed: cfg.Seed, ClockScale: scales})
	s.run(t)
	s.mu.res.TraceHash = s.trace.Sum64()
	h := fnv.New64a()
	for _, w := range s.workers {
		h.Write(binary.LittleEndian.AppendUint64(nil, w.outcomes.Sum64()))
	}
	s.mu.res.OutcomeHash = h.Sum64()
	return s.mu.res
}

// traceEvent adds a line to the deterministic trace (SimResult.Trace and
// TraceHash) and logs it. Only Simulate's own goroutine calls it (the
// fault schedule runs there), so the lines come in one order.
func (s *sim) traceEvent(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	fmt.Fprintf(s.trace, "%s\n", line)
	s.mu.Lock()
	s.mu.res.Trace = append(s.mu.res.Trace, line)
	s.mu.Unlock()
	s.cfg.Logf("%v %s", simNow(), line)
}

type sim struct {
	cfg     SimConfig
	c       *Cell
	trace   hash.Hash64 // the deterministic trace; see traceEvent
	workers []*worker

	mu struct {
		sync.Mutex
		res SimResult
		// held: per lock, the acknowledged grants not yet given up.
		held map[int]map[*holder]bool
		// acked and issued: per client (and its file), the number of its
		// latest write acknowledged and of its latest write issued.
		acked, issued []int
		// sessions: per client, its current session.
		sessions []*client.Session
		// seen counts each distinct violation.
		seen map[string]int
	}
}

// holder is an acknowledged grant of a lock.
type holder struct {
	client int
	l      *client.Lock
	// releasing: its client has begun to give it up (or lost track of
	// it), so it no longer counts as a holder. REQUIRES: sim.mu held.
	releasing bool
}

// worker is one client process with one session.
type worker struct {
	id    int
	cl    *client.Client
	s     *client.Session
	files []*client.Handle
	locks []*client.Handle
	// mine: per lock (by index), this client's acknowledged grant, or nil.
	// A slice, not a map: the client gives its locks up in index order.
	mine     []*holder
	outcomes hash.Hash64 // operations and outcome classes (OutcomeHash)
	n        int         // the number of this client's latest write
}

// violate records a broken invariant; a repeat of one already recorded
// (the sampler finds a lasting one at every instant) is only counted.
func (s *sim) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	seen := s.mu.seen[msg] > 0
	s.mu.seen[msg]++
	if !seen {
		s.mu.res.Violations = append(s.mu.res.Violations, fmt.Sprintf("%v: %s", simNow(), msg))
	}
	s.mu.Unlock()
	if !seen {
		s.cfg.Logf("%v VIOLATION: %s", simNow(), msg)
	}
}

func (s *sim) run(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	s.mu.acked = make([]int, s.cfg.Clients)
	s.mu.issued = make([]int, s.cfg.Clients)
	s.mu.sessions = make([]*client.Session, s.cfg.Clients)
	for i := range s.cfg.Clients {
		w, err := s.newWorker(ctx, i)
		if err != nil {
			t.Fatalf("celltest: sim: client %d: %v", i, err)
		}
		s.workers = append(s.workers, w)
	}

	work, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range s.workers {
		wg.Add(1)
		go func() { defer wg.Done(); s.work(work, w) }()
	}
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); s.sample(sampling) }()

	s.faults(ctx)

	// Recover: every fault healed, every replica running.
	for _, id := range s.c.IDs() {
		s.c.Resume(id)
	}
	s.c.Heal()
	for _, id := range s.c.IDs() {
		s.c.Restart(id)
	}
	s.traceEvent("recover: every replica running, every partition healed")
	time.Sleep(2 * time.Second)
	stopWork()
	wg.Wait()
	stopSampling()
	<-sampled

	// Liveness: once every fault is healed, every replica learns and
	// applies every chosen slot; a replica that stopped learning (a run
	// loop stuck in a step, a catch-up that gave up) shows up here.
	conv, cancelConv := context.WithTimeout(ctx, convergeWithin)
	defer cancelConv()
	if err := s.c.WaitConverged(conv); err != nil {
		s.violate("replicas did not converge within %v of the recovery: %v", convergeWithin, err)
	}
	s.checkFiles(ctx)
	for _, w := range s.workers {
		if st := w.s.State(); st == client.StateExpired {
			s.violate("client %d: session lost: %v", w.id, w.s.Err())
		}
	}
}

// convergeWithin bounds, in simulated time, how long the replicas may take
// to apply the same state once every fault is healed and every replica
// runs: a restarted replica catches up by a snapshot and the tail in well
// under a second.
const convergeWithin = 30 * time.Second

func (s *sim) newWorker(ctx context.Context, i int) (*worker, error) {
	w := &worker{id: i, mine: make([]*holder, s.cfg.Locks), outcomes: fnv.New64a()}
	return w, s.connect(ctx, w)
}

// connect gives w a new client process: a new connection (found as a new
// client finds the master), a new session and new handles.
func (s *sim) connect(ctx context.Context, w *worker) error {
	cfg := s.c.ClientConfig("", "c"+strconv.Itoa(w.id))
	// The steady client caches what it reads: its reads are answered
	// locally until the master invalidates them, which a new master may
	// do only after its fail-over barrier.
	cfg.Cache = w.id == 0
	cfg.OnEvent = func(sess *client.Session, ev client.Event) {
		if ev.Kind != client.EventNode {
			s.cfg.Logf("%v client %d: session %d: %v (%v)", simNow(), w.id, sess.ID(), ev, sess.Err())
		}
	}
	cl, err := s.c.TryDial(ctx, cfg)
	if err != nil {
		return err
	}
	sess, err := cl.NewSession(ctx)
	if err != nil {
		_ = cl.Close()
		return err
	}
	w.cl, w.s, w.files, w.locks = cl, sess, nil, nil
	s.mu.Lock()
	s.mu.sessions[w.id] = sess
	s.mu.Unlock()
	for f := range s.cfg.Clients {
		h, err := w.s.Open(ctx, filePath(f), client.OpenOptions{Create: true, Contents: []byte("0")})
		if err != nil {
			return err
		}
		w.files = append(w.files, h)
	}
	for j := range s.cfg.Locks {
		// A lock-delay of 1 s (the default is 10 s) lets a lock pass on
		// soon after its holder's session expired.
		h, err := w.s.Open(ctx, "/t/lock"+strconv.Itoa(j), client.OpenOptions{Create: true, LockDelay: time.Second})
		if err != nil {
			return err
		}
		w.locks = append(w.locks, h)
	}
	return nil
}

// restart ends w's client process, closing its session (if the cell
// answers within 10 s; otherwise its lease runs out and its locks go after
// their lock-delay), and starts a new one, which must find the master
// anew. (Abandoning sessions outright would hold up every write after the
// next fail-over until they expire, 12 s: the fail-over barrier waits for
// every surviving session. A short lease instead makes a session's
// survival hinge on how fast a client in jeopardy finds the new master.)
func (s *sim) restart(ctx context.Context, w *worker) string {
	for j, hd := range w.mine {
		if hd == nil {
			continue
		}
		s.mu.Lock()
		hd.releasing = true
		s.mu.Unlock()
		s.unregister(j, hd)
	}
	clear(w.mine)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = w.s.Close(cctx)
	cancel()
	_ = w.cl.Close()
	s.mu.Lock()
	s.mu.res.Restarts++
	s.mu.Unlock()
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.connect(cctx, w)
		cancel()
		if err == nil {
			return "restart ok"
		}
		s.cfg.Logf("%v client %d: reconnecting: %v", simNow(), w.id, err)
	}
	return "restart cancelled"
}

func filePath(i int) string { return "/t/file" + strconv.Itoa(i) }

// simNow is the time since the bubble's start (synctest starts its clock
// at midnight UTC, 2000-01-01).
func simNow() time.Duration {
	return time.Since(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Round(time.Millisecond)
}

// outcome classes an operation's error for the trace.
func outcome(err error) string {
	var ae *api.Error
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ae):
		return ae.Code.String()
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "err"
	}
}

// work runs client w's operations until ctx ends. Client 0 is steady: it
// caches file contents, reads and never writes (a write to a master that
// just died would keep it waiting), never restarts and seldom releases a
// lock it holds, so it stays with the
// replica it found and holds locks for long, while the others restart now
// and then and so find the current master: between them, a deposed master
// that goes on serving meets clients of the new one.
func (s *sim) work(ctx context.Context, w *worker) {
	for k := uint64(0); ctx.Err() == nil; k++ {
		if w.s.State() == client.StateExpired {
			return
		}
		// The k-th operation's choices come from a generator of its own,
		// each drawn whatever the branch, so that an outcome never shifts
		// a later choice: client i's k-th choice is the seed's alone.
		rng := rand.New(rand.NewPCG(s.cfg.Seed, uint64(w.id+1)<<40|k))
		op := rng.IntN(100)
		j := rng.IntN(s.cfg.Locks)
		f := rng.IntN(s.cfg.Clients)
		pause := time.Duration(10+rng.IntN(290)) * time.Millisecond
		opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if w.id == 0 && op >= 70 && w.mine[j] != nil && op < 97 {
			op = 50 // the steady client mostly keeps what it holds
		}
		var desc string
		switch {
		case op < 5:
			if w.id == 0 {
				desc = "stay"
				break
			}
			desc = s.restart(ctx, w)
		case op < 40 && w.id != 0:
			desc = s.write(opCtx, w)
		case op < 70:
			desc = s.read(opCtx, w, f)
		default:
			desc = s.lockOp(opCtx, w, j)
		}
		cancel()
		fmt.Fprintf(w.outcomes, "%s;", desc)
		s.cfg.Logf("%v client %d: %s", simNow(), w.id, desc)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	// Give up what is still held, so that the end state is quiet.
	for j, hd := range w.mine {
		if hd == nil {
			continue
		}
		s.mu.Lock()
		hd.releasing = true
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = hd.l.Release(rctx)
		cancel()
		s.unregister(j, hd)
	}
}

func (s *sim) write(ctx context.Context, w *worker) string {
	w.n++
	s.mu.Lock()
	s.mu.issued[w.id] = w.n
	s.mu.res.Writes++
	s.mu.Unlock()
	_, err := w.files[w.id].SetContents(ctx, []byte(strconv.Itoa(w.n)))
	if err == nil {
		s.mu.Lock()
		s.mu.acked[w.id] = max(s.mu.acked[w.id], w.n)
		s.mu.res.AckedWrites++
		s.mu.Unlock()
	}
	if err != nil {
		s.cfg.Logf("%v client %d: write: %v", simNow(), w.id, err)
	}
	return fmt.Sprintf("write file%d=%d %s", w.id, w.n, outcome(err))
}

func (s *sim) read(ctx context.Context, w *worker, f int) string {
	s.mu.Lock()
	low := s.mu.acked[f]
	s.mu.Unlock()
	data, _, err := w.files[f].GetContents(ctx)
	if err != nil {
		return fmt.Sprintf("read file%d %s", f, outcome(err))
	}
	s.mu.Lock()
	high := s.mu.issued[f]
	s.mu.res.Reads++
	s.mu.Unlock()
	n, perr := strconv.Atoi(string(data))
	switch {
	case perr != nil:
		s.violate("client %d read file%d: %q is no value any client wrote", w.id, f, data)
	case n < low:
		s.violate("client %d read file%d: stale value %d, but write %d was acknowledged before the read began", w.id, f, n, low)
	case n > high:
		s.violate("client %d read file%d: value %d was never written (latest issued %d)", w.id, f, n, high)
	}
	return fmt.Sprintf("read file%d ok", f)
}

func (s *sim) lockOp(ctx context.Context, w *worker, j int) string {
	if hd := w.mine[j]; hd != nil {
		s.mu.Lock()
		hd.releasing = true
		s.mu.Unlock()
		err := hd.l.Release(ctx)
		w.mine[j] = nil
		s.unregister(j, hd)
		return fmt.Sprintf("release lock%d gen %d %s", j, hd.l.Generation(), outcome(err))
	}
	l, err := w.locks[j].TryAcquire(ctx, api.LockExclusive)
	if err != nil {
		if errors.Is(err, client.ErrLocked) {
			return fmt.Sprintf("acquire lock%d locked", j)
		}
		return fmt.Sprintf("acquire lock%d %s", j, outcome(err))
	}
	hd := &holder{client: w.id, l: l}
	w.mine[j] = hd
	s.mu.Lock()
	if s.mu.held[j] == nil {
		s.mu.held[j] = map[*holder]bool{}
	}
	s.mu.held[j][hd] = true
	s.mu.res.Grants++
	s.mu.Unlock()
	s.checkLock(j)
	return fmt.Sprintf("acquire lock%d ok", j)
}

func (s *sim) unregister(j int, hd *holder) {
	s.mu.Lock()
	delete(s.mu.held[j], hd)
	s.mu.Unlock()
}

// checkLock checks that at most one acknowledged grant of lock j is intact.
func (s *sim) checkLock(j int) {
	s.mu.Lock()
	var intact []*holder
	for hd := range s.mu.held[j] {
		if !hd.releasing && hd.l.Err() == nil {
			intact = append(intact, hd)
		}
	}
	s.mu.Unlock()
	if len(intact) > 1 {
		var who []string
		for _, hd := range intact {
			who = append(who, fmt.Sprintf("client %d (generation %d)", hd.client, hd.l.Generation()))
		}
		slices.Sort(who)
		s.violate("lock%d held intact by %v at once", j, who)
	}
}

// sample checks the cell every 5 ms of simulated time until ctx ends.
func (s *sim) sample(ctx context.Context) {
	var last uint64
	for ctx.Err() == nil {
		ms := s.c.Masters()
		if len(ms) > 1 {
			var ids []uint64
			for _, m := range ms {
				ids = append(ids, m.ID())
			}
			s.violate("replicas %v serve as master at once", ids)
		}
		if len(ms) == 1 && ms[0].ID() != last {
			if last != 0 {
				s.mu.Lock()
				s.mu.res.Failovers++
				s.mu.Unlock()
			}
			last = ms[0].ID()
		}
		for j := range s.cfg.Locks {
			s.checkLock(j)
		}
		for _, r := range s.c.Running() {
			if r.Status().LoopStuck {
				s.violate("replica %d: run loop stuck in one step (its watchdog logged every goroutine's stack)", r.ID())
			}
		}
		s.mu.Lock()
		sessions := slices.Clone(s.mu.sessions)
		s.mu.Unlock()
		for i, sess := range sessions {
			if sess != nil && sess.State() == client.StateExpired {
				s.violate("client %d: session %d lost: %v", i, sess.ID(), sess.Err())
			}
		}
		s.mu.Lock()
		s.mu.res.Samples++
		s.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fault is a fault in force: its kind (crash, stall, pause, isolate,
// mute), the role it was aimed at, the step that injected it and the
// planned instant (on the schedule's clock) at which the schedule undoes
// it.
type fault struct {
	kind   string
	target string
	step   int
	until  time.Duration
}

// faults runs the fault schedule. Each step first undoes the faults whose
// time is up, then may inject one: a crash, a stall (the run loop stops,
// the network stays up), a pause (loop and network stop), an isolation
// from the peers or a mute (what it sends to its peers is lost), aimed at
// the master half of the time. A fault lasts 0.5–3 s, or 5–40 s three
// times in ten (longer than the session lease and the lock-delay
// together, so that a master that serves without its lease has time to
// hand out what it no longer owns). At most a minority of the replicas is
// faulty at once, so that a majority can always elect a master and every
// fail-over ends within the session lease.
//
// The schedule runs on its own planned clock (at: the sum of the steps'
// seeded waits), sleeping until each step's planned instant, and decides
// only by it, never by time.Now: a control that takes simulated time
// delays the faults after it but does not change them (see Simulate).
func (s *sim) faults(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0))
	ids := s.c.IDs()
	down := map[uint64]fault{}
	minority := (len(ids) - 1) / 2
	start := time.Now()
	var at time.Duration
	for step := 0; step < s.cfg.Steps && ctx.Err() == nil; step++ {
		if d := time.Until(start.Add(at)); d > 0 {
			time.Sleep(d)
		}
		// Undo the faults whose time is up, earliest first (ties: the
		// earlier injected first), not in replica-id order: which replica
		// a fault hit is not the seed's to decide.
		var due []uint64
		for id, f := range down {
			if f.until <= at {
				due = append(due, id)
			}
		}
		slices.SortFunc(due, func(a, b uint64) int {
			return cmp.Or(cmp.Compare(down[a].until, down[b].until), cmp.Compare(down[a].step, down[b].step))
		})
		for _, id := range due {
			f := down[id]
			delete(down, id)
			undo := "restart"
			switch f.kind {
			case "crash":
				s.c.Restart(id)
			case "stall", "pause":
				s.c.Resume(id)
				undo = "resume"
			case "isolate", "mute":
				s.isolate(ids, down)
				undo = "heal"
			}
			s.count(undo, false)
			s.traceEvent("%v step %d: %s (the %s of step %d, aimed at the %s)", at, step, undo, f.kind, f.step, f.target)
			s.cfg.Logf("%v step %d: %s %d", simNow(), step, undo, id)
		}
		kind := []string{"crash", "stall", "pause", "isolate", "mute", "none", "none"}[rng.IntN(7)]
		atMaster := rng.IntN(2) == 0
		pick := ids[rng.IntN(len(ids))]
		dur := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		if rng.IntN(10) < 3 {
			dur = time.Duration(5000+rng.IntN(35000)) * time.Millisecond
		}
		wait := time.Duration(200+rng.IntN(2800)) * time.Millisecond
		target, hitMaster := "replica", false
		if atMaster {
			target = "master"
			if m := s.c.Master(); m != nil {
				pick, hitMaster = m.ID(), true
			}
		}
		if len(down) >= minority {
			kind = "none"
		}
		if _, ok := down[pick]; ok && kind != "none" {
			// The role's replica is already faulty (a stalled or muted
			// master still says it is master until its lease runs out):
			// the fault goes to the lowest-id healthy replica instead of
			// being skipped, so that how many faults are in force depends
			// on the seed alone.
			for _, id := range ids {
				if _, ok := down[id]; !ok {
					pick, hitMaster = id, false
					break
				}
			}
		}
		if kind != "none" {
			down[pick] = fault{kind: kind, target: target, step: step, until: at + dur}
			switch kind {
			case "crash":
				s.c.Crash(pick)
			case "stall":
				s.c.Stall(pick)
			case "pause":
				s.c.Pause(pick)
			case "isolate", "mute":
				s.isolate(ids, down)
			}
			s.count(kind, hitMaster)
			s.traceEvent("%v step %d: %s the %s for %v", at, step, kind, target, dur)
			s.cfg.Logf("%v step %d: %s %d (the %s) for %v", simNow(), step, kind, pick, target, dur)
		} else {
			s.traceEvent("%v step %d: none", at, step)
		}
		at += wait
	}
	if d := time.Until(start.Add(at)); d > 0 {
		time.Sleep(d)
	}
}

// count counts an injected fault (or its undoing); atMaster: it hit the
// replica that served as master.
func (s *sim) count(kind string, atMaster bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.res.Faults[kind]++
	if atMaster {
		s.mu.res.MasterFaults++
	}
}

// isolate cuts every replica down names as isolated off from all others,
// and the messages every replica down names as muted sends to its peers
// (it still hears them: a one-way partition).
func (s *sim) isolate(ids []uint64, down map[uint64]fault) {
	var rest []uint64
	groups := [][]uint64{nil}
	for _, id := range ids {
		if down[id].kind == "isolate" {
			groups = append(groups, []uint64{id})
		} else {
			rest = append(rest, id)
		}
	}
	groups[0] = rest
	s.c.Partition(groups...)
	for _, id := range ids {
		if down[id].kind == "mute" {
			s.c.Mute(id)
		}
	}
}

// checkFiles reads every file through a new session and checks that it
// holds the latest acknowledged write or a later one.
func (s *sim) checkFiles(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl := s.c.Dial(rctx, s.c.ClientConfig("", "checker"))
	sess, err := cl.NewSession(rctx)
	if err != nil {
		s.violate("no session for the final check: %v", err)
		return
	}
	for f := range s.cfg.Clients {
		h, err := sess.Open(rctx, filePath(f), client.OpenOptions{})
		if err != nil {
			s.violate("final check: open %s: %v", filePath(f), err)
			continue
		}
		data, _, err := h.GetContents(rctx)
		if err != nil {
			s.violate("final check: read %s: %v", filePath(f), err)
			continue
		}
		n, _ := strconv.Atoi(string(data))
		s.mu.Lock()
		low, high := s.mu.acked[f], s.mu.issued[f]
		s.mu.Unlock()
		if n < low || n > high {
			s.violate("final check: %s holds %q; acknowledged up to %d, issued up to %d", filePath(f), data, low, high)
		}
	}
}
