package paxos

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzStep decodes arbitrary bytes as a msgpack Message and steps it into a
// node that has an established leader. Step must never panic; when it
// returns an error the node must be unchanged.
func FuzzStep(f *testing.F) {
	for _, m := range sampleMessages() {
		for _, to := range []ID{1, 2} {
			m.To = to
			b, err := msgpack.Marshal(&m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, uint8(to))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		// msgpack v5.4.1 preallocates a slice of structs from the length an
		// input declares (its alloc limit is never applied: decode_slice.go
		// tests flags != 1), so 40 bytes can demand gigabytes. Walking the
		// input with Skip first bounds every declared length by the input's
		// size; the cell must decode peer frames the same way.
		if msgpack.NewDecoder(bytes.NewReader(data)).Skip() != nil {
			return
		}
		var m Message
		if err := msgpack.Unmarshal(data, &m); err != nil {
			return
		}
		tn := newTestNet(t, 3, nil)
		tn.elect(200)
		l := tn.leader()
		tn.propose(l, "x")
		tn.deliver()
		r := tn.reps[int(which)%3]
		before := nodeDigest(r.node)
		err := r.node.Step(m)
		if err != nil {
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("Step returned %v, want ErrInvalidMessage or nil", err)
			}
			if after := nodeDigest(r.node); after != before {
				t.Fatalf("failed Step changed the node:\n%s\n%s", before, after)
			}
		}
		// Whatever happened, the node must still produce a consistent Ready.
		r.handleReady(t)
		r.node.Tick()
		r.handleReady(t)
	})
}

var writeCorpus = flag.Bool("paxos.writecorpus", false, "rewrite the committed FuzzStep seed corpus under testdata/fuzz/FuzzStep")

// TestFuzzStepCorpus keeps the committed seed corpus in step with
// sampleMessages: with -paxos.writecorpus it rewrites it; otherwise it
// checks that it exists.
func TestFuzzStepCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzStep")
	if !*writeCorpus {
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) == 0 {
			t.Fatalf("no committed FuzzStep corpus in %s (run with -paxos.writecorpus): %v", dir, err)
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, m := range sampleMessages() {
		m.To = 1
		if m.From == 1 {
			m.From = 3
		}
		b, err := msgpack.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint8(0)\n", b)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d-%s", i, m.Type)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
