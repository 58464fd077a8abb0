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

// BenchmarkApplyCreateSession: each iteration is one slot of 64
// CreateSessions (about what a master packs into a slot while thousands
// of sessions are opened); bench/scripts/open-cost.sh counts the
// instructions per creation under callgrind.
func BenchmarkApplyCreateSession(b *testing.B) {
	const perSlot = 64
	e := benchEnv(b)
	raw := make([][]byte, perSlot)
	for j := range raw {
		raw[j] = encode(b, Command{Time: e.now, Caller: alice, Op: &CreateSession{}})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.applyRaw(b, raw)
	}
	reportCmds(b, b.N*perSlot)
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

// BenchmarkApplyHandOver: one op is one hand-over of a contended lock
// between two sessions, as every replica applies it. two-slots is the
// hand-over in two rounds (a slot with the holder's Release, then a slot
// with the waiter's Acquire); one-slot is the Release carrying the
// waiter's grant (Release.Then) in one slot. slots/op is what each replica
// syncs to its Paxos log per hand-over; bench/scripts/cpu-per-command.sh
// counts the instructions per op under callgrind.
func BenchmarkApplyHandOver(b *testing.B) {
	for _, oneSlot := range []bool{false, true} {
		name := "two-slots"
		if oneSlot {
			name = "one-slot"
		}
		b.Run(name, func(b *testing.B) {
			e := benchEnv(b)
			sids := [2]uint64{e.session(alice), e.session(alice)}
			const path = "/a/d/hot"
			e.create(alice, 0, path, false, "")
			first := e.applyOne(b, Command{Time: e.now, Caller: alice, Op: &Acquire{Session: sids[0], Path: path, Mode: api.LockExclusive}})
			gen := first.Reply.(*Granted).Generation
			slots := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				holder, next := sids[i%2], sids[(i+1)%2]
				rel := &Release{Session: holder, Path: path, Generation: gen}
				if oneSlot {
					rel.Then = []Grant{{Caller: alice, Session: next, Path: path, Mode: api.LockExclusive}}
					r := e.applyOne(b, Command{Time: e.now, Caller: alice, Op: rel})
					if len(r.Handed) != 1 || r.Handed[0].Reply == nil {
						b.Fatalf("hand-over %d: %+v", i, r.Handed)
					}
					gen = r.Handed[0].Reply.Generation
					slots++
					continue
				}
				e.applyOne(b, Command{Time: e.now, Caller: alice, Op: rel})
				r := e.applyOne(b, Command{Time: e.now, Caller: alice, Op: &Acquire{Session: next, Path: path, Mode: api.LockExclusive}})
				gen = r.Reply.(*Granted).Generation
				slots += 2
			}
			b.ReportMetric(float64(slots)/float64(b.N), "slots/op")
		})
	}
}

// applyOne applies cmd alone in the next slot and returns its result,
// failing the benchmark if the command fails.
func (e *env) applyOne(b *testing.B, cmd Command) Result {
	e.slot++
	rs, err := e.s.ApplySlot(e.slot, [][]byte{encode(b, cmd)})
	if err != nil {
		b.Fatal(err)
	}
	if rs[0].Err != nil {
		b.Fatal(rs[0].Err)
	}
	return rs[0]
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

// benchCommands are the commands of the hot path: lock traffic, writes and
// creates.
var benchCommands = []Command{
	{Time: 1_700_000_000_000_000_000, Caller: Caller{Principal: "alice", Tenant: "a"}, Op: &Acquire{Session: 12, Path: "/a/d/l001", Mode: api.LockExclusive}},
	{Time: 1_700_000_000_000_000_001, Caller: Caller{Principal: "alice", Tenant: "a"}, Op: &Release{Session: 12, Path: "/a/d/l001", Generation: 7}},
	{Time: 1_700_000_000_000_000_002, Caller: Caller{Principal: "alice", Tenant: "a"}, Op: &SetContents{Path: "/a/d/f001", Contents: bytes.Repeat([]byte("x"), 256)}},
	{Time: 1_700_000_000_000_000_003, Caller: Caller{Principal: "alice", Tenant: "a"}, Op: &OpenNode{Path: "/a/d/f002", Create: true, Contents: []byte("contents")}},
}

// BenchmarkCommandCodec encodes and decodes each of benchCommands once per
// iteration.
func BenchmarkCommandCodec(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range benchCommands {
			enc, err := EncodeCommand(c)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeCommand(enc); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRecordCodec encodes and decodes a held lock's node record and a
// counters record once per iteration.
func BenchmarkRecordCodec(b *testing.B) {
	b.ReportAllocs()
	n := &nodeRec{Instance: 7, ContentGen: 3, LockGen: 300, ACLGen: 1, Sum: 0x0123456789abcdef, Size: 5,
		Created: 1_700_000_000_000_000_000, Modified: 1_700_000_000_500_000_000, ACL: api.ACLNames{Read: "r"},
		LockDelay: 10_000_000_000, Mode: api.LockExclusive, Holders: []uint64{12}}
	c := &counters{Session: 10, Instance: 200, LockGen: 30000, Clock: 1_700_000_000_000_000_000}
	key := []byte("k")
	for b.Loop() {
		var n2 nodeRec
		if err := decodeRec(key, encodeRec(n), &n2); err != nil {
			b.Fatal(err)
		}
		var c2 counters
		if err := decodeRec(key, encodeRec(c), &c2); err != nil {
			b.Fatal(err)
		}
	}
}
