package main_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

// TestLockctlRoughEdges runs lockctl as a user would and checks the small
// things a new user trips over: help once, hints that point the right way,
// paths with and without slashes, get on a directory, unrepeated error
// prefixes, tenant update that keeps quotas, --timeout 0, and get's
// newline on a terminal.
func TestLockctlRoughEdges(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lc, env := startTestCell(t, ctx)

	// A lock held by someone else.
	hs := tenantSession(t, ctx, lc, "holder")
	if _, err := client.NewMutex(hs, "/t/held").Lock(ctx); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		outHas []string
		errHas []string
		outNot []string
		errNot []string
		// outIs, if set, is the whole of stdout.
		outIs *string
	}{
		{name: "setup dir", args: []string{"mkdir", "/t/dir1"}},
		{name: "setup file", args: []string{"put", "/t/dir1/f", "value"}},
		{name: "help once", args: []string{"get", "--help"}, outHas: []string{"usage: lockctl get"}},
		{name: "bad flag: no usage dump", args: []string{"get", "--bogus"}, code: 2, errHas: []string{"-bogus", "lockctl get --help"}, outIs: ptr("")},
		{name: "--help exits 0", args: []string{"--help"}, outHas: []string{"Commands:"}},
		{name: "admin hint without --admin", args: []string{"put", "/other/x", "y"}, code: 1, errHas: []string{"use --admin"}},
		{name: "no admin hint with --admin", args: []string{"--admin", "put", "/t/x", "y"}, code: 1, errHas: []string{"permission denied"}, errNot: []string{"use --admin"}},
		{name: "ls /", args: []string{"ls", "/"}, outIs: ptr("t/\n")},
		{name: "ls /t/", args: []string{"ls", "/t/"}, outHas: []string{"dir1/\n"}},
		{name: "ls dir1/", args: []string{"ls", "dir1/"}, outIs: ptr("f\n")},
		{name: "ls /t/dir1", args: []string{"ls", "/t/dir1"}, outIs: ptr("f\n")},
		{name: "get relative", args: []string{"get", "dir1/f"}, outIs: ptr("value")},
		{name: "get on a directory", args: []string{"get", "/t/dir1"}, code: 1, errHas: []string{"/t/dir1 is a directory", "lockctl ls"}},
		{name: "locked: prefix once", args: []string{"lock", "--try", "/t/held", "--", "true"}, code: 4, errHas: []string{"locked"},
			errNot: []string{"locked: lockcell: locked", "client: locked"}},
		{name: "tenant create", args: []string{"tenant", "create", "acme", "--max-nodes", "10"}, outHas: []string{"/10"}},
		{name: "tenant update keeps quotas", args: []string{"tenant", "update", "acme", "--weight", "3"}, outHas: []string{"/10", " 3\n"}},
		{name: "tenant update of one quota", args: []string{"tenant", "update", "acme", "--max-nodes", "20"}, outHas: []string{"/20", " 3\n"}},
		{name: "--timeout 0 is no bound", args: []string{"--timeout", "0", "get", "/t/dir1/f"}, outIs: ptr("value")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runBin(t, ctx, bin, env, "", tc.args...)
			fail := code != tc.code || (tc.outIs != nil && out != *tc.outIs)
			for _, w := range tc.outHas {
				fail = fail || !strings.Contains(out, w)
			}
			for _, w := range tc.errHas {
				fail = fail || !strings.Contains(stderr, w)
			}
			for _, w := range tc.outNot {
				fail = fail || strings.Contains(out, w)
			}
			for _, w := range tc.errNot {
				fail = fail || strings.Contains(stderr, w)
			}
			if n := strings.Count(out, "usage: lockctl"); n > 1 {
				t.Errorf("usage printed %d times", n)
			}
			if fail {
				t.Fatalf("lockctl %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q (is %v), stderr with %q, not %q",
					tc.args, code, out, stderr, tc.code, tc.outHas, tc.outIs, tc.errHas, tc.errNot)
			}
		})
	}

	// get adds a newline on a terminal only.
	if _, err := exec.LookPath("script"); err != nil {
		t.Log("no script(1): the terminal case is not checked")
		return
	}
	cmd := exec.CommandContext(ctx, "script", "-qec", bin+" get /t/dir1/f", "/dev/null")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v (%q)", err, out)
	}
	if !strings.HasSuffix(string(out), "value\r\n") {
		t.Fatalf("get on a terminal wrote %q; want the value and a newline", out)
	}
}

func ptr[T any](v T) *T { return &v }
