package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeSection returns the text of README.md's section titled title (up
// to the next "## " heading).
func readmeSection(t *testing.T, repo, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", title)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	return s
}

// fencedBlocks returns the contents of the section's code blocks of the
// given language, in order.
func fencedBlocks(section, lang string) []string {
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// consecutiveTCPPorts returns the first of n consecutive free loopback TCP
// ports.
func consecutiveTCPPorts(t *testing.T, n int) int {
	t.Helper()
	return freePortBase(t, "tcp", func(base int) bool { return portsFree("tcp", base, n) })
}

// TestReadmeOperatingACell follows README.md's "Operating a cell" on
// loopback, running its shell commands in order as written, with these
// substitutions only: the hosts' addresses 10.0.0.N:7001 become free
// loopback ports (and init gets a free --http-port, since every "host" is
// this machine); `make build` and `go run ./tools/hello` run as their
// prebuilt binaries in bin/; each `lockcelld serve`, which a host runs in
// the foreground, runs in the background with its output in a file. Every
// other command must exit 0. It also checks that the README's Go excerpt is
// the code of tools/hello, which the commands run.
func TestReadmeOperatingACell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sec := readmeSection(t, repo, "Operating a cell")
	goBlocks := fencedBlocks(sec, "go")
	hello, err := os.ReadFile(filepath.Join(repo, "tools", "hello", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(goBlocks) != 1 || !strings.Contains(string(hello), goBlocks[0]) {
		t.Fatalf("the README's Go excerpt (%d blocks) is not the code of tools/hello/main.go", len(goBlocks))
	}
	var lines []string
	for _, b := range fencedBlocks(sec, "sh") {
		for _, l := range strings.Split(b, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
	}
	makefile, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil || !strings.Contains(string(makefile), "build:\n\t$(GO) build -o bin/ ./cmd/...") {
		t.Fatalf("make build no longer builds ./cmd/... into bin/ (%v); this test stands in for it", err)
	}

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./cmd/...", "./tools/hello")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}

	hosts := regexp.MustCompile(`10\.0\.0\.(\d+):7001`)
	nhosts := 0
	for _, l := range lines {
		for _, m := range hosts.FindAllStringSubmatch(l, -1) {
			n, _ := strconv.Atoi(m[1])
			nhosts = max(nhosts, n)
		}
	}
	if nhosts < 3 {
		t.Fatalf("the README names %d hosts; want three or five", nhosts)
	}
	udp := freePorts(t, "udp", nhosts)
	httpBase := consecutiveTCPPorts(t, nhosts)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKCELL_") {
			env = append(env, kv)
		}
	}

	var servers []*exec.Cmd
	t.Cleanup(func() {
		for i, s := range servers {
			_ = syscall.Kill(-s.Process.Pid, syscall.SIGKILL)
			_ = s.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(work, fmt.Sprintf("serve-%d.log", i+1)))
				t.Logf("serve %d log (tail):\n%s", i+1, tail(string(b), 20))
			}
		}
	})
	outputs := map[string]string{}
	ran := 0
	for _, l := range lines {
		cmdLine := hosts.ReplaceAllStringFunc(l, func(h string) string {
			n, _ := strconv.Atoi(hosts.FindStringSubmatch(h)[1])
			return "127.0.0.1:" + strconv.Itoa(udp[n-1])
		})
		switch {
		case cmdLine == "make build":
			continue // built above
		case strings.HasPrefix(cmdLine, "bin/lockcelld init "):
			cmdLine += " --http-port " + strconv.Itoa(httpBase)
		case strings.HasPrefix(cmdLine, "go run ./tools/hello"):
			cmdLine = "bin/hello" + strings.TrimPrefix(cmdLine, "go run ./tools/hello")
		}
		if strings.HasPrefix(cmdLine, "bin/lockcelld serve ") {
			logf, err := os.Create(filepath.Join(work, fmt.Sprintf("serve-%d.log", len(servers)+1)))
			if err != nil {
				t.Fatal(err)
			}
			s := exec.Command("bash", "-c", cmdLine)
			s.Dir, s.Env, s.Stdout, s.Stderr = work, env, logf, logf
			s.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			logf.Close()
			servers = append(servers, s)
			ran++
			continue
		}
		c := exec.CommandContext(ctx, "bash", "-c", cmdLine)
		c.Dir, c.Env = work, env
		c.WaitDelay = 5 * time.Second
		out, err := c.CombinedOutput()
		t.Logf("$ %s\n%s", cmdLine, strings.TrimRight(string(out), "\n"))
		if err != nil {
			t.Fatalf("README command %q: %v (ctx: %v)\n%s", l, err, ctx.Err(), out)
		}
		if _, seen := outputs[l]; !seen {
			outputs[l] = string(out) // a command's first run is the one checked
		}
		ran++
	}
	if len(servers) != nhosts {
		t.Errorf("the README starts %d replicas of %d", len(servers), nhosts)
	}
	for cmd, want := range map[string]string{
		"bin/lockctl --config deploy/app.json get /app/hello":                           "world",
		"bin/lockctl --config deploy/app.json lock /app/job -- echo ran under the lock": "ran under the lock",
		"go run ./tools/hello --config deploy/app.json":                                 `holds "hello from Go"`,
	} {
		if !strings.Contains(outputs[cmd], want) {
			t.Errorf("README command %q printed %q; want %q", cmd, outputs[cmd], want)
		}
	}
	t.Logf("ran %d README commands", ran)
	if ran < 11 {
		t.Fatalf("ran %d README commands; the section lost its steps", ran)
	}
}
