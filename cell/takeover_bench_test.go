package cell

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/session"
)

// takeOverSessions is how many session records the take-over benchmarks
// hold: the size at which a new master's take-over step held its run loop
// for about half a second on a quiet machine.
const takeOverSessions = 100_000

// quietPebble drops Pebble's informational logging.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic("pebble fatal: " + format)
}

// takeOverStore returns an applied state on an in-memory Pebble holding n
// sessions spread over four tenants, each with a principal of its own.
func takeOverStore(tb testing.TB, n int) *namespace.Store {
	tb.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	st, err := namespace.Open(db, namespace.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	slot := uint64(0)
	apply := func(cmds []namespace.Command) {
		raw := make([][]byte, len(cmds))
		for i, c := range cmds {
			if raw[i], err = namespace.EncodeCommand(c); err != nil {
				tb.Fatal(err)
			}
		}
		slot++
		rs, err := st.ApplySlot(slot, raw)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				tb.Fatal(r.Err)
			}
		}
	}
	tenants := []string{"t0", "t1", "t2", "t3"}
	for _, t := range tenants {
		apply([]namespace.Command{{Time: now, Caller: takeOverAdmin, Op: &namespace.CreateTenant{Name: t}}})
	}
	for i := 0; i < n; {
		var cmds []namespace.Command
		for ; i < n && len(cmds) < 1000; i++ {
			c := namespace.Caller{Tenant: tenants[i%len(tenants)], Principal: fmt.Sprintf("p%d", i%97)}
			cmds = append(cmds, namespace.Command{Time: now, Caller: c, Op: &namespace.CreateSession{}})
		}
		apply(cmds)
	}
	return st
}

var takeOverAdmin = namespace.Caller{Principal: namespace.DefaultAdminPrincipal}

// takeOverDeps is the least a master role needs to be built over st: no
// pipeline (nothing is proposed during the benchmark), a discarding logger.
func takeOverDeps(st masterState) masterDeps {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return masterDeps{
		log:        log,
		metrics:    newMetrics(metricsSources{}),
		state:      st,
		cellCaller: takeOverAdmin,
		submit: func(context.Context, *master, origin, namespace.Caller, namespace.Op, func(namespace.Result, error)) {
		},
		wake:         func() {},
		load:         func() (int, int) { return 0, 1 },
		notMaster:    func() *api.Error { return api.Errorf(api.NotMaster, "not master") },
		sessionError: func(error) *api.Error { return api.Errorf(api.NotMaster, "not master") },
		rebase:       func() error { return nil },
		now:          func() (int64, error) { return 0, nil },
		sessions:     session.Config{Lease: 12 * time.Second, MaxLease: 12 * time.Second, Epoch: 2, Logger: log},
		twoRound:     func(*master) bool { return false },
		handOverRuns: func(*master) bool { return true },
	}
}

// BenchmarkTakeOver100k is the whole take-over step of a new master
// (newMaster) over 100,000 session records: the step that runs on the
// run loop while the new master's lease runs.
func BenchmarkTakeOver100k(b *testing.B) {
	d := takeOverDeps(takeOverStore(b, takeOverSessions))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := newMaster(d, 2)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got := m.sessions.Stats().Sessions; got != takeOverSessions {
			b.Fatalf("took over %d sessions, want %d", got, takeOverSessions)
		}
		m.stop()
		b.StartTimer()
	}
}

// BenchmarkTakeOverParts100k times the parts of the take-over step one by
// one (ListSessions is the full scan the step used before SessionOwners).
func BenchmarkTakeOverParts100k(b *testing.B) {
	st := takeOverStore(b, takeOverSessions)
	list, err := st.SessionOwners(takeOverAdmin)
	if err != nil || len(list) != takeOverSessions {
		b.Fatalf("SessionOwners: %d sessions, %v", len(list), err)
	}
	ids := make([]session.ID, len(list))
	for i, s := range list {
		ids[i] = session.ID(s.ID)
	}
	b.Run("ListSessions", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := st.ListSessions(takeOverAdmin, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SessionOwners", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := st.SessionOwners(takeOverAdmin); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("addAll", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			newSessionOwners().addAll(list)
		}
	})
	b.Run("Start", func(b *testing.B) {
		cfg := takeOverDeps(st).sessions
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			mgr, err := session.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := mgr.Start(true, ids); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			mgr.Stop()
			b.StartTimer()
		}
	})
}
