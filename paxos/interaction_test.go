package paxos_test

import (
	"path/filepath"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/lockcell/lockcell/paxos/paxostest"
)

// minInteractionScripts is the least number of scripts TestInteraction must
// run; fewer means scripts went missing (or the glob broke) and the corner
// cases they pin are no longer checked.
const minInteractionScripts = 10

// TestInteraction runs every golden interaction script in testdata/*.txt
// against a fresh paxostest.Env. Regenerate the expected output with
// -rewrite and review the diff.
func TestInteraction(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			env := paxostest.NewEnv(t)
			datadriven.RunTest(t, f, func(t *testing.T, td *datadriven.TestData) string {
				return env.Handle(t, td)
			})
		})
		ran++
	}
	if ran < minInteractionScripts {
		t.Fatalf("ran %d interaction scripts, want at least %d", ran, minInteractionScripts)
	}
	t.Logf("ran %d interaction scripts", ran)
}
