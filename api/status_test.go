package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"testing/quick"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lockcell/lockcell/api"
)

// TestEpochAndChecksumForms: an epoch reads "round.replica" in text and
// JSON and stays the number on the wire; a checksum is 16 hex digits in
// text and a JSON string (a JSON number would lose bits above 2^53).
func TestEpochAndChecksumForms(t *testing.T) {
	e := api.Epoch(4<<16 | 3)
	if e.String() != "4.3" || e.Round() != 4 || e.Replica() != 3 {
		t.Fatalf("epoch %d: %q round %d replica %d", uint64(e), e, e.Round(), e.Replica())
	}
	st := api.CellStatusResponse{Epoch: e, Checksum: 1<<63 | 5, Role: api.RoleFollower}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["Epoch"] != "4.3" || raw["Checksum"] != "8000000000000005" || raw["Role"] != "follower" {
		t.Fatalf("JSON %s", b)
	}
	var back api.CellStatusResponse
	if err := json.Unmarshal(b, &back); err != nil || back.Epoch != e || back.Checksum != st.Checksum {
		t.Fatalf("JSON round trip: %+v, %v", back, err)
	}
	mb, err := msgpack.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		E  uint64 `msgpack:"e"`
		CK uint64 `msgpack:"ck"`
	}
	if err := msgpack.Unmarshal(mb, &wire); err != nil || wire.E != uint64(e) || wire.CK != uint64(st.Checksum) {
		t.Fatalf("msgpack carries %+v (%v); want the numbers", wire, err)
	}
	if _, err := api.ParseEpoch("65540"); !errors.Is(err, api.ErrBadEpoch) {
		t.Fatalf("ParseEpoch of a bare number: %v; want ErrBadEpoch", err)
	}
	if err := quick.Check(func(round uint64, id uint16) bool {
		e := api.Epoch(round>>16<<16 | uint64(id))
		p, err := api.ParseEpoch(e.String())
		return err == nil && p == e && e.String() == fmt.Sprintf("%d.%d", uint64(e)>>16, uint64(e)&0xffff)
	}, nil); err != nil {
		t.Fatal(err)
	}
}
