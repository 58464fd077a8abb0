package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
	"github.com/lockcell/lockcell/sequencer"
)

// Election is Chubby's primary election (§2.4) on one node: candidates
// Campaign for the node's exclusive lock; the winner writes its value and
// sequencer into the node; everyone reads the leader from there, and
// observers are told of each new leader through the node's events.
//
// A leader is reported only while the cell says the lock is held at the
// generation the leader wrote, so a leader whose session ended is never
// reported however stale the node's contents; leaders are reported in
// increasing generation order, so an observer never goes back to an older
// leader after a reconnect or fail-over. The *Lock that Campaign returns
// tells the leader the moment it may stop being leader.
//
// An Election belongs to one session and is safe for concurrent use.
type Election struct {
	s    *Session
	path string

	mu   sync.Mutex
	h    *Handle
	lock *Lock
}

// Leader is an election's current leader.
type Leader struct {
	// Value is what the leader campaigned with.
	Value []byte
	// Sequencer is the leader's lock sequencer: protected servers that
	// accept requests only from the leader validate it.
	Sequencer sequencer.Sequencer
}

// NewElection returns the election held on the node at path.
func NewElection(s *Session, path string) *Election { return &Election{s: s, path: path} }

// handle opens the election's node (creating it) once, subscribed to the
// events that announce a new leader.
// REQUIRES: e.mu held.
func (e *Election) handleLocked(ctx context.Context) (*Handle, error) {
	if e.h != nil {
		return e.h, nil
	}
	h, err := e.s.Open(ctx, e.path, OpenOptions{Create: true, Events: api.WantContentsModified | api.WantLockAcquired})
	if err != nil {
		return nil, err
	}
	e.h = h
	return h, nil
}

func (e *Election) handle(ctx context.Context) (*Handle, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.handleLocked(ctx)
}

// Campaign waits until this candidate is elected or ctx ends, then
// publishes value as the leader's. It returns the leader's lock.
func (e *Election) Campaign(ctx context.Context, value []byte) (*Lock, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lock != nil && e.lock.ctx.Err() == nil {
		return nil, fmt.Errorf("campaign %s: %w: already the leader", e.path, api.ErrFailedPrecondition)
	}
	h, err := e.handleLocked(ctx)
	if err != nil {
		return nil, err
	}
	l, err := h.Acquire(ctx, api.LockExclusive)
	if errors.Is(err, api.ErrNotFound) {
		e.h = nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := h.SetContents(ctx, encodeLeader(value, l.raw)); err != nil {
		rctx, cancel := context.WithTimeout(e.s.ctx, 5*time.Second)
		_ = l.Release(rctx)
		cancel()
		return nil, fmt.Errorf("campaign %s: publishing the leader: %w", e.path, err)
	}
	e.lock = l
	return l, nil
}

// Resign gives up leadership: it clears the published value and releases
// the lock. It returns an error wrapping ErrNotLeader if this candidate is
// not the leader.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lock == nil {
		return fmt.Errorf("resign %s: %w", e.path, ErrNotLeader)
	}
	l := e.lock
	e.lock = nil
	// Clear the value only if it is still ours (nobody else can lead while
	// we hold the lock, but anyone with write access may write the node).
	if b, stat, err := l.h.GetContents(ctx); err == nil {
		if ld, ok := decodeLeader(stat, b); ok && ld.Sequencer.Generation == l.gen {
			_, _ = l.h.SetContentsIf(ctx, nil, stat.ContentGeneration)
		}
	}
	if err := l.Release(ctx); err != nil {
		if errors.Is(err, ErrNotHeld) {
			return fmt.Errorf("resign %s: %w: %w", e.path, ErrNotLeader, err)
		}
		return err
	}
	return nil
}

// Leader returns the current leader, or an error wrapping ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	h, err := e.handle(ctx)
	if err != nil {
		return Leader{}, err
	}
	b, stat, err := h.GetContents(ctx)
	if err != nil {
		if errors.Is(err, api.ErrNotFound) {
			e.mu.Lock()
			e.h = nil
			e.mu.Unlock()
		}
		return Leader{}, err
	}
	ld, ok := decodeLeader(stat, b)
	if !ok {
		return Leader{}, fmt.Errorf("leader of %s: %w", e.path, ErrNoLeader)
	}
	return ld, nil
}

// Observe reports each new leader once, in the order they were elected,
// until ctx ends or the session does (the channel is then closed). A slow
// reader misses no leader that is still current when it reads, but may
// skip leaders that came and went in between.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	go func() {
		defer close(ch)
		wake, stop := e.s.watchPath(e.path)
		defer stop()
		var last uint64
		retry := time.NewTimer(time.Hour)
		defer retry.Stop()
		for {
			ld, err := e.Leader(ctx)
			if err == nil && ld.Sequencer.Generation > last {
				select {
				case ch <- ld:
					last = ld.Sequencer.Generation
				case <-ctx.Done():
					return
				case <-e.s.Done():
					return
				}
				continue
			}
			if err != nil && !errors.Is(err, ErrNoLeader) {
				retry.Reset(e.s.c.backoff(3))
			}
			select {
			case <-wake:
			case <-retry.C:
			case <-ctx.Done():
				return
			case <-e.s.Done():
				return
			}
		}
	}()
	return ch
}

// The node's contents: magic "LE", version 1, uvarint sequencer length,
// the sequencer's binary form, the value.
const leaderMagic = "LE\x01"

func encodeLeader(value, seq []byte) []byte {
	w := wire.NewWriter(make([]byte, 0, len(leaderMagic)+wire.UvarintLen(uint64(len(seq)))+len(seq)+len(value)))
	w.RawString(leaderMagic)
	w.LenBytes(seq)
	w.Raw(value)
	return w.Bytes()
}

// decodeLeader parses the node's contents and checks them against its
// stat: the lock must be held exclusively at the written generation on the
// same node instance. The sequencer's length is read by internal/wire, so
// a padded (non-canonical) length is refused as every other decoder of
// ours refuses one.
func decodeLeader(stat api.NodeStat, b []byte) (Leader, bool) {
	if len(b) < len(leaderMagic) || string(b[:len(leaderMagic)]) != leaderMagic {
		return Leader{}, false
	}
	r := wire.NewReader(b[len(leaderMagic):])
	raw := r.LenBytes(uint64(len(b)), "leader sequencer")
	value := r.Next(r.Len(), "leader value")
	if r.Err() != nil {
		return Leader{}, false
	}
	seq, err := sequencer.Parse(raw)
	if err != nil {
		return Leader{}, false
	}
	if stat.LockMode != api.LockExclusive || stat.LockGeneration != seq.Generation || stat.Instance != seq.Instance {
		return Leader{}, false
	}
	return Leader{Value: append([]byte(nil), value...), Sequencer: seq}, true
}
