package paxos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestPebbleMembershipFormat pins the storage of memberships: an entry or
// snapshot descriptor without one has the bytes it had before memberships
// existed (old stores read unchanged, and a store written before the first
// change stays readable by older builds), one with a membership round-trips
// through a reopened store, and a damaged membership is corrupt.
func TestPebbleMembershipFormat(t *testing.T) {
	e := Entry{Slot: 7, Ballot: MakeBallot(3, 2), Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: MakeBallot(3, 2), Seq: 4}, Data: []byte("x")}}}}
	legacy := pebbleSealStart(nil, keyTagEntry)
	for _, x := range []uint64{7, uint64(e.Ballot), 1, uint64(e.Ballot), 4, 1} {
		legacy = binary.AppendUvarint(legacy, x)
	}
	legacy = append(legacy, 'x')
	legacy = pebbleSealEnd(legacy, 0)
	if got := pebbleEncodeEntry(nil, &e); !bytes.Equal(got, legacy) {
		t.Fatalf("entry without a membership encodes as %x, before memberships it was %x", got, legacy)
	}
	d := pebbleSnapshotDesc{slot: 9, size: 3, chunks: 1, crc: 0xdeadbeef}
	legacyDesc := pebbleSealStart(nil, keyTagSnapshot)
	for _, x := range []uint64{9, 3, 1} {
		legacyDesc = binary.AppendUvarint(legacyDesc, x)
	}
	legacyDesc = binary.BigEndian.AppendUint32(legacyDesc, 0xdeadbeef)
	legacyDesc = pebbleSealEnd(legacyDesc, 0)
	if got := pebbleEncodeSnapshotDesc(nil, d); !bytes.Equal(got, legacyDesc) {
		t.Fatalf("snapshot descriptor without a membership encodes as %x, before memberships it was %x", got, legacyDesc)
	}

	s, db := pebbleTestOpen(t)
	conf := Membership{Voters: []ID{1, 2, 4}, Learners: []ID{6}}
	ce := Entry{Slot: 12, Ballot: MakeBallot(3, 2), Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: MakeBallot(3, 2), Seq: 5}}}, Conf: &conf}}
	members := Membership{Voters: []ID{1, 2, 3, 4}, Index: 8}
	if err := s.SaveSnapshot(Snapshot{Slot: 10, Data: []byte("app"), Members: &members}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(HardState{Promised: MakeBallot(3, 2), Chosen: 10}, []Entry{e, ce}, true); err != nil {
		t.Fatal(err)
	}
	re, err := NewPebbleStorage(db)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := re.Snapshot()
	if err != nil || snap.Members == nil || !snap.Members.Equal(members) || string(snap.Data) != "app" {
		t.Fatalf("snapshot after reopening: %+v (members %v), %v; want members %v", snap, snap.Members, err, members)
	}
	ents, err := re.Entries(11, 13)
	if err != nil || len(ents) != 1 || ents[0].Value.Conf == nil || !ents[0].Value.Conf.Equal(conf) || !sameValue(ents[0].Value, ce.Value) {
		t.Fatalf("entries after reopening: %v, %v; want the membership change %v", ents, err, conf)
	}

	// Damage: an unknown marker, a membership without voters, unsorted
	// voters, trailing bytes. Each is corrupt.
	for name, tail := range map[string][]uint64{
		"marker":   {2, 0, 1, 1, 0},
		"voters":   {1, 0, 0, 0},
		"unsorted": {1, 0, 2, 3, 1, 0},
		"trailing": {1, 0, 1, 1, 0, 9},
	} {
		v := pebbleSealStart(nil, keyTagEntry)
		for _, x := range []uint64{7, uint64(e.Ballot), 0} {
			v = binary.AppendUvarint(v, x)
		}
		for _, x := range tail {
			v = binary.AppendUvarint(v, x)
		}
		v = pebbleSealEnd(v, 0)
		if _, err := pebbleDecodeEntry(v); !errors.Is(err, ErrPebbleCorrupt) {
			t.Errorf("%s: %v; want ErrPebbleCorrupt", name, err)
		}
	}
	// And a well-formed one decodes, as a check that the cases above fail
	// for their damage only.
	v := pebbleSealStart(nil, keyTagEntry)
	for _, x := range []uint64{7, uint64(e.Ballot), 0, 1, 0, 2, 1, 3, 0} {
		v = binary.AppendUvarint(v, x)
	}
	v = pebbleSealEnd(v, 0)
	if got, err := pebbleDecodeEntry(v); err != nil || got.Value.Conf == nil || !got.Value.Conf.Equal(Membership{Voters: []ID{1, 3}}) {
		t.Fatalf("well-formed membership entry decodes to %+v, %v", got, err)
	}
}

// TestNodeRestoresMembership checks that a restarted node takes its
// membership from the stored snapshot and the chosen membership changes
// after it, not from Config.Replicas.
func TestNodeRestoresMembership(t *testing.T) {
	st := NewMemoryStorage()
	members := Membership{Voters: []ID{1, 2, 3, 4}, Index: 5}
	if err := st.SaveSnapshot(Snapshot{Slot: 6, Members: &members}); err != nil {
		t.Fatal(err)
	}
	next := Membership{Voters: []ID{1, 2, 4}}
	ents := []Entry{
		{Slot: 7, Ballot: MakeBallot(2, 1), Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: MakeBallot(2, 1), Seq: 1}}}, Conf: &next}},
		{Slot: 8, Ballot: MakeBallot(2, 1), Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: MakeBallot(2, 1), Seq: 2}, Data: []byte("y")}}}},
	}
	if err := st.Save(HardState{Promised: MakeBallot(2, 1), Chosen: 8}, ents, true); err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(Config{ID: 4, Replicas: []ID{1, 2, 3}, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	want := Membership{Voters: []ID{1, 2, 4}, Index: 7}
	if got := n.Status().Members; !got.Equal(want) {
		t.Fatalf("restored membership %v@%d, want %v@%d", got, got.Index, want, want.Index)
	}
	if !n.voting() {
		t.Fatal("replica 4, a voter of the restored membership, does not vote")
	}
	// Replica 3 was removed: its messages are refused.
	if err := n.Step(Message{Type: MsgPreVote, From: 3, To: 4, Nonce: 1}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("pre-vote from removed replica 3: %v; want ErrInvalidMessage", err)
	}
}
