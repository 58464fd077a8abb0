package cell

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// subsFixture is a subscriptions whose namespace is a table of readable
// (caller, path) pairs and existing paths, and which records what it
// delivers.
type subsFixture struct {
	*subscriptions
	mu        sync.Mutex
	owners    map[uint64]namespace.Caller
	readable  map[string]bool // principal+path
	missing   map[string]bool // paths that no longer exist
	delivered []string        // "sess kind path"
}

func newSubsFixture() *subsFixture {
	f := &subsFixture{owners: map[uint64]namespace.Caller{}, readable: map[string]bool{}, missing: map[string]bool{}}
	f.subscriptions = newSubscriptions(
		func(sess uint64) (namespace.Caller, bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			c, ok := f.owners[sess]
			return c, ok
		},
		func(c namespace.Caller, path string) (bool, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.missing[path] {
				if f.readable[c.Principal+"/"] {
					return false, api.ErrNotFound
				}
				return false, apiErr(api.PermissionDenied, "no read on the parent")
			}
			return f.readable[c.Principal+path], nil
		},
		func(sess uint64, ev api.Event) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.delivered = append(f.delivered, fmt.Sprint(sess, " ", ev.Kind, " ", ev.Path))
		})
	return f
}

func (f *subsFixture) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.delivered
	f.delivered = nil
	slices.Sort(out)
	return out
}

func TestSubscriptionsMasksAndACL(t *testing.T) {
	f := newSubsFixture()
	alice := namespace.Caller{Tenant: "t", Principal: "alice"}
	bob := namespace.Caller{Tenant: "t", Principal: "bob"}
	eve := namespace.Caller{Tenant: "t", Principal: "eve"}
	f.owners[1], f.owners[2], f.owners[3] = alice, bob, eve
	f.readable["alice/t/f"], f.readable["bob/t/f"] = true, true
	f.readable["alice/"], f.readable["bob/"] = true, true

	f.subscribe(alice, 1, "/t/f", api.WantContentsModified)
	f.subscribe(bob, 2, "/t/f", api.WantChildAdded|api.WantLockAcquired)
	f.subscribe(eve, 3, "/t/f", api.WantContentsModified) // may not read: not subscribed
	f.subscribe(alice, 1, "/t/g", 0)                      // empty mask: nothing

	f.publishChange(namespace.NodeChange{Kind: namespace.ChangeContents, Path: "/t/f"})
	if got, want := f.take(), []string{"1 contents-modified /t/f"}; !slices.Equal(got, want) {
		t.Fatalf("contents change delivered %q, want %q", got, want)
	}
	f.publishChange(namespace.NodeChange{Kind: namespace.ChangeLockAcquired, Path: "/t/f"})
	if got, want := f.take(), []string{"2 lock-acquired /t/f"}; !slices.Equal(got, want) {
		t.Fatalf("lock change delivered %q, want %q", got, want)
	}
	if f.watched("/t/g") {
		t.Fatal("a zero mask subscribed /t/g")
	}

	// Bob loses read access after subscribing: his events stop although
	// his subscription stays.
	f.mu.Lock()
	f.readable["bob/t/f"] = false
	f.mu.Unlock()
	f.publishChange(namespace.NodeChange{Kind: namespace.ChangeChildAdded, Path: "/t/f", Child: "c"})
	if got := f.take(); len(got) != 0 {
		t.Fatalf("child-added delivered %q to a session that may no longer read", got)
	}
	f.mu.Lock()
	f.readable["bob/t/f"] = true
	f.mu.Unlock()

	// A deletion reaches every watcher whatever its mask, if it would be
	// told NotFound, and ends the watches on the path.
	f.mu.Lock()
	f.missing["/t/f"] = true
	f.mu.Unlock()
	f.publishChange(namespace.NodeChange{Kind: namespace.ChangeDeleted, Path: "/t/f"})
	if got, want := f.take(), []string{"1 handle-invalid /t/f", "2 handle-invalid /t/f"}; !slices.Equal(got, want) {
		t.Fatalf("deletion delivered %q, want %q", got, want)
	}
	if f.watched("/t/f") {
		t.Fatal("watches on /t/f survived its deletion")
	}

	// An ended session gets nothing more, and unsubscribe forgets one path.
	f.readable["alice/t/h"], f.readable["bob/t/h"] = true, true
	f.subscribe(alice, 1, "/t/h", api.WantContentsModified)
	f.subscribe(bob, 2, "/t/h", api.WantContentsModified)
	f.forgetSession(1)
	f.publishChange(namespace.NodeChange{Kind: namespace.ChangeContents, Path: "/t/h"})
	if got, want := f.take(), []string{"2 contents-modified /t/h"}; !slices.Equal(got, want) {
		t.Fatalf("after forgetSession(1) delivered %q, want %q", got, want)
	}
	f.unsubscribe(2, "/t/h")
	if f.watched("/t/h") {
		t.Fatal("/t/h still watched after its last watcher unsubscribed")
	}
}
