package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go"
)

// silentHandler reads a stream's frames and answers none; when a read
// fails other than by its context, it reports the error on errs.
func silentHandler(errs chan<- error) func(context.Context, *ServerStream) {
	return func(ctx context.Context, s *ServerStream) {
		for {
			if _, err := s.ReadFrame(ctx); err != nil {
				errs <- err
				return
			}
		}
	}
}

// TestStreamContextEndsBlockedRead: a context that ends while ReadFrame
// waits for a reply that never comes ends the read at once (canceled) or
// at the deadline, with the context's error, resets the stream so the
// replica's side sees StreamCodeCanceled, and leaves the connection
// usable. The read's context is the stream's home context (the one its
// write used) or another one; the waiting read must be durably blocked
// (synctest.Wait returns while it waits).
func TestStreamContextEndsBlockedRead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		home     bool // the read uses the write's context
		deadline bool // the context ends by its deadline, not a cancel
	}{
		{"home/cancel", true, false},
		{"home/deadline", true, true},
		{"own/cancel", false, false},
		{"own/deadline", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, 1)
				handlerErrs := make(chan error, 4)
				h := &echoHandler{}
				s.start(1, func(c *Config) {
					c.ClientHandler = func(ctx context.Context, st *ServerStream) {
						if st.StreamID() == 0 {
							silentHandler(handlerErrs)(ctx, st)
							return
						}
						h.serve(ctx, st)
					}
				})
				defer s.closeAll()
				c := s.dialClient("10.1.0.1", nil)
				defer c.Close()

				const wait = 3 * time.Second
				mk := func() (context.Context, context.CancelFunc) {
					if tc.deadline {
						return context.WithTimeout(context.Background(), wait)
					}
					return context.WithCancel(context.Background())
				}
				wctx, wcancel := mk()
				defer wcancel()
				rctx, rcancel := wctx, wcancel
				if !tc.home {
					rctx, rcancel = mk()
					defer rcancel()
				}
				st, err := c.OpenStream(wctx)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if err := st.WriteFrame(wctx, 1, testMsg{Seq: 1}); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				type result struct {
					err error
					at  time.Duration
				}
				done := make(chan result, 1)
				go func() {
					_, err := st.ReadFrame(rctx)
					done <- result{err, time.Since(start)}
				}()
				synctest.Wait() // the read is durably blocked
				select {
				case r := <-done:
					t.Fatalf("read returned before its context ended: %v", r.err)
				default:
				}
				want := context.Canceled
				if tc.deadline {
					want = context.DeadlineExceeded
					time.Sleep(wait - time.Millisecond)
					synctest.Wait()
					select {
					case r := <-done:
						t.Fatalf("read returned %v before the deadline", r.err)
					default:
					}
				} else {
					time.Sleep(time.Second)
					rcancel()
				}
				r := within(t, done, wait)
				if !errors.Is(r.err, want) {
					t.Fatalf("read error %v, want %v", r.err, want)
				}
				if !tc.deadline && r.at != time.Second {
					t.Fatalf("read returned %v after it began, want 1s (at the cancel)", r.at)
				}
				if tc.deadline && r.at != wait {
					t.Fatalf("read returned %v after it began, want %v (at the deadline)", r.at, wait)
				}
				// The reset reaches the replica as RESET_STREAM, failing its
				// read, and as STOP_SENDING, ending its handler's context,
				// whichever it handles first.
				herr := within(t, handlerErrs, time.Minute)
				var se *quic.StreamError
				if !errors.Is(herr, context.Canceled) && (!errors.Is(herr, ErrStreamCanceled) || !errors.As(herr, &se) || se.ErrorCode != StreamCodeCanceled) {
					t.Fatalf("replica's read after the reset: %v, want ErrStreamCanceled with StreamCodeCanceled, or context.Canceled", herr)
				}
				if _, err := c.Call(context.Background(), 2, testMsg{Seq: 2}); err != nil {
					t.Fatalf("call after the reset: %v", err)
				}
			})
		})
	}
}

// TestStreamContextEndsBlockedWrite: a write blocked on flow control (the
// replica reads nothing) ends when its context does, with the context's
// error.
func TestStreamContextEndsBlockedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		s.start(1, func(c *Config) {
			c.ClientHandler = func(ctx context.Context, st *ServerStream) { <-ctx.Done() }
		})
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		big := testMsg{Data: make([]byte, 512<<10)}
		start := time.Now()
		type result struct {
			err error
			at  time.Duration
		}
		done := make(chan result, 1)
		go func() {
			var err error
			for range 64 { // 32 MiB, far beyond any stream window
				if err = st.WriteFrame(ctx, 1, big); err != nil {
					break
				}
			}
			done <- result{err, time.Since(start)}
		}()
		// A write the context does not reach blocks until Close: fail
		// first, so that a broken cancel fails the test, not hangs it.
		r := within(t, done, 10*time.Second)
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("blocked write: %v, want DeadlineExceeded", r.err)
		}
		if r.at != 5*time.Second {
			t.Fatalf("blocked write ended after %v, want 5s", r.at)
		}
	})
}

// TestStreamHomeContextEndsBetweenReads: a stream's home context (the
// first its reads and writes used) ending while nothing is in flight does
// not reset the stream; reads and writes under another context go on.
func TestStreamHomeContextEndsBetweenReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &echoHandler{}
		s.start(1, func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		home, cancel := context.WithCancel(context.Background())
		st, err := c.OpenStream(home)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.WriteFrame(home, 1, testMsg{Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.ReadFrame(home); err != nil {
			t.Fatal(err)
		}
		cancel()
		synctest.Wait()
		bg := context.Background()
		if err := st.WriteFrame(bg, 2, testMsg{Seq: 2}); err != nil {
			t.Fatalf("write after the home context ended: %v", err)
		}
		f, err := st.ReadFrame(bg)
		var m testMsg
		if err != nil || f.Decode(&m) != nil || m.Seq != 2 {
			t.Fatalf("read after the home context ended: %+v %v", m, err)
		}
		// The ended home context still fails its own reads, and resets.
		if _, err := st.ReadFrame(home); !errors.Is(err, context.Canceled) {
			t.Fatalf("read under the ended home context: %v", err)
		}
	})
}

// TestServerReadEndsWhenClientStopsReading: a handler blocked reading its
// stream learns at once that the client gave up, when the client stops
// reading (STOP_SENDING) without finishing or resetting its own sending
// side: the read returns the handler context's error.
func TestServerReadEndsWhenClientStopsReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		errs := make(chan error, 1)
		s.start(1, func(c *Config) {
			c.ClientHandler = func(ctx context.Context, st *ServerStream) {
				if _, err := st.ReadFrame(ctx); err != nil {
					errs <- fmt.Errorf("first read: %w", err)
					return
				}
				_, err := st.ReadFrame(ctx) // nothing more comes
				errs <- err
			}
		})
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		ctx := context.Background()
		st, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.WriteFrame(ctx, 1, testMsg{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-errs:
			t.Fatalf("handler's read returned early: %v", err)
		default:
		}
		st.qs.CancelRead(StreamCodeCanceled)
		if err := within(t, errs, time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's read: %v, want context.Canceled", err)
		}
	})
}

// TestConcurrentCallsKeepTheirFrames: concurrent calls on one connection,
// small and larger than a pooled frame buffer, each get their own request
// echoed back intact (frame buffers are reused only once quic-go has
// copied them).
func TestConcurrentCallsKeepTheirFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &echoHandler{}
		s.start(1, func(c *Config) { c.ClientHandler = h.serve; c.MaxStreamsPerClient = 64 })
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		var wg sync.WaitGroup
		var mu sync.Mutex
		checked := 0
		for g := range 16 {
			wg.Go(func() {
				for i := range 20 {
					n := 40 + (g*20+i)%7*100
					if i%5 == 4 {
						n = maxPooledFrameBuf + 1000
					}
					data := bytes.Repeat([]byte{byte(g), byte(i)}, n/2)
					ctx := context.Background()
					if i%2 == 1 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, time.Minute)
						defer cancel()
					}
					f, err := c.Call(ctx, uint16(g), testMsg{Seq: i, Data: data})
					var m testMsg
					if err != nil || f.Decode(&m) != nil || m.Seq != i || f.Tag != uint16(g) || !bytes.Equal(m.Data, data) {
						t.Errorf("caller %d call %d: reply corrupted or failed: %v", g, i, err)
						return
					}
					mu.Lock()
					checked++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if checked != 16*20 {
			t.Fatalf("%d calls checked, want %d", checked, 16*20)
		}
	})
}

// TestFrameBufPoolCap: a buffer grown past maxPooledFrameBuf is not kept,
// so one large frame does not pin its size in the pool.
func TestFrameBufPoolCap(t *testing.T) {
	big := getFrameBuf()
	big.b = append(big.b, make([]byte, 4*maxPooledFrameBuf)...)
	putFrameBuf(big)
	for range 4 {
		fb := getFrameBuf()
		if cap(fb.b) > maxPooledFrameBuf {
			t.Fatalf("pool returned a %d-byte buffer, over the %d-byte cap", cap(fb.b), maxPooledFrameBuf)
		}
		if len(fb.b) != 0 {
			t.Fatalf("pool returned a buffer holding %d bytes", len(fb.b))
		}
		defer putFrameBuf(fb)
	}
}
