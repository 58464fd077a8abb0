package nemesis

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lockcell/lockcell/sequencer"
	"github.com/lockcell/lockcell/tools/fencedkv"
)

// resource is the protected resource of a run, served over HTTP on
// loopback from the nemesis process. It runs in this process rather than
// its own because it is the observer, not a subject: the checkers read its
// records directly, and no fault is aimed at it.
//
// Beside the fenced store (/kv/) it serves an unfenced register (/open/):
// the holders make the same read-modify-write on both, so that the report
// shows what fencing prevented — the stale writes the unfenced register
// took, and the increments they lost.
type resource struct {
	kv       *fencedkv.Server // nil when the sequencer check is off
	unfenced *openKV          // the fenced store of a weakened run: no check
	open     *openKV          // the unfenced register
	srv      *http.Server
	ln       net.Listener
}

// lockOfKey maps a resource key ("claim-3", "counter-3") to its lock path.
func lockOfKey(prefix string) func(string) string {
	return func(key string) string {
		_, n, _ := strings.Cut(key, "-")
		return prefix + "/lock-" + n
	}
}

// startResource serves the protected resource; with fenced false its
// sequencer check is switched off (a weakened run).
func startResource(pub ed25519.PublicKey, cellName, prefix string, fenced bool) (*resource, error) {
	r := &resource{open: &openKV{data: map[string][]byte{}}}
	h := http.NewServeMux()
	if fenced {
		v, err := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub, Cell: cellName})
		if err != nil {
			return nil, err
		}
		r.kv = fencedkv.New(v, lockOfKey(prefix))
		h.Handle("/kv/", r.kv.Handler())
	} else {
		r.unfenced = &openKV{data: map[string][]byte{}}
		h.Handle("/kv/", r.unfenced.handler("/kv/"))
	}
	h.Handle("/open/", r.open.handler("/open/"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.ln = ln
	r.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *resource) url() string { return "http://" + r.ln.Addr().String() }

// records returns the fenced store's records.
func (r *resource) records() []fencedkv.Record {
	if r.kv != nil {
		return r.kv.Records()
	}
	return r.unfenced.records()
}

// openRecords returns the unfenced register's records.
func (r *resource) openRecords() []fencedkv.Record { return r.open.records() }

func (r *resource) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// openKV is fencedkv with its sequencer check switched off: it records the
// sequencer a write carries and accepts every write. It is the unfenced
// register of every run, and the fenced store of a weakened run (to prove
// that the checkers see what fencing prevents).
type openKV struct {
	mu   sync.Mutex
	data map[string][]byte
	recs []fencedkv.Record
}

func (o *openKV) records() []fencedkv.Record {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]fencedkv.Record(nil), o.recs...)
}

// handler serves GET and PUT of prefix+key.
func (o *openKV) handler(prefix string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+prefix+"{key}", func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		v, ok := o.data[r.PathValue("key")]
		o.mu.Unlock()
		if !ok {
			http.Error(w, "no such key", http.StatusNotFound)
			return
		}
		_, _ = w.Write(v)
	})
	mux.HandleFunc("PUT "+prefix+"{key}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, fencedkv.MaxValue+1))
		if err != nil || len(body) > fencedkv.MaxValue {
			http.Error(w, "value unreadable or too large", http.StatusRequestEntityTooLarge)
			return
		}
		seq, err := sequencer.ParseString(r.Header.Get(sequencer.DefaultHeader))
		if err != nil && !errors.Is(err, sequencer.ErrMalformed) {
			seq = sequencer.Sequencer{}
		}
		key := r.PathValue("key")
		o.mu.Lock()
		o.data[key] = body
		o.recs = append(o.recs, fencedkv.Record{Seq: uint64(len(o.recs) + 1), Key: key, Value: body, Sequencer: seq, Accepted: true})
		o.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
