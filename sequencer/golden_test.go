package sequencer

import (
	"bytes"
	"crypto/ed25519"
	"flag"
	"reflect"
	"strings"
	"testing"

	"github.com/lockcell/lockcell/internal/golden"
)

// updateGolden rewrites testdata/golden.hex from the current encoder. Use
// it only to add a value: a changed line is a changed token format, which
// every protected server parses.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden.hex")

// TestGolden pins the exact binary form of representative sequencers, and
// checks the pinned bytes parse back to the value.
func TestGolden(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	signed, err := Sequencer{Cell: "cell-a", Tenant: "acme", Path: "/acme/locks/leader", Mode: Exclusive, Generation: 42, Instance: 7}.Sign(key)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		s    Sequencer
	}{
		{"unsigned", Sequencer{Cell: "c", Tenant: "t", Path: "/t", Mode: Shared, Generation: 1, Instance: 1}},
		{"large", Sequencer{Cell: strings.Repeat("c", MaxCellLen), Tenant: "acme", Path: "/acme/" + strings.Repeat("p", 200),
			Mode: Exclusive, Generation: 1<<63 + 5, Instance: 300}},
		{"signed", signed},
	}
	const path = "testdata/golden.hex"
	if *updateGolden {
		vals := make([]golden.Value, 0, len(cases))
		for _, c := range cases {
			b, err := c.s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			vals = append(vals, golden.Value{Name: c.name, Bytes: b})
		}
		if err := golden.Write(path, "name hex: exact binary forms pinned by TestGolden; a changed line is a format change.", vals); err != nil {
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
		if !ok {
			t.Errorf("%s: not in %s", c.name, path)
			continue
		}
		got, err := c.s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", c.name, got, w)
			continue
		}
		s, err := Parse(w)
		if err != nil {
			t.Errorf("%s: parsing the golden bytes: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(s, c.s) {
			t.Errorf("%s: parsed %+v, want %+v", c.name, s, c.s)
			continue
		}
		checked++
	}
	if checked != len(cases) || checked == 0 {
		t.Errorf("checked %d of %d golden values", checked, len(cases))
	}
	t.Logf("%d golden values checked", checked)
}
