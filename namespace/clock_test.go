package namespace

import (
	"bytes"
	"encoding/binary"
	"hash/crc64"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
)

func mustClock(t *testing.T, s *Store) (now, delayEnd int64) {
	t.Helper()
	now, delayEnd, err := s.Clock()
	if err != nil {
		t.Fatal(err)
	}
	return now, delayEnd
}

// TestClockNeverGoesBack: a command stamped below the clock (a new master
// whose wall clock is behind) is applied at the clock, so stamps in the
// state never go backwards and a lock-delay is not lengthened by a stamp
// from the past; a failing command moves nothing.
func TestClockNeverGoesBack(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	t0 := e.now
	if now, _ := mustClock(t, e.s); now != t0 {
		t.Fatalf("clock %d after commands at %d", now, t0)
	}
	e.ok(alice, acquire(s1, api.LockExclusive))
	e.now += int64(5 * time.Second)
	r := e.applyAs(admin, &ExpireSession{Session: s1})
	wantUntil := e.now + int64(DefaultLockDelay)
	if r.Err != nil || len(r.Freed) != 1 || r.Freed[0].DelayUntil != wantUntil {
		t.Fatalf("expire: %+v", r)
	}
	if now, end := mustClock(t, e.s); now != e.now || end != wantUntil {
		t.Fatalf("clock %d, lock-delay end %d; want %d, %d", now, end, e.now, wantUntil)
	}
	high := e.now

	// Stamped an hour in the past: applied at the clock. The node it
	// creates carries the clock's time, not the stamp.
	e.now = high - int64(time.Hour)
	st := e.ok(alice, &OpenNode{Path: "/a/past", Create: true}).(*Opened).Stat
	if st.Created != high || st.Modified != high {
		t.Fatalf("node created by a command stamped an hour back: created %d, modified %d; want %d", st.Created, st.Modified, high)
	}
	// A failing command stamped later moves nothing.
	e.now = high + int64(5*time.Second)
	e.fails(bob, acquire(s2, api.LockExclusive), api.LockDelay)
	if now, _ := mustClock(t, e.s); now != high {
		t.Fatalf("a failing command moved the clock to %d (from %d)", now, high)
	}
	// Lock-delay compares against the clock: still in force for a stamp
	// from the past, over at its end.
	e.now = wantUntil - 1
	e.fails(bob, acquire(s2, api.LockExclusive), api.LockDelay)
	e.now = wantUntil - int64(time.Minute)
	e.fails(bob, acquire(s2, api.LockExclusive), api.LockDelay)
	e.now = wantUntil
	e.ok(bob, acquire(s2, api.LockExclusive))
	if now, _ := mustClock(t, e.s); now != wantUntil {
		t.Fatalf("clock %d, want %d", now, wantUntil)
	}
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
}

// legacyCounters rewrites e's counters record in the form store format 2
// wrote (no clock, no lock-delay end) and marks the store format 2, keeping
// the checksum right; it returns the slot and checksum it left.
func legacyCounters(t *testing.T, e *env) (slot, sum uint64) {
	t.Helper()
	v := e.s.view(e.db)
	c, err := v.counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Clock == 0 {
		t.Fatal("the store has no clock to drop")
	}
	newVal := encodeRec(&c)
	c.Clock, c.DelayEnd = 0, 0
	oldVal := encodeRec(&c)
	if len(oldVal) >= len(newVal) {
		t.Fatalf("the clock-less record (%d bytes) is not shorter than the full one (%d)", len(oldVal), len(newVal))
	}
	slot = e.s.AppliedSlot()
	sum = e.s.Checksum() - kvHash(keyCounters, newVal) + kvHash(keyCounters, oldVal)
	meta := metaValue(slot, sum)
	meta[0] = storeFormatMigrated
	if err := e.db.Set(keyCounters, oldVal, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Set(keyMeta, meta, nil); err != nil {
		t.Fatal(err)
	}
	return slot, sum
}

// TestFormat2StoreMigrates: a store written by format 2 (counters without a
// clock) opens, reads as clock 0, applies on, and is format 3 from its next
// slot; a format 2 snapshot stream installs likewise.
func TestFormat2StoreMigrates(t *testing.T) {
	e, s1, _ := lockEnv(t)
	e.ok(alice, acquire(s1, api.LockExclusive))
	slot, sum := legacyCounters(t, e)

	s, err := Open(e.db, Config{})
	if err != nil {
		t.Fatalf("opening a format 2 store: %v", err)
	}
	if s.AppliedSlot() != slot || s.Checksum() != sum {
		t.Fatalf("format 2 store opened at slot %d, checksum %016x; want %d, %016x", s.AppliedSlot(), s.Checksum(), slot, sum)
	}
	if now, end := mustClock(t, s); now != 0 || end != 0 {
		t.Fatalf("format 2 counters read as clock %d, lock-delay end %d; want 0, 0", now, end)
	}
	if err := s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}

	// A format 2 snapshot stream of it installs into a fresh store.
	var buf bytes.Buffer
	if _, err := s.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	stream := buf.Bytes()
	if string(stream[:len(snapshotMagic)]) != snapshotMagic {
		t.Fatalf("snapshot magic %q", stream[:len(snapshotMagic)])
	}
	copy(stream, snapshotMagicMigrated)
	body := stream[:len(stream)-8]
	binary.BigEndian.PutUint64(stream[len(stream)-8:], crc64.Checksum(body, crcTable))
	f := newEnv(t, Config{})
	if err := f.s.InstallSnapshot(bytes.NewReader(stream)); err != nil {
		t.Fatalf("installing a format 2 snapshot stream: %v", err)
	}
	if f.s.Checksum() != sum {
		t.Fatalf("installed checksum %016x, want %016x", f.s.Checksum(), sum)
	}

	// Both apply on and agree; the next slot makes them format 3.
	e.s, f.slot = s, slot
	f.now = e.now + int64(time.Second)
	e.now = f.now
	e.ok(admin, &ExpireSession{Session: s1})
	f.ok(admin, &ExpireSession{Session: s1})
	for _, x := range []*env{e, f} {
		if now, end := mustClock(t, x.s); now != x.now || end != x.now+int64(DefaultLockDelay) {
			t.Fatalf("after migration: clock %d, lock-delay end %d; want %d, %d", now, end, x.now, x.now+int64(DefaultLockDelay))
		}
		meta, closer, err := x.db.Get(keyMeta)
		if err != nil {
			t.Fatal(err)
		}
		if meta[0] != storeFormat {
			t.Fatalf("store format %d after an applied slot, want %d", meta[0], storeFormat)
		}
		_ = closer.Close()
		if err := x.s.VerifyChecksum(); err != nil {
			t.Fatal(err)
		}
	}
	if e.s.Checksum() != f.s.Checksum() {
		t.Fatalf("migrated store %016x and installed one %016x differ", e.s.Checksum(), f.s.Checksum())
	}
}

// TestCountersRecordCanonical: the clock-less form is the only encoding of
// a zero clock, so equal states have equal bytes.
func TestCountersRecordCanonical(t *testing.T) {
	for _, c := range []counters{{}, {Session: 3, Instance: 9, LockGen: 2}, {Clock: 5}, {DelayEnd: 7}, {Session: 1, Clock: 1 << 62, DelayEnd: 1<<62 + 10}} {
		b := encodeRec(&c)
		var got counters
		if err := decodeRec(keyCounters, b, &got); err != nil || got != c {
			t.Fatalf("%+v: round trip %+v, %v", c, got, err)
		}
	}
	b := encodeRec(&counters{Session: 1})
	b = append(b, 0, 0) // an explicit zero clock and lock-delay end
	var got counters
	if err := decodeRec(keyCounters, b, &got); err == nil {
		t.Fatalf("a counters record with an explicit zero clock decoded as %+v", got)
	}
}
