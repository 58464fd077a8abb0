package cell_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/transport"
)

// TestKeepAliveStream: one stream carries the KeepAlives of two sessions
// and answers each by its Call; a KeepAlive for another principal's
// session gets its own error reply and the stream carries on; a malformed
// frame ends the stream with a ReplyError frame (invariant 6: a clear
// error, nothing changed).
func TestKeepAliveStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, ctx, a, a2, b, s := kaStreamSetup(t)
		send := func(call uint64, h api.Header) {
			t.Helper()
			req := &api.KeepAliveStreamRequest{Call: call, KeepAlive: api.KeepAliveRequest{Header: h}}
			if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveStream), req); err != nil {
				t.Fatal(err)
			}
		}
		recv := func() api.KeepAliveStreamReply {
			t.Helper()
			f, err := s.ReadFrame(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var r api.KeepAliveStreamReply
			if f.Tag != api.ReplyOK {
				t.Fatalf("reply tag %#x", f.Tag)
			}
			if err := f.Decode(&r); err != nil {
				t.Fatal(err)
			}
			return r
		}
		send(1, a.header())
		send(2, a2.header())
		send(3, b.header()) // bob's session, on alice's connection
		got := map[uint64]api.KeepAliveStreamReply{}
		for range 3 {
			r := recv()
			got[r.Call] = r
		}
		for _, call := range []uint64{1, 2} {
			r := got[call]
			if r.Err != nil || r.KeepAlive == nil || r.KeepAlive.LeaseTimeout <= 0 || r.KeepAlive.Epoch == 0 {
				t.Fatalf("call %d: %+v", call, r)
			}
		}
		if r := got[3]; r.KeepAlive != nil || !errors.Is(r.Err, api.ErrPermissionDenied) {
			t.Fatalf("another principal's session: %+v, want PermissionDenied", r)
		}
		// The stream carries on after a refused KeepAlive.
		send(4, a.header())
		if r := recv(); r.Call != 4 || r.KeepAlive == nil {
			t.Fatalf("after a refusal: %+v", r)
		}
		// A malformed frame ends the stream with an error frame.
		if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveStream), "not a request"); err != nil {
			t.Fatal(err)
		}
		f, err := s.ReadFrame(ctx)
		if err != nil || f.Tag != api.ReplyError {
			t.Fatalf("malformed frame: %v tag %#x, want a ReplyError frame", err, f.Tag)
		}
		var ae api.Error
		if err := f.Decode(&ae); err != nil || ae.Code != api.InvalidArgument {
			t.Fatalf("malformed frame: %+v %v", ae, err)
		}
		if _, err := s.ReadFrame(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("after the error frame: %v, want EOF", err)
		}
	})
}

// TestKeepAliveBatchFrames: one batch frame carries the KeepAlives of two
// sessions and of another principal's session; the reply frame answers
// every entry by its Call, the refused one with its own error, and the
// stream carries on, also with a per-session frame; the replica counts one
// frame per batch.
func TestKeepAliveBatchFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc, ctx, a, a2, b, s := kaStreamSetup(t)
		master, err := lc.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := master.Status().KeepAliveFrames
		req := &api.KeepAliveBatchRequest{KeepAlives: []api.KeepAliveStreamRequest{
			{Call: 1, KeepAlive: api.KeepAliveRequest{Header: a.header()}},
			{Call: 2, KeepAlive: api.KeepAliveRequest{Header: a2.header()}},
			{Call: 3, KeepAlive: api.KeepAliveRequest{Header: b.header()}}, // bob's session
		}}
		if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveBatch), req); err != nil {
			t.Fatal(err)
		}
		f, err := s.ReadFrame(ctx)
		if err != nil || f.Tag != api.ReplyOK {
			t.Fatalf("batch reply: %v tag %#x", err, f.Tag)
		}
		var r api.KeepAliveBatchReply
		if err := f.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got := map[uint64]api.KeepAliveStreamReply{}
		for _, e := range r.Replies {
			got[e.Call] = e
		}
		if len(got) != 3 {
			t.Fatalf("batch reply answers %d entries, want 3: %+v", len(got), r)
		}
		for _, call := range []uint64{1, 2} {
			if e := got[call]; e.Err != nil || e.KeepAlive == nil || e.KeepAlive.LeaseTimeout <= 0 || e.KeepAlive.Epoch == 0 {
				t.Fatalf("call %d: %+v", call, e)
			}
		}
		if e := got[3]; e.KeepAlive != nil || !errors.Is(e.Err, api.ErrPermissionDenied) {
			t.Fatalf("another principal's session: %+v, want PermissionDenied", e)
		}
		if n := master.Status().KeepAliveFrames - before; n != 1 {
			t.Fatalf("the master counted %d KeepAlive frames for one batch", n)
		}
		// A per-session frame on the same stream is answered as such.
		if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveStream), &api.KeepAliveStreamRequest{Call: 4, KeepAlive: api.KeepAliveRequest{Header: a.header()}}); err != nil {
			t.Fatal(err)
		}
		if f, err = s.ReadFrame(ctx); err != nil || f.Tag != api.ReplyOK {
			t.Fatalf("per-session reply: %v tag %#x", err, f.Tag)
		}
		var one api.KeepAliveStreamReply
		if err := f.Decode(&one); err != nil || one.Call != 4 || one.KeepAlive == nil {
			t.Fatalf("per-session reply on a batch stream: %+v %v", one, err)
		}
		// A malformed batch frame ends the stream with an error frame naming
		// the method.
		if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveBatch), "not a batch"); err != nil {
			t.Fatal(err)
		}
		if f, err = s.ReadFrame(ctx); err != nil || f.Tag != api.ReplyError {
			t.Fatalf("malformed batch frame: %v tag %#x, want a ReplyError frame", err, f.Tag)
		}
		var ae api.Error
		if err := f.Decode(&ae); err != nil || ae.Code != api.InvalidArgument || !strings.Contains(ae.Msg, "KeepAliveBatch") {
			t.Fatalf("malformed batch frame: %+v %v", ae, err)
		}
		if _, err := s.ReadFrame(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("after the error frame: %v, want EOF", err)
		}
	})
}

// kaStreamSetup starts a simulated cell with sessions of alice (two, a and
// a2) and bob (b), and opens a stream on a's connection for the KeepAlive
// stream tests.
func kaStreamSetup(t *testing.T) (lc *celltest.Cell, ctx context.Context, a, a2, b *testClient, s *transport.ClientStream) {
	t.Helper()
	lc = simCell(t, 3, nil)
	ctx = testCtx(t, 30*time.Second)
	a = newTestClient(t, lc, "t", "alice")
	a.createSession(ctx)
	a2 = newTestClient(t, lc, "t", "alice")
	a2.createSession(ctx)
	b = newTestClient(t, lc, "t", "bob")
	b.createSession(ctx)
	s, err := a.conn.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return lc, ctx, a, a2, b, s
}
