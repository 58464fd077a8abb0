package namespace

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lockcell/lockcell/api"
)

// TestReadsSeeWholeSlots reads while slots apply. Each slot creates one
// child of /a/d and deletes the previous one, and rewrites /a/f, so a read
// that saw part of a slot would list zero or two children.
func TestReadsSeeWholeSlots(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	e.create(alice, 0, "/a/d", true, "")
	e.create(alice, 0, "/a/d/c0", false, "")
	e.create(alice, 0, "/a/f", false, "0")
	const slots = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	stop := make(chan struct{})
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				page, err := e.s.ReadDir(alice, "/a/d", "", 0)
				if err == nil && len(page.Entries) != 1 {
					err = fmt.Errorf("read %d saw %d children", i, len(page.Entries))
				}
				if err == nil {
					var data []byte
					var st api.NodeStat
					data, st, err = e.s.GetContentsAndStat(alice, "/a/f")
					if err == nil && fmt.Sprint(st.ContentGeneration-1) != string(data) {
						err = fmt.Errorf("contents %q with generation %d", data, st.ContentGeneration)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 1; i <= slots; i++ {
		rs := e.applySlot(
			Command{Time: e.now, Caller: alice, Op: &OpenNode{Path: fmt.Sprintf("/a/d/c%d", i), Create: true}},
			Command{Time: e.now, Caller: alice, Op: &Delete{Path: fmt.Sprintf("/a/d/c%d", i-1)}},
			Command{Time: e.now, Caller: alice, Op: &SetContents{Path: "/a/f", Contents: []byte(fmt.Sprint(i))}},
		)
		for _, r := range rs {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
