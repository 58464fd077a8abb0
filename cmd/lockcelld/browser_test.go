package main

import (
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// TestStatusPageInBrowser opens the status page of a follower of a cell of
// five real `lockcelld serve` processes in headless Chromium, lets its
// script run for a few seconds of the browser's virtual time, and checks
// the rendered text: the master (by id, address and epoch, as /status and
// lockctl status write them), a row for each of the five replicas with
// its role, the sessions and locks a client holds, the tenant's row, the
// hand-over (lockctl cell stepdown) the replica saw, and that the page
// reloaded itself. It
// saves a screenshot in the test's temporary directory and logs its path
// (and copies it into $LOCKCELL_SCREENSHOT_DIR, if set, to be looked at).
//
// Chromium comes from Debian's chromium package; the test installs it
// with apt-get if it is missing, and skips, loudly, only where that
// cannot be done.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes and a browser")
	}
	chromium := ensureChromium(t)
	c := startProcCell(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A session holding a lock, so the page has sessions and a lock to show.
	cl, s := c.session(ctx)
	defer cl.Close()
	h, err := s.Open(ctx, "/t/browser-lock", client.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := h.Acquire(ctx, api.LockExclusive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(context.WithoutCancel(ctx)) }()

	// A hand-over, so the page has a fail-over from one master to another.
	first := c.waitMaster()
	out, err := exec.CommandContext(ctx, lockctlBinary(t), "--config", filepath.Join(c.dir, "admin.json"), "cell", "stepdown").CombinedOutput()
	if err != nil {
		t.Fatalf("lockctl cell stepdown: %v\n%s", err, out)
	}
	var m int
	if !pollUntil(ctx, func() bool { m = c.master(); return m != 0 && m != first }) {
		t.Fatalf("replica %d stepped down and no other became master", first)
	}
	var view int
	for _, id := range c.followers(m) {
		if id != first {
			view = id
			break
		}
	}
	var st procStatus
	if !pollUntil(ctx, func() bool {
		var ok bool
		st, ok = c.status(view)
		if !ok || st.Master != uint64(m) {
			return false
		}
		for _, rs := range st.Replicas {
			if rs.HeardMillis < 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("replica %d never knew master %d and heard all its peers: %+v", view, m, st)
	}
	url := "http://" + c.httpAddr(view) + "/"
	dir := t.TempDir()

	dom := runChromium(ctx, t, chromium, dir, "--virtual-time-budget=7000", "--dump-dom", url)
	text := pageText(dom)
	t.Logf("rendered text of %s:\n%s", url, text)

	var masterAddr string
	for _, rs := range st.Replicas {
		if rs.ID == uint64(m) {
			masterAddr = rs.Addr
		}
	}
	judged := 0
	want := func(what, s string) {
		t.Helper()
		judged++
		if !strings.Contains(text, s) {
			t.Errorf("the rendered page lacks %s: %q", what, s)
		}
	}
	want("the master", fmt.Sprintf("Master: replica %d (%s), epoch %s.", m, masterAddr, st.Epoch))
	for _, rs := range st.Replicas {
		role := api.RoleFollower
		if rs.ID == uint64(m) {
			role = api.RoleMaster
		}
		// id, address, role, epoch, chosen, applied, lag, heard
		row := fmt.Sprintf(`(?m)^%d %s %s %s [0-9]+ [0-9]+ [0-9]+ (this replica|[0-9]+ ms ago)$`,
			rs.ID, regexp.QuoteMeta(rs.Addr), regexp.QuoteMeta(string(role)), regexp.QuoteMeta(st.Epoch.String()))
		judged++
		if !regexp.MustCompile(row).MatchString(text) {
			t.Errorf("the rendered page lacks replica %d's row (%s, %s, epoch %s, slots, lag, heard)", rs.ID, rs.Addr, role, st.Epoch)
		}
	}
	want("this replica's role", fmt.Sprintf("Replica %d (%s). Master: replica %d, epoch %s.", view, api.RoleFollower, m, st.Epoch))
	if !regexp.MustCompile(`Sessions open: [1-9][0-9]*\. Lock grants held: [1-9][0-9]*\.`).MatchString(text) {
		t.Errorf("the rendered page shows no open session and held lock")
	}
	judged++
	if !regexp.MustCompile(`\bt [1-9][0-9]* [1-9][0-9]* [0-9]+ [0-9.]+ [0-9.]+ [0-9.]+\b`).MatchString(text) {
		t.Errorf("the rendered page has no row for tenant t with its sessions and locks")
	}
	judged++
	want("the hand-over this replica saw", fmt.Sprintf("replica %d %s replica %d", m, st.Epoch, first))
	// The script swaps in a fresh body every two seconds; it counts the
	// swaps on the html element.
	if n := regexp.MustCompile(`data-refreshes="([0-9]+)"`).FindStringSubmatch(dom); n == nil || n[1] == "0" {
		t.Errorf("the page did not reload itself in 7 s of browser time (data-refreshes: %v)", n)
	}
	judged++
	if judged < 10 {
		t.Fatalf("judged %d facts of the page; want 10", judged)
	}

	shot := filepath.Join(dir, "status-page.png")
	runChromium(ctx, t, chromium, dir, "--window-size=1280,1500", "--screenshot="+shot, url)
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("judged %d facts of the rendered page; screenshot of %s: %s (%d bytes)", judged, url, shot, fi.Size())
	if keep := os.Getenv("LOCKCELL_SCREENSHOT_DIR"); keep != "" {
		b, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(filepath.Join(keep, "status-page.png"), b, 0o644)
		}
		if err != nil {
			t.Errorf("keeping the screenshot in LOCKCELL_SCREENSHOT_DIR: %v", err)
		}
	}
}

// ensureChromium returns the path of Debian's chromium, installing the
// package if it is missing; it skips the test, loudly, if that cannot be
// done (not root, no apt-get, no package).
func ensureChromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	skip := func(why string) {
		t.Skipf("\n*** SKIPPED: THE STATUS PAGE WAS NOT TESTED IN A BROWSER ***\n"+
			"*** chromium is not installed and %s; install Debian's chromium package (apt-get install -y chromium) ***", why)
	}
	if os.Geteuid() != 0 {
		skip("this test is not root, so it cannot apt-get it")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		skip("there is no apt-get")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "chromium"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			skip(fmt.Sprintf("apt-get %s failed (%v): %s", strings.Join(args, " "), err, tail(string(out), 5)))
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		skip("apt-get installed no chromium")
	}
	t.Logf("installed %s", p)
	return p
}

// runChromium runs headless chromium with args after the fixed flags (a
// profile in dir, no network but the page's) and returns its stdout.
func runChromium(ctx context.Context, t *testing.T, chromium, dir string, args ...string) string {
	t.Helper()
	profile, err := os.MkdirTemp(dir, "profile-")
	if err != nil {
		t.Fatal(err)
	}
	full := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + profile}, args...)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, chromium, full...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.WaitDelay = 10 * time.Second
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	return string(out)
}

var (
	scriptOrStyle = regexp.MustCompile(`(?is)<(script|style)\b.*?</(script|style)>`)
	anyTag        = regexp.MustCompile(`(?s)<[^>]*>`)
	spaces        = regexp.MustCompile(`\s+`)
)

// pageText is the text a reader sees in dom: no scripts, styles or tags,
// entities decoded, every run of white space one space, each block on a
// line of its own.
func pageText(dom string) string {
	s := scriptOrStyle.ReplaceAllString(dom, " ")
	s = regexp.MustCompile(`(?i)</(p|h1|h2|tr|table)>`).ReplaceAllString(s, "$0\n")
	s = anyTag.ReplaceAllString(s, " ")
	var lines []string
	for _, l := range strings.Split(html.UnescapeString(s), "\n") {
		if l = strings.TrimSpace(spaces.ReplaceAllString(l, " ")); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
