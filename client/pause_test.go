//go:build unix

package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// The pause test re-executes the test binary as a lock holder (TestMain
// sees envPauseHolder), so that the holder is a real process that can be
// stopped with SIGSTOP.
const (
	envPauseHolder = "LOCKCELL_TEST_PAUSE_HOLDER" // the client config file
	envPauseMarker = "LOCKCELL_TEST_PAUSE_MARKER" // created while the holder is stopped
	pausePath      = "/t/paused"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envPauseHolder); cfg != "" {
		os.Exit(pauseHolder(cfg, os.Getenv(envPauseMarker)))
	}
	os.Exit(m.Run())
}

// pauseHolder takes the lock on pausePath, says "holding GEN", and then
// looks, as fast as it can, at whether it still holds it: the lock's
// context first, then the session's state. Between looks it watches a
// marker word in a file it maps into memory, which the test sets while the
// holder is stopped; reading it is a plain memory load, so a SIGSTOP lands
// anywhere, and mostly in that watch, which takes far longer than a look.
// It reports the first look that followed a sight of the marker, or that
// found the lock lost:
//
//	look resumed=B1/B2 ctx=ERR cause=CAUSE state=STATE
//
// where B1 says whether the marker was seen before the look (the whole look
// then came after the resume) and B2 whether it was seen after it.
func pauseHolder(cfgPath, markerPath string) int {
	fail := func(err error) int {
		fmt.Println("error:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mf, err := os.Open(markerPath)
	if err != nil {
		return fail(err)
	}
	mem, err := syscall.Mmap(int(mf.Fd()), 0, 4, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	word := (*atomic.Uint32)(unsafe.Pointer(&mem[0]))
	resumed := func() bool { return word.Load() != 0 }
	f, err := client.ReadConfigFile(cfgPath)
	if err != nil {
		return fail(err)
	}
	cfg, err := f.Config(false)
	if err != nil {
		return fail(err)
	}
	cfg.GracePeriod = 2 * time.Second
	cfg.Logger = quietLogger()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		return fail(err)
	}
	h, err := s.Open(ctx, pausePath, client.OpenOptions{})
	if err != nil {
		return fail(err)
	}
	l, err := h.Acquire(ctx, api.LockExclusive)
	if err != nil {
		return fail(err)
	}
	if l.Err() != nil || s.State() != client.StateSafe {
		return fail(fmt.Errorf("lock %v, state %v right after the grant", l.Err(), s.State()))
	}
	fmt.Println("holding", l.Generation())
	lctx := l.Context()
	for {
		before := false
		for i := 0; i < 20000 && !before; i++ {
			before = resumed()
		}
		lerr := lctx.Err()
		st := s.State()
		if before || lerr != nil || st != client.StateSafe {
			fmt.Printf("look resumed=%v/%v ctx=%v cause=%v state=%v\n", before, resumed(), lerr, context.Cause(lctx), st)
			return 0
		}
		if ctx.Err() != nil {
			return fail(errors.New("never resumed"))
		}
		runtime.Gosched()
	}
}

// TestPausedHolderSeesLockLost: a holder process of a lock without
// lock-delay is stopped (SIGSTOP) until its session has expired at the
// master and another client has taken the lock; resumed (SIGCONT), its
// very first look says the lock is lost — the context cancelled with
// ErrJeopardy and the session not safe — every time. No timing is
// asserted: the other client's grant proves that the holder's lease ran
// out during the pause, and the first look after resuming is exact by
// construction. It stays on real processes and real time (a real SIGSTOP
// is the point); every wait in it is for a condition, with minutes of
// patience, and a try that a starved machine spoils is not judged.
func TestPausedHolderSeesLockLost(t *testing.T) {
	const want, maxTries = 4, 8
	tc := startCell(t, 3, nil)
	ctx := testCtx(t, 3*time.Minute)
	b := tc.session(t, ctx, "other")
	hb, err := b.Open(ctx, pausePath, client.OpenOptions{Create: true, LockDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	judged := 0
	for try := 0; try < maxTries && judged < want; try++ {
		marker := filepath.Join(dir, fmt.Sprint("resumed-", try))
		if err := os.WriteFile(marker, make([]byte, 4), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envPauseHolder+"="+tc.ClientFilePath(), envPauseMarker+"="+marker)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := false
		t.Cleanup(func() {
			if !waited {
				// os.Process signals this process only, never a reused pid.
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		signal := func(sig syscall.Signal) {
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatalf("%v: %v", sig, err)
			}
		}
		lines := bufio.NewScanner(out)
		line := func() string {
			if !lines.Scan() {
				t.Fatalf("the holder said nothing more (%v)", lines.Err())
			}
			return lines.Text()
		}
		var gen uint64
		if l := line(); !strings.HasPrefix(l, "holding ") {
			t.Fatalf("holder: %q", l)
		} else if _, err := fmt.Sscan(strings.TrimPrefix(l, "holding "), &gen); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGSTOP); errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
			// The holder saw its lock lost and ended before the pause (a
			// starved machine): nothing to judge.
			look := line()
			waited = true
			_ = cmd.Wait()
			t.Logf("try %d: not judged, the holder ended before the pause: %s", try, look)
			continue
		} else if err != nil {
			t.Fatalf("%v: %v", syscall.SIGSTOP, err)
		}
		// The lock is free only once the master has expired the stopped
		// holder's session.
		lb, err := hb.Acquire(ctx, api.LockExclusive)
		if err != nil {
			t.Fatalf("the other client, while the holder is stopped: %v", err)
		}
		if lb.Generation() <= gen {
			t.Fatalf("the other client got generation %d; the holder had %d", lb.Generation(), gen)
		}
		setMarker(t, marker)
		signal(syscall.SIGCONT)
		look := line()
		waited = true
		if err := cmd.Wait(); err != nil {
			t.Fatalf("holder: %v", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(look, "look resumed=true/true "):
			// The whole look came after the resume: it must see the loss.
			judged++
			if !strings.Contains(look, " ctx=context canceled ") || !strings.Contains(look, " cause="+client.ErrJeopardy.Error()+" ") ||
				strings.HasSuffix(look, " state=safe") {
				t.Fatalf("try %d: the holder's first look after resuming, with another client holding the lock (generation %d > %d): %q",
					try, lb.Generation(), gen, look)
			}
			t.Logf("try %d: %s", try, look)
		default:
			// The lock was lost before the pause (a starved machine), or
			// the pause fell inside the look: nothing to judge.
			t.Logf("try %d: not judged: %s", try, look)
		}
	}
	if judged < want {
		t.Fatalf("only %d of %d tries judged (want %d)", judged, maxTries, want)
	}
}

// setMarker sets the marker word the holder watches, in place (the file
// stays mapped by the holder).
func setMarker(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{1, 0, 0, 0}, 0); err != nil {
		t.Fatal(err)
	}
}
