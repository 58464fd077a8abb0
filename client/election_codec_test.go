package client

import (
	"bytes"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

// TestLeaderCodec checks the election node's contents: what encodeLeader
// writes decodes to the same leader, and a padded (non-canonical)
// sequencer length, a truncated one, a length past the end and a wrong
// magic are each refused.
func TestLeaderCodec(t *testing.T) {
	seq := sequencer.Sequencer{Cell: "c", Tenant: "t", Path: "/t/e", Mode: sequencer.Exclusive, Generation: 7, Instance: 3}
	raw, err := seq.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) >= 0x80 {
		t.Fatalf("the test's sequencer takes %d bytes; its length must fit one varint byte", len(raw))
	}
	stat := api.NodeStat{LockMode: api.LockExclusive, LockGeneration: 7, Instance: 3}
	good := encodeLeader([]byte("value"), raw)
	ld, ok := decodeLeader(stat, good)
	if !ok || string(ld.Value) != "value" || ld.Sequencer.Generation != 7 {
		t.Fatalf("decodeLeader(encodeLeader(...)) = %+v, %v; want the leader back", ld, ok)
	}
	body := good[len(leaderMagic)+1:]
	bad := map[string][]byte{
		"padded length": append([]byte(leaderMagic+string([]byte{byte(len(raw)) | 0x80, 0x00})), body...),
		"no length":     []byte(leaderMagic),
		"past the end":  append([]byte(leaderMagic+string([]byte{byte(len(good))})), body...),
		"wrong magic":   append([]byte("LE\x02"), good[len(leaderMagic):]...),
		"empty":         nil,
	}
	judged := 0
	for name, b := range bad {
		if bytes.Equal(b, good) {
			t.Fatalf("%s: the bad input equals the good one", name)
		}
		if ld, ok := decodeLeader(stat, b); ok {
			t.Errorf("%s: decodeLeader(%x) = %+v, accepted; want refused", name, b, ld)
		}
		judged++
	}
	if judged != 5 {
		t.Fatalf("judged %d bad inputs, want 5", judged)
	}
}
