package namespace

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

var (
	admin = Caller{Principal: "admin"}
	alice = Caller{Tenant: "a", Principal: "alice"}
	bob   = Caller{Tenant: "a", Principal: "bob"}
	carol = Caller{Tenant: "b", Principal: "carol"}
)

// quietLogger drops Pebble's informational logging.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic("pebble fatal: " + format)
}

func memDB(t testing.TB, fs vfs.FS) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// env is a Store on an in-memory Pebble with a slot counter and a clock for
// stamping commands.
type env struct {
	t    testing.TB
	db   *pebble.DB
	s    *Store
	slot uint64
	now  int64
	fs   vfs.FS
	cfg  Config
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	fs := vfs.NewMem()
	e := &env{t: t, fs: fs, cfg: cfg, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
	e.db = memDB(t, fs)
	s, err := Open(e.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	t.Cleanup(e.close)
	return e
}

// close closes the env's DB; later calls do nothing.
func (e *env) close() {
	if e.db != nil {
		_ = e.db.Close()
		e.db = nil
	}
}

func encode(t testing.TB, c Command) []byte {
	t.Helper()
	b, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyAs applies one command in its own slot and returns its result.
func (e *env) applyAs(c Caller, op Op) Result {
	e.t.Helper()
	rs := e.applySlot(Command{Time: e.now, Caller: c, Op: op})
	return rs[0]
}

func (e *env) applySlot(cmds ...Command) []Result {
	e.t.Helper()
	raw := make([][]byte, len(cmds))
	for i, c := range cmds {
		raw[i] = encode(e.t, c)
	}
	e.slot++
	rs, err := e.s.ApplySlot(e.slot, raw)
	if err != nil {
		e.t.Fatalf("slot %d: %v", e.slot, err)
	}
	return rs
}

// ok applies op and fails the test unless it succeeds; it returns the reply.
func (e *env) ok(c Caller, op Op) Reply {
	e.t.Helper()
	r := e.applyAs(c, op)
	if r.Err != nil {
		e.t.Fatalf("%s by %v: %v", op.Kind(), c, r.Err)
	}
	return r.Reply
}

// fails applies op and checks it fails with want, and changed nothing.
func (e *env) fails(c Caller, op Op, want api.Code) *api.Error {
	e.t.Helper()
	before := e.s.Checksum()
	r := e.applyAs(c, op)
	if r.Err == nil {
		e.t.Fatalf("%s by %v: succeeded, want %v", op.Kind(), c, want)
	}
	if r.Err.Code != want {
		e.t.Fatalf("%s by %v: %v, want code %v", op.Kind(), c, r.Err, want)
	}
	if after := e.s.Checksum(); after != before {
		e.t.Fatalf("%s failed but changed the state checksum", op.Kind())
	}
	if r.Reply != nil || r.Changes != nil || r.Freed != nil {
		e.t.Fatalf("%s failed but reported effects: %+v", op.Kind(), r)
	}
	return r.Err
}

func (e *env) tenant(name string, q api.TenantQuota) {
	e.t.Helper()
	e.ok(admin, &CreateTenant{Name: name, Quota: q})
}

func (e *env) session(c Caller) uint64 {
	e.t.Helper()
	return e.ok(c, &CreateSession{}).(*SessionCreated).Session
}

func (e *env) create(c Caller, sid uint64, path string, dir bool, contents string) api.NodeStat {
	e.t.Helper()
	r := e.ok(c, &OpenNode{Session: sid, Path: path, Create: true, Exclusive: true, Dir: dir, Contents: []byte(contents)}).(*Opened)
	if !r.Created {
		e.t.Fatalf("create %s: not created", path)
	}
	return r.Stat
}

func isCode(err error, c api.Code) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == c
}

func seqOf(g *Granted) sequencer.Sequencer {
	return sequencer.Sequencer{Cell: "test", Tenant: g.Tenant, Path: g.Path, Mode: sequencer.Mode(g.Mode), Generation: g.Generation, Instance: g.Instance}
}

func fmtAny(v any) string { return fmt.Sprintf("%v\n", v) }
