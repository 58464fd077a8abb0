package sequencer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/quick"

	"github.com/lockcell/lockcell/internal/wire"
)

func valid() Sequencer {
	return Sequencer{Cell: "cell-1", Tenant: "acme", Path: "/acme/jobs/leader", Mode: Exclusive, Generation: 42, Instance: 7}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range []Sequencer{
		valid(),
		{Cell: "c", Tenant: "t", Path: "/t", Mode: Shared, Generation: 1, Instance: 1},
		{Cell: strings.Repeat("c", MaxCellLen), Tenant: strings.Repeat("t", MaxTenantLen), Path: "/" + strings.Repeat("t", MaxTenantLen) + "/" + strings.Repeat("p", MaxPathLen-MaxTenantLen-2),
			Mode: Shared, Generation: 1<<64 - 1, Instance: 1<<64 - 1, Signature: bytes.Repeat([]byte{0xff}, MaxSignatureLen)},
		{Cell: "ünï", Tenant: "t", Path: "/t/ç", Mode: Exclusive, Generation: 300, Instance: 128, Signature: []byte{1, 2, 3}},
	} {
		b, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MaxEncodedLen {
			t.Fatalf("%d bytes over MaxEncodedLen %d", len(b), MaxEncodedLen)
		}
		got, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Cell != s.Cell || got.Tenant != s.Tenant || got.Path != s.Path || got.Mode != s.Mode ||
			got.Generation != s.Generation || got.Instance != s.Instance || !bytes.Equal(got.Signature, s.Signature) {
			t.Fatalf("round trip %+v -> %+v", s, got)
		}
		txt := s.String()
		got2, err := ParseString(txt)
		if err != nil || got2.String() != txt {
			t.Fatalf("text round trip: %v", err)
		}
		if strings.ContainsAny(txt, "+/=") {
			t.Fatalf("text form %q is not unpadded base64url", txt)
		}
	}
}

func TestSignedBytes(t *testing.T) {
	s := valid()
	a, err := s.SignedBytes()
	if err != nil {
		t.Fatal(err)
	}
	s.Signature = []byte("sig")
	b, _ := s.SignedBytes()
	if !bytes.Equal(a, b) {
		t.Fatal("the signature changed the signed bytes")
	}
	if !bytes.HasPrefix(a, []byte(signContext)) {
		t.Fatal("no domain separation prefix")
	}
	for _, mut := range []func(*Sequencer){
		func(x *Sequencer) { x.Cell = "cell-2" },
		func(x *Sequencer) { x.Tenant = "acm"; x.Path = "/acm/jobs/leader" },
		func(x *Sequencer) { x.Path = "/acme/jobs/leadex" },
		func(x *Sequencer) { x.Mode = Shared },
		func(x *Sequencer) { x.Generation++ },
		func(x *Sequencer) { x.Instance++ },
	} {
		x := valid()
		mut(&x)
		c, _ := x.SignedBytes()
		if bytes.Equal(a, c) {
			t.Fatalf("field change not covered by the signed bytes: %+v", x)
		}
	}
}

func TestInvalidRefused(t *testing.T) {
	for _, mut := range []func(*Sequencer){
		func(x *Sequencer) { x.Cell = "" },
		func(x *Sequencer) { x.Tenant = "" },
		func(x *Sequencer) { x.Tenant = "a/b"; x.Path = "/a/b/c" },
		func(x *Sequencer) { x.Path = "" },
		func(x *Sequencer) { x.Path = "relative" },
		func(x *Sequencer) { x.Path = "/other/x" },
		func(x *Sequencer) { x.Path = "/acmex" },
		func(x *Sequencer) { x.Mode = 0 },
		func(x *Sequencer) { x.Mode = 3 },
		func(x *Sequencer) { x.Generation = 0 },
		func(x *Sequencer) { x.Instance = 0 },
		func(x *Sequencer) { x.Cell = "\xff" },
		func(x *Sequencer) { x.Signature = make([]byte, MaxSignatureLen+1) },
	} {
		x := valid()
		mut(&x)
		if _, err := x.Marshal(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: Marshal error %v, want ErrInvalid", x, err)
		}
		if _, err := x.SignedBytes(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: SignedBytes error %v", x, err)
		}
		if x.String() != "!invalid" {
			t.Errorf("%+v: String %q", x, x.String())
		}
	}
	if _, err := ParseString("!invalid"); !errors.Is(err, ErrMalformed) {
		t.Fatal(err)
	}
}

func TestParseRejects(t *testing.T) {
	good, _ := valid().Marshal()
	cases := map[string][]byte{
		"empty":          nil,
		"version 0":      append([]byte{0}, good[1:]...),
		"version 2":      append([]byte{2}, good[1:]...),
		"trailing":       append(append([]byte(nil), good...), 0),
		"truncated":      good[:len(good)-1],
		"huge length":    {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"non-minimal":    {1, 0x81, 0x00, 'c'},
		"overflow":       {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"oversize input": make([]byte, MaxEncodedLen+1),
	}
	// A valid layout with mode 9.
	bad := valid()
	bad.Mode = Exclusive
	b, _ := bad.Marshal()
	b[1+1+len(bad.Cell)+1+len(bad.Tenant)+1+len(bad.Path)] = 9
	cases["mode 9"] = b
	for name, in := range cases {
		_, err := Parse(in)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
			t.Errorf("%s: untyped error %v", name, err)
		}
	}
	if _, err := Parse(append([]byte{2}, good[1:]...)); !errors.Is(err, ErrVersion) {
		t.Errorf("version 2: %v", err)
	}
	if _, err := ParseString(valid().String() + "="); !errors.Is(err, ErrMalformed) {
		t.Errorf("padded text accepted: %v", err)
	}
}

// TestParseRefusesPaddedVarints: every varint of a valid sequencer (the
// four lengths, generation, instance), padded by one byte to a longer
// encoding of the same number, is refused as not canonical. Without the
// canonical rule each padded form would parse to the same sequencer.
func TestParseRefusesPaddedVarints(t *testing.T) {
	s := valid()
	s.Signature = []byte("sig")
	good, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Offsets of the varints, from the layout in the package comment.
	cell := 1
	tenant := cell + 1 + len(s.Cell)
	path := tenant + 1 + len(s.Tenant)
	gen := path + 1 + len(s.Path) + 1
	inst := gen + wire.UvarintLen(s.Generation)
	sig := inst + wire.UvarintLen(s.Instance)
	refused := 0
	for name, off := range map[string]int{"cell length": cell, "tenant length": tenant, "path length": path,
		"generation": gen, "instance": inst, "signature length": sig} {
		_, n := binary.Uvarint(good[off:])
		padded := append(append(bytes.Clone(good[:off+n-1]), good[off+n-1]|0x80, 0), good[off+n:]...)
		_, err := Parse(padded)
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, wire.ErrNonCanonical) {
			t.Errorf("%s padded (%x): got %v, want a non-canonical error", name, padded, err)
			continue
		}
		refused++
	}
	if refused != 6 {
		t.Fatalf("%d of 6 padded varints refused", refused)
	}
}

// TestGenerationRoundTrip: any generation survives Marshal and Parse, so
// the canonical check refuses no minimal varint of any length.
func TestGenerationRoundTrip(t *testing.T) {
	if err := quick.Check(func(v uint64) bool {
		s := Sequencer{Cell: "c", Tenant: "t", Path: "/t", Mode: Exclusive, Generation: v | 1, Instance: 1}
		b, err := s.Marshal()
		if err != nil {
			return false
		}
		got, err := Parse(b)
		return err == nil && got.Generation == v|1
	}, nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse: Parse never panics; it either fails with a typed error or
// returns a valid sequencer whose encoding is exactly the input (the
// encoding is canonical), and likewise for the text form.
func FuzzParse(f *testing.F) {
	good, _ := valid().Marshal()
	f.Add(good)
	s := valid()
	s.Mode, s.Signature = Shared, []byte("signature")
	b, _ := s.Marshal()
	f.Add(b)
	f.Add([]byte{1})
	f.Add([]byte{1, 0x81, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		seq, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := seq.Validate(); err != nil {
			t.Fatalf("parsed an invalid sequencer: %v", err)
		}
		out, err := seq.Marshal()
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("not canonical: %x -> %x (%v)", in, out, err)
		}
		back, err := ParseString(seq.String())
		if err != nil || back.String() != seq.String() {
			t.Fatalf("text round trip: %v", err)
		}
	})
}

func ExampleSequencer() {
	s := Sequencer{Cell: "cell-1", Tenant: "acme", Path: "/acme/leader", Mode: Exclusive, Generation: 9, Instance: 3}
	text := s.String() // for an HTTP header
	got, err := ParseString(text)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Path, got.Mode, got.Generation, got.Instance)
	_, err = ParseString(text[:len(text)-2])
	fmt.Println(errors.Is(err, ErrMalformed))
	// Output:
	// /acme/leader exclusive 9 3
	// true
}

func BenchmarkMarshal(b *testing.B) {
	s := valid()
	s.Signature = make([]byte, 64)
	for i := 0; i < b.N; i++ {
		if _, err := s.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	s := valid()
	s.Signature = make([]byte, 64)
	enc, _ := s.Marshal()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(enc); err != nil {
			b.Fatal(err)
		}
	}
}
