package api

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestEventRoundTrip(t *testing.T) {
	for k := EventContentsModified; k <= EventOverflow; k++ {
		in := Event{Kind: k, Seq: 7, Path: "/ls/c/d", Child: "x", Handle: 3, Instance: 2, Generation: 9, Epoch: 5}
		b, err := msgpack.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out Event
		if err := msgpack.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if out != in {
			t.Fatalf("round trip of %v gave %v", in, out)
		}
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{
		0:                     "event-kind(0)",
		EventContentsModified: "contents-modified",
		EventConflictingLock:  "conflicting-lock",
		EventMasterFailover:   "master-failover",
		EventOverflow:         "overflow",
		EventOverflow + 1:     "event-kind(9)",
		255:                   "event-kind(255)",
	} {
		if got := k.String(); got != want {
			t.Errorf("EventKind(%d).String() = %q, want %q", k, got, want)
		}
	}
	ev := Event{Kind: EventChildAdded, Seq: 3, Path: "/ls/d", Child: "f"}
	if got := ev.String(); got != "#3 child-added /ls/d child f" {
		t.Errorf("Event.String() = %q", got)
	}
}
