package cell

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/paxos"
)

// logWriter writes a replica's Paxos log off the run loop (the core runs
// with paxos.Config.AsyncWrites). The loop hands it each Ready's write
// (enqueue) and goes on stepping peers' answers, placing proposals and
// ticking while the write's fsync runs; the writer reports each batch it
// carried out on done, and the loop then tells the core (Node.Persisted),
// which only now counts its own votes and releases the answers that
// depended on them.
//
// Writes are carried out strictly in the order they were handed over. The
// writes that queue while a batch is being written go out together in the
// next one: one Pebble batch and one fsync for all of them (group commit),
// so the number of fsyncs per second stays bounded by the disk, not by the
// rate of Readies.
//
// After each synced batch the writer records the guard (store.recordGuard):
// every write handed to the log so far is then durable, as the guard
// requires, because the writer is the only goroutine that writes the log
// while it runs. The loop writes the log itself only to save a snapshot,
// and only after barrier has seen every write it handed over carried out.
//
// What was tried: writing on the loop and fsyncing on a second goroutine
// (Pebble's ApplyNoSyncWait then SyncWait) keeps the write order for free,
// but still puts the batch encoding and the commit pipeline on the loop,
// and needs the loop to track which commit each SyncWait belongs to. A
// queue owned by one writer is simpler and moves all of it off the loop.
type logWriter struct {
	logdb *paxos.PebbleStorage
	store *store
	// syncDelay delays every synced batch (Config.SyncDelay, a test knob).
	syncDelay time.Duration
	// observeFsync records a synced batch's latency in seconds.
	observeFsync func(float64)

	// wake tells the writer that writes are queued; done tells the loop
	// that a batch was carried out (or failed). Both hold at most one
	// signal: a signal stands for "look again".
	wake, done chan struct{}
	// durable is the ID of the latest write carried out (synced if its
	// Ready asked it).
	durable atomic.Uint64

	mu struct {
		sync.Mutex
		queue []logWrite
		// err is the first write or guard error; the writer stops on it.
		err error
	}
	// batches and writes count the batches written and the writes they
	// held (for tests and the metrics of group commit).
	batches, writes atomic.Uint64

	cancel  context.CancelFunc
	stopped chan struct{}
}

// logWrite is one Ready's write.
type logWrite struct {
	id   uint64
	hs   paxos.HardState
	ents []paxos.Entry
	sync bool
}

// newLogWriter returns a writer for st's log; start runs it.
func newLogWriter(st *store, syncDelay time.Duration, observeFsync func(float64)) *logWriter {
	w := &logWriter{
		logdb:        st.logdb,
		store:        st,
		syncDelay:    syncDelay,
		observeFsync: observeFsync,
		wake:         make(chan struct{}, 1),
		done:         make(chan struct{}, 1),
		stopped:      make(chan struct{}),
	}
	return w
}

// start runs the writer goroutine until stop.
func (w *logWriter) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(ctx)
}

// stop ends the writer once its current batch is written, and waits for
// it. Writes still queued are dropped, as a crash would drop them: nothing
// was counted or answered on their strength.
func (w *logWriter) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.stopped
}

// enqueue hands a write to the writer. It never blocks.
func (w *logWriter) enqueue(lw logWrite) {
	w.mu.Lock()
	w.mu.queue = append(w.mu.queue, lw)
	w.mu.Unlock()
	signal(w.wake)
}

// err returns the writer's first error, or nil.
func (w *logWriter) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.err
}

// barrier waits until every write up to id is carried out, and returns
// the ID of the latest one carried out, or the writer's error.
func (w *logWriter) barrier(ctx context.Context, id uint64) (uint64, error) {
	for {
		if err := w.err(); err != nil {
			return 0, err
		}
		if d := w.durable.Load(); d >= id {
			return d, nil
		}
		select {
		case <-w.done:
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the Paxos log writer: %w", ctx.Err())
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (w *logWriter) run(ctx context.Context) {
	defer close(w.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		for ctx.Err() == nil {
			w.mu.Lock()
			batch := w.mu.queue
			w.mu.queue = nil
			w.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if err := w.write(batch); err != nil {
				w.mu.Lock()
				w.mu.err = err
				w.mu.Unlock()
				signal(w.done)
				return
			}
			w.durable.Store(batch[len(batch)-1].id)
			signal(w.done)
		}
	}
}

// write carries out batch as one Pebble batch: the latest hard state, every
// entry (a later write of a slot replaces an earlier one in the same batch),
// synced if any write asked for it.
func (w *logWriter) write(batch []logWrite) error {
	var hs paxos.HardState
	var ents []paxos.Entry
	sync := false
	for _, lw := range batch {
		if !lw.hs.IsEmpty() {
			hs = lw.hs
		}
		if len(batch) == 1 {
			ents = lw.ents
		} else {
			ents = append(ents, lw.ents...)
		}
		sync = sync || lw.sync
	}
	t0 := time.Now()
	if sync && w.syncDelay > 0 {
		time.Sleep(w.syncDelay)
	}
	if err := w.logdb.Save(hs, ents, sync); err != nil {
		return fmt.Errorf("saving paxos state: %w", err)
	}
	w.batches.Add(1)
	w.writes.Add(uint64(len(batch)))
	if !sync {
		return nil
	}
	if w.observeFsync != nil {
		w.observeFsync(time.Since(t0).Seconds())
	}
	return w.store.recordGuard(false)
}
