package cell

import (
	"testing"

	"github.com/lockcell/lockcell/api"
)

// TestEveryMethodServed: every api method has exactly one entry in the
// api table and exactly one handler here (a handler or a stream handler),
// so a replica serves it by that entry; and no handler serves a method
// the table does not know.
func TestEveryMethodServed(t *testing.T) {
	entries := map[api.Method]int{}
	for _, mi := range api.Methods() {
		entries[mi.Method]++
	}
	checked := 0
	for m := api.Method(1); m.Valid(); m++ {
		checked++
		_, h := handlers[m]
		_, sh := streamHandlers[m]
		switch {
		case entries[m] != 1:
			t.Errorf("%s has %d entries in the api method table, want exactly 1", m, entries[m])
		case h && sh:
			t.Errorf("%s has both a handler and a stream handler", m)
		case !h && !sh:
			t.Errorf("%s has no handler", m)
		}
		e, ok := endpoints[m]
		if !ok {
			t.Errorf("%s is not served (no endpoint)", m)
			continue
		}
		if want, _ := m.Info(); e.MethodInfo != want {
			t.Errorf("%s is served with %+v, the api table says %+v", m, e.MethodInfo, want)
		}
	}
	if checked < 27 {
		t.Fatalf("checked %d methods, want at least 27", checked)
	}
	for m := range handlers {
		if _, ok := m.Info(); !ok {
			t.Errorf("a handler serves %s, which the api table does not know", m)
		}
	}
	for m := range streamHandlers {
		if _, ok := m.Info(); !ok {
			t.Errorf("a stream handler serves %s, which the api table does not know", m)
		}
	}
}
