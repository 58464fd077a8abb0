package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/sequencer"
)

// Worker roles.
const (
	RoleFenced   = "fenced"
	RoleZombie   = "zombie"
	RoleRegister = "register"
	RoleAckSet   = "ackset"
)

// WorkerConfig is what a worker process is told (as JSON, in a file named on
// its command line).
type WorkerConfig struct {
	// ID numbers the worker from 0.
	ID int `json:"id"`
	// Role is one of the Role* constants.
	Role string `json:"role"`
	// ClientFile is the client settings file (client.ConfigFile) with the
	// tenant's certificate.
	ClientFile string `json:"client_file"`
	// ResourceURL is the protected resource's base URL ("http://host:port").
	ResourceURL string `json:"resource_url"`
	// Prefix is the tenant directory the workloads use ("/nem").
	Prefix string `json:"prefix"`
	// Seed seeds the worker's choices.
	Seed uint64 `json:"seed"`
	// RegisterKeys and Locks are how many register files and fenced locks
	// there are.
	RegisterKeys int `json:"register_keys"`
	Locks        int `json:"locks"`
	// MarkerFile, for a zombie, is a 4-byte file the nemesis sets to
	// non-zero while it has the zombie stopped.
	MarkerFile string `json:"marker_file,omitempty"`
	// GracePeriod is the client's grace period.
	GracePeriod time.Duration `json:"grace_period"`
}

// ErrBadWorkerConfig reports a WorkerConfig that cannot work.
var ErrBadWorkerConfig = errors.New("nemesis: bad worker config")

func (c WorkerConfig) validate() error {
	switch {
	case c.Role != RoleFenced && c.Role != RoleZombie && c.Role != RoleRegister && c.Role != RoleAckSet:
		return fmt.Errorf("%w: unknown role %q", ErrBadWorkerConfig, c.Role)
	case c.ClientFile == "" || c.Prefix == "":
		return fmt.Errorf("%w: client_file and prefix are required", ErrBadWorkerConfig)
	case (c.Role == RoleFenced || c.Role == RoleZombie) && (c.ResourceURL == "" || c.Locks < 1):
		return fmt.Errorf("%w: fenced roles need resource_url and locks", ErrBadWorkerConfig)
	case c.Role == RoleRegister && c.RegisterKeys < 1:
		return fmt.Errorf("%w: register needs register_keys", ErrBadWorkerConfig)
	}
	return nil
}

// Worker-side timeouts.
const (
	opTimeout   = 4 * time.Second
	dialTimeout = 10 * time.Second
)

// worker runs one workload and writes its history.
type worker struct {
	cfg   WorkerConfig
	rng   *rand.Rand
	log   *slog.Logger
	ccfg  client.Config
	httpc *http.Client

	outMu sync.Mutex
	enc   *json.Encoder
	next  uint64

	c *client.Client
	s *client.Session
	// handles caches open handles by path, for the current session.
	handles map[string]*client.Handle
	// regWindow is the path prefix of the current register window.
	regWindow string
	// marker is the zombie's stop marker (nil: none, find the stop by a
	// gap in the clock).
	marker *atomic.Uint32
}

// RunWorker runs the worker described by cfg until ctx ends or in reaches
// EOF, writing its history to out as JSON lines. A line "resume" on in ends
// a pause the worker asked for.
func RunWorker(ctx context.Context, cfg WorkerConfig, in io.Reader, out io.Writer, log *slog.Logger) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ccfg, err := client.LoadConfigFile(cfg.ClientFile)
	if err != nil {
		return err
	}
	if cfg.Role == RoleZombie {
		// NB: one P, as for a holder on one CPU: after SIGCONT the
		// zombie's spinning goroutine keeps the processor, so no other
		// goroutine of the client (the KeepAlive loop's timer) can run
		// before its first look at the lock. The client must then be
		// exact on its own, at that look.
		runtime.GOMAXPROCS(1)
	}
	ccfg.GracePeriod = cfg.GracePeriod
	ccfg.ReconnectMax = 300 * time.Millisecond
	ccfg.Logger = log
	w := &worker{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))), log: log, ccfg: ccfg,
		httpc: &http.Client{Timeout: opTimeout},
		enc:   json.NewEncoder(out),
	}
	if cfg.MarkerFile != "" {
		if w.marker, err = mapMarker(cfg.MarkerFile); err != nil {
			log.Warn("zombie without a stop marker", "err", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel() // EOF: the nemesis wants us to stop
	}()
	defer w.closeClient()
	for ctx.Err() == nil {
		if err := w.ensureSession(ctx); err != nil {
			w.note("no session: " + err.Error())
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		switch cfg.Role {
		case RoleFenced, RoleZombie:
			w.fencedOp(ctx)
		case RoleRegister:
			w.registerOp(ctx)
		case RoleAckSet:
			w.createOp(ctx)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *worker) emit(e Entry) {
	e.Time = time.Now().UnixNano()
	e.Source = "w" + strconv.Itoa(w.cfg.ID)
	e.Worker = w.cfg.ID
	w.outMu.Lock()
	defer w.outMu.Unlock()
	_ = w.enc.Encode(e)
}

func (w *worker) note(text string) { w.emit(Entry{Type: TypeNote, Text: text}) }

// invoke records the start of an operation and returns its id.
func (w *worker) invoke(op, key, value string, gen uint64) uint64 {
	w.next++
	w.emit(Entry{Type: TypeInvoke, ID: w.next, Op: op, Key: key, Value: value, Gen: gen})
	return w.next
}

func (w *worker) complete(id uint64, typ, op, key, value string, gen uint64, err error) {
	e := Entry{Type: typ, ID: id, Op: op, Key: key, Value: value, Gen: gen}
	if err != nil {
		e.Err = err.Error()
	}
	w.emit(e)
}

func (w *worker) closeClient() {
	if w.s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.s.Close(ctx)
		cancel()
	}
	if w.c != nil {
		_ = w.c.Close()
	}
	w.c, w.s, w.handles = nil, nil, nil
}

// ensureSession makes sure the worker has a live session, opening a new
// client and session after the last one expired.
func (w *worker) ensureSession(ctx context.Context) error {
	if w.s != nil && w.s.Err() == nil {
		return nil
	}
	w.closeClient()
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := client.Dial(dctx, w.ccfg)
	if err != nil {
		return err
	}
	s, err := c.NewSession(dctx)
	if err != nil {
		_ = c.Close()
		return err
	}
	w.c, w.s, w.handles = c, s, map[string]*client.Handle{}
	w.note(fmt.Sprintf("session %d", s.ID()))
	return nil
}

func (w *worker) handle(ctx context.Context, path string, opts client.OpenOptions) (*client.Handle, error) {
	if h := w.handles[path]; h != nil {
		return h, nil
	}
	h, err := w.s.Open(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	w.handles[path] = h
	return h, nil
}

// RegisterWindow is how long the register workload uses one set of files
// before moving on to fresh ones. Keys are independent, so porcupine checks
// each file's history on its own; short histories per file keep that check
// cheap even with many operations of unknown outcome (each of which stays
// concurrent with everything after it).
const RegisterWindow = 10 * time.Second

// registerKey names register file i of the window holding t.
func registerKey(prefix string, t time.Time, i int) string {
	return fmt.Sprintf("%s/reg-%d-%d", prefix, t.UnixNano()/int64(RegisterWindow), i)
}

// registerOp runs one get, set or cas on a random register file of the
// current window (created empty, at content generation 1, by whoever opens
// it first).
func (w *worker) registerOp(ctx context.Context) {
	key := registerKey(w.cfg.Prefix, time.Now(), w.rng.IntN(w.cfg.RegisterKeys))
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if w.regWindow != "" && !strings.HasPrefix(key, w.regWindow) {
		for p, h := range w.handles {
			if strings.HasPrefix(p, w.regWindow) {
				_ = h.Close(octx)
				delete(w.handles, p)
			}
		}
	}
	w.regWindow = key[:strings.LastIndexByte(key, '-')+1]
	h, err := w.handle(octx, key, client.OpenOptions{Create: true})
	if err != nil {
		sleepCtx(ctx, 50*time.Millisecond)
		return
	}
	switch r := w.rng.IntN(10); {
	case r < 4:
		id := w.invoke("get", key, "", 0)
		b, st, err := h.GetContents(octx)
		if err != nil {
			// A failed read has no effect.
			w.complete(id, TypeFail, "get", key, "", 0, err)
			return
		}
		w.complete(id, TypeOK, "get", key, string(b), st.ContentGeneration, nil)
	case r < 7:
		v := fmt.Sprintf("w%d-%d", w.cfg.ID, w.next+1)
		id := w.invoke("set", key, v, 0)
		st, err := h.SetContents(octx, []byte(v))
		if err != nil {
			w.complete(id, TypeInfo, "set", key, v, 0, err)
			return
		}
		w.complete(id, TypeOK, "set", key, v, st.ContentGeneration, nil)
	default:
		// Compare-and-set against the generation a fresh stat reports, so
		// that most attempts can succeed.
		st, err := h.Stat(octx)
		if err != nil {
			return
		}
		v := fmt.Sprintf("w%d-%d", w.cfg.ID, w.next+1)
		gen := st.ContentGeneration
		id := w.invoke("cas", key, v, gen)
		nst, err := h.SetContentsIf(octx, []byte(v), gen)
		switch {
		case err == nil:
			w.complete(id, TypeOK, "cas", key, v, nst.ContentGeneration, nil)
		case errors.Is(err, api.ErrFailedPrecondition):
			w.complete(id, TypeFail, "cas", key, v, gen, err)
		default:
			w.complete(id, TypeInfo, "cas", key, v, gen, err)
		}
	}
}

// createOp creates one new file under the ack-set directory.
func (w *worker) createOp(ctx context.Context) {
	w.next++
	name := fmt.Sprintf("w%d-%d", w.cfg.ID, w.next)
	path := AckDir(w.cfg.Prefix) + "/" + name
	id := w.next
	w.emit(Entry{Type: TypeInvoke, ID: id, Op: "create", Key: path})
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	h, err := w.s.Open(octx, path, client.OpenOptions{Create: true, MustCreate: true, Contents: []byte(name)})
	switch {
	case err == nil:
		w.complete(id, TypeOK, "create", path, "", 0, nil)
		_ = h.Close(octx)
	case errors.Is(err, api.ErrAlreadyExists):
		// An earlier attempt whose reply was lost created it: it exists now,
		// so it must exist at the end.
		w.complete(id, TypeOK, "create", path, "", 0, err)
	default:
		w.complete(id, TypeInfo, "create", path, "", 0, err)
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

// fencedOp runs one locked read-modify-write of a counter on the protected
// resource, and the same on the unfenced register beside it, and records
// the hold. A zombie, holding the lock between its reads and its writes,
// asks to be stopped (the nemesis stops it for longer than the session
// lease) and spins until it finds it was, so that its first look at the
// lock after SIGCONT is the one the hold records.
func (w *worker) fencedOp(ctx context.Context) {
	lk := w.rng.IntN(w.cfg.Locks)
	path := LockPath(w.cfg.Prefix, lk)
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	h, err := w.handle(octx, path, client.OpenOptions{})
	if err != nil {
		sleepCtx(ctx, 50*time.Millisecond)
		return
	}
	l, err := h.Acquire(octx, api.LockExclusive)
	if err != nil {
		sleepCtx(ctx, 20*time.Millisecond)
		return
	}
	start := MonoNow()
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.Release(rctx)
		cancel()
	}()
	seq := l.Sequencer()
	w.next++
	id := w.next
	tag := fmt.Sprintf("w%d-%d", w.cfg.ID, id)
	// endHold records the hold: its end, then the look at the lock.
	endHold := func() (intact bool) {
		end := MonoNow()
		err := l.Context().Err()
		e := Entry{Type: TypeHold, Session: w.s.ID(), Key: path, Gen: seq.Generation, Start: start, End: end, Intact: err == nil}
		if err != nil {
			e.Err = l.Err().Error()
		}
		w.emit(e)
		return err == nil
	}
	w.emit(Entry{Type: TypeInvoke, ID: id, Op: "fenced", Key: ClaimKey(lk), Value: tag, Gen: seq.Generation})
	// Claim first: the resource sees our grant before we read, so that a
	// zombie holder of an older grant can no longer write (Kleppmann).
	if err := w.put(octx, "/kv/", ClaimKey(lk), tag, seq); err != nil {
		endHold()
		w.complete(id, TypeFail, "fenced", ClaimKey(lk), tag, seq.Generation, err)
		return
	}
	cur, err := w.get(octx, "/kv/", CounterKey(lk))
	if err != nil {
		endHold()
		w.complete(id, TypeFail, "fenced", CounterKey(lk), tag, seq.Generation, err)
		return
	}
	// The unfenced register: what the same holders would do to a store
	// that does not check sequencers.
	open, openErr := w.get(octx, "/open/", CounterKey(lk))
	stale := false
	if w.cfg.Role == RoleZombie {
		if w.marker != nil {
			w.marker.Store(0)
		}
		w.emit(Entry{Type: TypePause, Key: path, Gen: seq.Generation})
		stopped := spinUntilStopped(ctx, ZombieSpin, w.marker)
		intact := endHold()
		stale = stopped && !intact
	} else {
		defer endHold()
	}
	val := FormatCounter(cur+1, tag)
	wctx, wcancel := context.WithTimeout(ctx, opTimeout)
	defer wcancel()
	err = w.put(wctx, "/kv/", CounterKey(lk), val, seq)
	if openErr == nil {
		_ = w.put(wctx, "/open/", CounterKey(lk), FormatCounter(open+1, tag), seq)
	}
	e := Entry{Type: TypeOK, ID: id, Op: "fenced", Key: CounterKey(lk), Value: val, Gen: seq.Generation, Stale: stale}
	if err != nil {
		e.Type, e.Err = TypeFail, err.Error()
	}
	w.emit(e)
}

// ZombieSpin bounds how long a zombie waits, spinning, to be stopped.
const ZombieSpin = 3 * time.Second

// stoppedGap is a gap between two readings of the monotonic clock, in a
// loop that does nothing else, long enough to mean the process was stopped.
const stoppedGap = time.Second

// spinUntilStopped loops until it finds that the process was stopped
// (true) or max passes (false): until the nemesis set the marker, or, with
// no marker, until two readings of the clock are far apart. It spins
// rather than sleeps, and never yields, so that a SIGSTOP lands inside it
// and the first thing the process does after SIGCONT is to notice. With a
// marker the loop is a plain memory load with no call in it, so it cannot
// be preempted (zombies run with asynchronous preemption off) and it looks
// at the lock before any other goroutine runs; it reads the clock only
// every 2^16 rounds.
func spinUntilStopped(ctx context.Context, max time.Duration, marker *atomic.Uint32) bool {
	start := time.Now()
	last := start
	for n := 0; ; n++ {
		if marker != nil && marker.Load() != 0 {
			return true
		}
		if n%(1<<16) != 0 {
			continue
		}
		now := time.Now()
		if marker == nil && now.Sub(last) > stoppedGap {
			return true
		}
		if now.Sub(start) > max || ctx.Err() != nil {
			return false
		}
		last = now
	}
}

func (w *worker) put(ctx context.Context, where, key, value string, seq sequencer.Sequencer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.cfg.ResourceURL+where+key, strings.NewReader(value))
	if err != nil {
		return err
	}
	sequencer.SetHeader(req.Header, seq)
	resp, err := w.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("resource: %s (%s)", resp.Status, resp.Header.Get(sequencer.RejectHeader))
	}
	return nil
}

func (w *worker) get(ctx context.Context, where, key string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.cfg.ResourceURL+where+key, nil)
	if err != nil {
		return 0, err
	}
	resp, err := w.httpc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	switch resp.StatusCode {
	case http.StatusNotFound:
		return 0, nil
	case http.StatusOK:
		n, _, err := ParseCounter(string(b))
		return n, err
	}
	return 0, fmt.Errorf("resource: %s", resp.Status)
}

// LockPath names fenced lock i under prefix; AckDir the ack-set directory;
// ClaimKey and CounterKey the resource keys guarded by lock i.
func LockPath(prefix string, i int) string { return fmt.Sprintf("%s/lock-%d", prefix, i) }

// AckDir is the directory of the ack-set workload.
func AckDir(prefix string) string { return prefix + "/ack" }

// ClaimKey is the resource key a holder of lock i claims before reading.
func ClaimKey(i int) string { return fmt.Sprintf("claim-%d", i) }

// CounterKey is the resource key of lock i's counter.
func CounterKey(i int) string { return fmt.Sprintf("counter-%d", i) }

// FormatCounter encodes a counter value written by tag.
func FormatCounter(n uint64, tag string) string { return strconv.FormatUint(n, 10) + " " + tag }

// ParseCounter decodes FormatCounter.
func ParseCounter(s string) (uint64, string, error) {
	num, tag, _ := strings.Cut(s, " ")
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("nemesis: bad counter value %q", s)
	}
	return n, tag, nil
}
