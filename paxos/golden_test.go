package paxos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"reflect"
	"testing"

	"github.com/lockcell/lockcell/internal/golden"
	"github.com/lockcell/lockcell/internal/wire"
)

// updateGolden rewrites testdata/golden_storage.hex from the current
// encoders. Use it only to add a value: a changed line is a changed on-disk
// format.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden_storage.hex")

// TestGoldenStorage pins the exact bytes of every kind of value
// PebbleStorage writes, and checks the pinned bytes decode to the value.
func TestGoldenStorage(t *testing.T) {
	type gcase struct {
		name   string
		enc    []byte
		decode func([]byte) (any, error)
		want   any
	}
	entry := Entry{Slot: 300, Ballot: 1<<20 + 3, Value: Value{Cmds: []Command{
		{ID: ProposalID{Ballot: 1<<20 + 3, Seq: 1}, Data: []byte("first")},
		{ID: ProposalID{Ballot: 1<<20 + 3, Seq: 128}, Data: make([]byte, 130)},
	}}}
	noop := Entry{Slot: 1, Ballot: 2}
	desc := pebbleSnapshotDesc{slot: 1 << 35, size: 3 << 20, chunks: 3, crc: 0xdeadbeef}
	hs := HardState{Promised: 1<<40 + 5, Chosen: 129}
	hsr := HardState{Promised: 6, Chosen: 0, Rebuilding: true}
	chunk := []byte("chunk of snapshot data")
	decHS := func(b []byte) (any, error) { return pebbleDecodeHardState(b) }
	decEntry := func(b []byte) (any, error) { return pebbleDecodeEntry(b) }
	cases := []gcase{
		{"hard-state", pebbleEncodeHardState(nil, hs), decHS, hs},
		{"hard-state-rebuilding", pebbleEncodeHardState(nil, hsr), decHS, hsr},
		{"hard-state-zero", pebbleEncodeHardState(nil, HardState{}), decHS, HardState{}},
		{"entry", pebbleEncodeEntry(nil, &entry), decEntry, entry},
		{"entry-noop", pebbleEncodeEntry(nil, &noop), decEntry, noop},
		{"snapshot-desc", pebbleEncodeSnapshotDesc(nil, desc), func(b []byte) (any, error) { return pebbleDecodeSnapshotDesc(b) }, desc},
		{"snapshot-chunk", pebbleEncodeChunk(nil, chunk), func(b []byte) (any, error) { return pebbleDecodeChunk(b) }, chunk},
	}
	if got := pebbleEntryLen(&entry); got != len(cases[3].enc) {
		t.Errorf("pebbleEntryLen = %d, encoding has %d bytes", got, len(cases[3].enc))
	}
	const path = "testdata/golden_storage.hex"
	if *updateGolden {
		vals := make([]golden.Value, 0, len(cases))
		for _, c := range cases {
			vals = append(vals, golden.Value{Name: c.name, Bytes: c.enc})
		}
		if err := golden.Write(path, "name hex: exact encodings pinned by TestGoldenStorage; a changed line is a format change.", vals); err != nil {
			t.Fatal(err)
		}
	}
	want, err := golden.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(cases) {
		t.Errorf("%s has %d values, the test %d", path, len(want), len(cases))
	}
	checked := 0
	for _, c := range cases {
		w, ok := want[c.name]
		switch {
		case !ok:
			t.Errorf("%s: not in %s", c.name, path)
			continue
		case string(c.enc) != string(w):
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", c.name, c.enc, w)
			continue
		}
		got, err := c.decode(w)
		if err != nil {
			t.Errorf("%s: decoding the golden bytes: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: decoded %+v, want %+v", c.name, got, c.want)
			continue
		}
		checked++
	}
	if checked != len(cases) || checked == 0 {
		t.Errorf("checked %d of %d golden values", checked, len(cases))
	}
	t.Logf("%d golden values checked", checked)
}

// TestPebbleRefusesPaddedVarints: each varint of a hard state, an entry and
// a snapshot descriptor, padded by one byte to a longer encoding of the
// same number and sealed with a correct checksum, is refused as corrupt and
// not canonical. Without the canonical rule each would decode to the same
// value.
func TestPebbleRefusesPaddedVarints(t *testing.T) {
	entry := Entry{Slot: 300, Ballot: 5, Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: 5, Seq: 1}, Data: []byte("x")}}}}
	values := []struct {
		kind    byte
		payload []byte
		varints int // leading varints of the payload
		decode  func([]byte) error
	}{
		{keyTagHardState, pebbleEncodeHardState(nil, HardState{Promised: 7, Chosen: 200, Rebuilding: true}), 3,
			func(v []byte) error { _, err := pebbleDecodeHardState(v); return err }},
		// slot ballot ncmds cmd.ballot cmd.seq len, then the data.
		{keyTagEntry, pebbleEncodeEntry(nil, &entry), 6, func(v []byte) error { _, err := pebbleDecodeEntry(v); return err }},
		// slot size chunks, then the crc.
		{keyTagSnapshot, pebbleEncodeSnapshotDesc(nil, pebbleSnapshotDesc{slot: 9, size: 1000, chunks: 1, crc: 1}), 3,
			func(v []byte) error { _, err := pebbleDecodeSnapshotDesc(v); return err }},
	}
	refused := 0
	for _, v := range values {
		if err := v.decode(v.payload); err != nil {
			t.Fatalf("%q: the unpadded value fails: %v", v.kind, err)
		}
		p := v.payload[pebbleHeaderLen : len(v.payload)-pebbleTrailerLen]
		for off, i := 0, 0; i < v.varints; i++ {
			_, n := binary.Uvarint(p[off:])
			padded := append(append(bytes.Clone(p[:off+n-1]), p[off+n-1]|0x80, 0), p[off+n:]...)
			val := pebbleSealEnd(append(pebbleSealStart(nil, v.kind), padded...), 0)
			if err := v.decode(val); !errors.Is(err, ErrPebbleCorrupt) || !errors.Is(err, wire.ErrNonCanonical) {
				t.Errorf("%q with varint %d padded: %v; want a non-canonical ErrPebbleCorrupt", v.kind, i, err)
			} else {
				refused++
			}
			off += n
		}
	}
	if refused != 12 {
		t.Fatalf("only %d padded varints refused", refused)
	}
}
