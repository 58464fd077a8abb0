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
type resource struct {
	kv   *fencedkv.Server // nil when the sequencer check is off
	open *openKV          // the unfenced store of a weakened run
	srv  *http.Server
	ln   net.Listener
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
	r := &resource{}
	var h http.Handler
	if fenced {
		v, err := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub, Cell: cellName})
		if err != nil {
			return nil, err
		}
		r.kv = fencedkv.New(v, lockOfKey(prefix))
		h = r.kv.Handler()
	} else {
		r.open = &openKV{data: map[string][]byte{}}
		h = r.open.handler()
	}
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

func (r *resource) records() []fencedkv.Record {
	if r.kv != nil {
		return r.kv.Records()
	}
	return r.open.records()
}

func (r *resource) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// openKV is fencedkv with its sequencer check switched off: it records the
// sequencer a write carries and accepts every write. Only weakened runs use
// it, to prove that the checkers see what fencing prevents.
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

func (o *openKV) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /kv/{key}", func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		v, ok := o.data[r.PathValue("key")]
		o.mu.Unlock()
		if !ok {
			http.Error(w, "no such key", http.StatusNotFound)
			return
		}
		_, _ = w.Write(v)
	})
	mux.HandleFunc("PUT /kv/{key}", func(w http.ResponseWriter, r *http.Request) {
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
