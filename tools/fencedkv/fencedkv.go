// Package fencedkv is an example protected resource: an in-memory
// key-value store that accepts a write only with a current sequencer for
// the key's lock (Chubby §2.4), and records every write it accepted or
// rejected so that tests and the fault-injection suite can check that no
// stale write got in.
//
// Writes arrive through the Go API (Put) or over HTTP (Handler): PUT
// /kv/{key} with the sequencer in the Lockcell-Sequencer header, GET
// /kv/{key} without one. Each key is guarded by one lock, named when the
// store is made (LockFor).
package fencedkv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/lockcell/lockcell/sequencer"
)

// ErrWrongLock: the sequencer is for another lock than the key's.
var ErrWrongLock = errors.New("fencedkv: the sequencer is not for this key's lock")

// MaxValue is the largest value the store accepts.
const MaxValue = 1 << 20

// Record is one write attempt, in the order the store decided them.
type Record struct {
	// Seq numbers the attempts from 1.
	Seq uint64
	Key string
	// Value is what the write carried.
	Value []byte
	// Sequencer is the write's sequencer (zero if it had none or an
	// unparseable one).
	Sequencer sequencer.Sequencer
	// Accepted reports whether the write was applied.
	Accepted bool
	// Reason is why it was rejected ("" if accepted).
	Reason string
}

// Server is the store. It is safe for concurrent use.
type Server struct {
	v       *sequencer.Validator
	lockFor func(key string) string

	mu      sync.Mutex
	data    map[string][]byte
	records []Record
}

// New returns a store whose writes v validates; lockFor names the lock
// path that guards key (nil: every key is guarded by the same lock, "/"
// which matches any path—use it only with one lock).
func New(v *sequencer.Validator, lockFor func(key string) string) *Server {
	return &Server{v: v, lockFor: lockFor, data: map[string][]byte{}}
}

// Put writes value under key if seq is a current grant of the key's lock.
// The check and the write are atomic: no write with a newer grant is
// validated in between.
func (s *Server) Put(ctx context.Context, key string, value []byte, seq sequencer.Sequencer) error {
	if s.lockFor != nil && seq.Path != s.lockFor(key) {
		err := fmt.Errorf("%w: %s is guarded by %s, not %s", ErrWrongLock, key, s.lockFor(key), seq.Path)
		s.record(key, value, seq, err)
		return err
	}
	err := s.v.Do(ctx, seq, func() error {
		s.mu.Lock()
		s.data[key] = append([]byte(nil), value...)
		s.appendLocked(key, value, seq, nil)
		s.mu.Unlock()
		return nil
	})
	if err != nil {
		s.record(key, value, seq, err)
	}
	return err
}

func (s *Server) record(key string, value []byte, seq sequencer.Sequencer, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendLocked(key, value, seq, err)
}

// REQUIRES: s.mu held.
func (s *Server) appendLocked(key string, value []byte, seq sequencer.Sequencer, err error) {
	r := Record{Seq: uint64(len(s.records) + 1), Key: key, Value: append([]byte(nil), value...), Sequencer: seq, Accepted: err == nil}
	if err != nil {
		r.Reason = err.Error()
	}
	s.records = append(s.records, r)
}

// Get returns the value under key.
func (s *Server) Get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return append([]byte(nil), v...), ok
}

// Records returns every write attempt so far, in decision order.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// CheckFencing verifies the records: for each lock, the generations of
// accepted writes never decrease, and no write was accepted with a
// generation below one accepted before it. It returns the first violation.
func CheckFencing(records []Record) error {
	highest := map[string]uint64{}
	for _, r := range records {
		if !r.Accepted {
			continue
		}
		k := r.Sequencer.Cell + "\x00" + r.Sequencer.Path
		if r.Sequencer.Generation < highest[k] {
			return fmt.Errorf("fencedkv: write #%d to %q accepted with generation %d after generation %d", r.Seq, r.Key, r.Sequencer.Generation, highest[k])
		}
		highest[k] = r.Sequencer.Generation
	}
	return nil
}

// Handler serves the store over HTTP: GET /kv/{key} returns the value (404
// if none); PUT /kv/{key} writes the body if the Lockcell-Sequencer header
// carries a current sequencer for the key's lock (otherwise the status and
// reason of sequencer.Middleware, and the rejection is recorded).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /kv/{key}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := s.Get(r.PathValue("key"))
		if !ok {
			http.Error(w, "no such key", http.StatusNotFound)
			return
		}
		_, _ = w.Write(v)
	})
	mux.HandleFunc("PUT /kv/{key}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxValue+1))
		if err != nil || len(body) > MaxValue {
			http.Error(w, fmt.Sprintf("value unreadable or over %d bytes", MaxValue), http.StatusRequestEntityTooLarge)
			return
		}
		text := r.Header.Get(sequencer.DefaultHeader)
		seq, err := sequencer.ParseString(text)
		if text == "" {
			err = fmt.Errorf("%w: the request has no %s header", sequencer.ErrMissing, sequencer.DefaultHeader)
		}
		if err == nil {
			err = s.Put(r.Context(), key, body, seq)
		} else {
			s.record(key, body, sequencer.Sequencer{}, err)
		}
		if err != nil {
			status, reason := sequencer.HTTPStatus(err)
			if errors.Is(err, ErrWrongLock) {
				status, reason = http.StatusForbidden, "wrong-lock"
			}
			w.Header().Set(sequencer.RejectHeader, reason)
			http.Error(w, "write rejected ("+reason+"): "+err.Error(), status)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
