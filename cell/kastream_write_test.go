package cell_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/watchdog"
)

// TestKeepAliveStreamWriterWaitsDurably: a KeepAlive stream whose client
// does not read has a large reply frame stuck in its write (QUIC flow
// control) when a second reply is due. The second writer must wait for
// its turn in a way testing/synctest counts as durably blocked, so the
// simulated clock still advances (as real time would): a writer parked on
// a sync.Mutex froze the whole bubble, which is how the client suite once
// hung until its timeout. Once the client reads, both replies arrive in
// order, each entry answered.
//
// A frozen bubble cannot fail the test from inside, so a real-time
// watchdog outside the bubble ends the process with a message naming the
// test, and every goroutine's stack, if the simulated second below takes
// more than two minutes of real time.
func TestKeepAliveStreamWriterWaitsDurably(t *testing.T) {
	defer watchdog.Start(t.Name(), 2*time.Minute, "a KeepAlive stream writer waits for its turn non-durably")()
	synctest.Test(t, func(t *testing.T) {
		_, ctx, _, _, b, s := kaStreamSetup(t)
		// Entries for bob's session on alice's stream are each refused
		// with an error, answered at once in one frame: enough of them
		// make a frame larger than QUIC's stream window (512 KiB), so
		// that its write waits for a reader.
		const big = 10000
		batch := func(n int, first uint64) *api.KeepAliveBatchRequest {
			req := &api.KeepAliveBatchRequest{}
			for i := range n {
				req.KeepAlives = append(req.KeepAlives, api.KeepAliveStreamRequest{Call: first + uint64(i), KeepAlive: api.KeepAliveRequest{Header: b.header()}})
			}
			return req
		}
		if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveBatch), batch(big, 1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the large reply's write is stuck
		if err := s.WriteFrame(ctx, uint16(api.MethodKeepAliveBatch), batch(1, big+1)); err != nil {
			t.Fatal(err)
		}
		// The second reply's writer now waits for the first. The clock
		// must still advance.
		time.Sleep(time.Second)

		answered := map[uint64]bool{}
		var sizes []int
		for len(answered) < big+1 {
			f, err := s.ReadFrame(ctx)
			if err != nil {
				t.Fatalf("after %d of %d replies: %v", len(answered), big+1, err)
			}
			var r api.KeepAliveBatchReply
			if f.Tag != api.ReplyOK {
				t.Fatalf("reply tag %#x", f.Tag)
			}
			if err := f.Decode(&r); err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(f.Body))
			for _, e := range r.Replies {
				if e.Err == nil || answered[e.Call] {
					t.Fatalf("call %d: %+v (answered before: %v)", e.Call, e, answered[e.Call])
				}
				answered[e.Call] = true
			}
		}
		// Floor: the first frame must really have been too large for the
		// stream window, or the second writer never had to wait.
		if len(sizes) != 2 || sizes[0] <= 512<<10 {
			t.Fatalf("reply frames of %v bytes: want two, the first over 512 KiB", sizes)
		}
		t.Logf("reply frames of %v bytes; %d entries answered", sizes, len(answered))
	})
}
