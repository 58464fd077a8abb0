package namespace

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/lockcell/lockcell/api"
)

// Benchmarks run on Pebble's in-memory filesystem, so they measure the
// state machine and Pebble's write path, not a disk.

const benchBatch = 100 // commands per slot

func benchEnv(b *testing.B) *env {
	e := newEnv(b, Config{})
	e.tenant("a", api.TenantQuota{})
	e.create(alice, 0, "/a/d", true, "")
	return e
}

func (e *env) applyRaw(b *testing.B, raw [][]byte) {
	e.slot++
	rs, err := e.s.ApplySlot(e.slot, raw)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

func reportCmds(b *testing.B, n int) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "cmds/s")
}

func BenchmarkApplyCreate(b *testing.B) {
	e := benchEnv(b)
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw := make([][]byte, benchBatch)
		for j := range raw {
			raw[j] = encode(b, Command{Time: e.now, Caller: alice, Op: &OpenNode{Path: fmt.Sprintf("/a/d/f%08d", n), Create: true, Contents: []byte("contents")}})
			n++
		}
		e.applyRaw(b, raw)
	}
	reportCmds(b, n)
}

func BenchmarkApplySetContents(b *testing.B) {
	e := benchEnv(b)
	for i := 0; i < benchBatch; i++ {
		e.create(alice, 0, fmt.Sprintf("/a/d/f%03d", i), false, "")
	}
	body := bytes.Repeat([]byte("x"), 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw := make([][]byte, benchBatch)
		for j := range raw {
			raw[j] = encode(b, Command{Time: e.now, Caller: alice, Op: &SetContents{Path: fmt.Sprintf("/a/d/f%03d", j), Contents: body}})
		}
		e.applyRaw(b, raw)
	}
	reportCmds(b, b.N*benchBatch)
}

// BenchmarkApplyAcquireRelease: each iteration is one slot of 100 acquires
// and one slot of the 100 matching releases.
func BenchmarkApplyAcquireRelease(b *testing.B) {
	e := benchEnv(b)
	sid := e.session(alice)
	for i := 0; i < benchBatch; i++ {
		e.create(alice, 0, fmt.Sprintf("/a/d/l%03d", i), false, "")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		acq := make([][]byte, benchBatch)
		for j := range acq {
			acq[j] = encode(b, Command{Time: e.now, Caller: alice, Op: &Acquire{Session: sid, Path: fmt.Sprintf("/a/d/l%03d", j), Mode: api.LockExclusive}})
		}
		e.slot++
		rs, err := e.s.ApplySlot(e.slot, acq)
		if err != nil {
			b.Fatal(err)
		}
		rel := make([][]byte, benchBatch)
		for j, r := range rs {
			g := r.Reply.(*Granted)
			rel[j] = encode(b, Command{Time: e.now, Caller: alice, Op: &Release{Session: sid, Path: g.Path, Generation: g.Generation}})
		}
		e.applyRaw(b, rel)
	}
	reportCmds(b, 2*b.N*benchBatch)
}

// fill creates n files under /a/d in slots of 1000.
func fill(b *testing.B, e *env, n int) {
	for i := 0; i < n; {
		var raw [][]byte
		for j := 0; j < 1000 && i < n; j++ {
			raw = append(raw, encode(b, Command{Time: e.now, Caller: alice, Op: &OpenNode{Path: fmt.Sprintf("/a/d/f%08d", i), Create: true, Contents: []byte("some contents")}}))
			i++
		}
		e.applyRaw(b, raw)
	}
}

// BenchmarkReadDir10k lists a directory of 10,000 children, 1,000 per page.
func BenchmarkReadDir10k(b *testing.B) {
	e := benchEnv(b)
	fill(b, e, 10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		after, n := "", 0
		for {
			page, err := e.s.ReadDir(alice, "/a/d", after, 1000)
			if err != nil {
				b.Fatal(err)
			}
			n += len(page.Entries)
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if n != 10000 {
			b.Fatalf("listed %d", n)
		}
	}
}

func BenchmarkSnapshotExport100k(b *testing.B) {
	e := benchEnv(b)
	fill(b, e, 100000)
	var buf bytes.Buffer
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		if _, err := e.s.Snapshot(&buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(buf.Len()))
}

func BenchmarkSnapshotInstall100k(b *testing.B) {
	e := benchEnv(b)
	fill(b, e, 100000)
	var buf bytes.Buffer
	if _, err := e.s.Snapshot(&buf); err != nil {
		b.Fatal(err)
	}
	dst := newEnv(b, Config{})
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := dst.s.InstallSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if dst.s.Checksum() != e.s.Checksum() {
		b.Fatal("installed state differs")
	}
}
