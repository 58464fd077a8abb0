package cell

import (
	"slices"
	"testing"

	"github.com/lockcell/lockcell/namespace"
)

func TestSessionOwnersTrackOwnerAndTokens(t *testing.T) {
	o := newSessionOwners()
	alice := namespace.Caller{Tenant: "t", Principal: "alice"}
	bob := namespace.Caller{Tenant: "t", Principal: "bob"}
	o.add(1, alice)
	o.add(2, bob)
	o.add(3, alice)
	if c, ok := o.owner(2); !ok || c != bob {
		t.Fatalf("owner(2) = %v, %v; want bob, true", c, ok)
	}
	if _, ok := o.owner(9); ok {
		t.Fatal("owner(9): an unknown session has an owner")
	}

	o.bindToken(3, "tok-a")
	o.bindToken(1, "tok-a")
	o.bindToken(2, "tok-b")
	o.bindToken(9, "tok-a") // not live: not bound
	if got := o.boundTo("tok-a"); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("boundTo(tok-a) = %v, want [1 3]", got)
	}
	if got := o.boundTo("tok-c"); len(got) != 0 {
		t.Fatalf("boundTo(tok-c) = %v, want none", got)
	}

	// An ended session is neither owned nor bound, and a later binding
	// attempt (a call racing with the end) does not bring it back.
	o.remove(1)
	o.bindToken(1, "tok-a")
	if _, ok := o.owner(1); ok {
		t.Fatal("owner(1) after remove: still owned")
	}
	if got := o.boundTo("tok-a"); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("boundTo(tok-a) after remove(1) = %v, want [3]", got)
	}
}
