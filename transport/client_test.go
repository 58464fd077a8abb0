package transport

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go"
)

// echoHandler answers every request frame with the same tag and body, and
// reports each stream's connection id and read error.
type echoHandler struct {
	mu      sync.Mutex
	connIDs []uint64
	errs    chan error
}

func (h *echoHandler) serve(ctx context.Context, s *ServerStream) {
	h.mu.Lock()
	h.connIDs = append(h.connIDs, s.ConnID())
	h.mu.Unlock()
	for {
		f, err := s.ReadFrame(ctx)
		if err != nil {
			if h.errs != nil && !errors.Is(err, io.EOF) {
				h.errs <- err
			}
			return
		}
		if err := s.WriteFrame(ctx, f.Tag, msgpackRaw(f.Body)); err != nil {
			return
		}
	}
}

func (s *sim) dialClient(ip string, mod func(*DialConfig)) *ClientConn {
	s.t.Helper()
	cfg := DialConfig{Addrs: []string{simAddr(1)}, CA: s.ca.Pool(), PacketConn: s.clientConn(ip), Logger: testLogger()}
	if mod != nil {
		mod(&cfg)
	}
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

func TestClientCallRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &echoHandler{}
		a := s.start(1, func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		c1 := s.dialClient("10.1.0.1", nil)
		defer c1.Close()
		c2 := s.dialClient("10.1.0.2", nil)
		defer c2.Close()
		for i, c := range []*ClientConn{c1, c1, c2} {
			f, err := c.Call(context.Background(), uint16(10+i), testMsg{Seq: i, Data: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			var got testMsg
			if err := f.Decode(&got); err != nil || f.Tag != uint16(10+i) || got.Seq != i {
				t.Fatalf("call %d: tag %d %+v %v", i, f.Tag, got, err)
			}
		}
		synctest.Wait()
		h.mu.Lock()
		ids := h.connIDs
		h.mu.Unlock()
		if len(ids) != 3 || ids[0] != ids[1] || ids[1] == ids[2] {
			t.Fatalf("conn ids %v: want two streams of one connection, then another", ids)
		}
		st := a.Stats()
		if st.ClientFramesReceived != 3 || st.ClientFramesSent != 3 || st.ClientConns != 2 || st.ClientStreams != 0 {
			t.Fatalf("stats %+v", st)
		}
		c2.Close()
		synctest.Wait()
		if n := a.Stats().ClientConns; n != 1 {
			t.Fatalf("ClientConns after a close = %d", n)
		}
		if _, err := c2.Call(context.Background(), 1, testMsg{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("call after close: %v", err)
		}
	})
}

// TestClientDialRotation: Dial skips an unreachable replica, without
// waiting out its handshake timeout (the next dial starts after the
// stagger), and honours Start.
func TestClientDialRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		h := &echoHandler{}
		s.start(2, func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		start := time.Now()
		c := s.dialClient("10.1.0.1", func(d *DialConfig) {
			d.Addrs = []string{simAddr(1), simAddr(2)}
			d.HandshakeTimeout = 500 * time.Millisecond
		})
		if c.ReplicaID() != 2 || c.Addr() != simAddr(2) {
			t.Fatalf("reached %d at %s", c.ReplicaID(), c.Addr())
		}
		if took := time.Since(start); took < 500*time.Millisecond/4 || took >= 500*time.Millisecond {
			t.Fatalf("took %v: want the dead replica tried first for the stagger (125ms), not its whole handshake timeout", took)
		}
		c.Close()
		start = time.Now()
		c = s.dialClient("10.1.0.1", func(d *DialConfig) {
			d.Addrs = []string{simAddr(1), simAddr(2)}
			d.Start = 1
		})
		if took := time.Since(start); took >= DialStagger || c.ReplicaID() != 2 {
			t.Fatalf("Start=1 did not go to replica 2 first (took %v)", took)
		}
		c.Close()
	})
}

// TestClientLongPoll: a handler answers one request with several frames
// over time on the same stream.
func TestClientLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		s.start(1, func(c *Config) {
			c.ClientHandler = func(ctx context.Context, st *ServerStream) {
				var req testMsg
				f, err := st.ReadFrame(ctx)
				if err != nil || f.Decode(&req) != nil {
					return
				}
				for i := range req.Seq {
					time.Sleep(5 * time.Second) // longer than keep-alive periods, shorter than a lease
					if st.WriteFrame(ctx, 2, testMsg{Seq: i}) != nil {
						return
					}
				}
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
		if err := st.WriteFrame(ctx, 1, testMsg{Seq: 3}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			f, err := st.ReadFrame(ctx)
			var m testMsg
			if err != nil || f.Decode(&m) != nil || m.Seq != i {
				t.Fatalf("event %d: %+v %v", i, m, err)
			}
		}
		if _, err := st.ReadFrame(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last event: %v", err)
		}
		st.Close()
	})
}

// TestClientContextCancel: canceling a call resets its stream (the handler
// sees it) and leaves the connection usable.
func TestClientContextCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		handlerErr := make(chan error, 1)
		s.start(1, func(c *Config) {
			c.ClientHandler = func(ctx context.Context, st *ServerStream) {
				f, err := st.ReadFrame(ctx)
				if err != nil {
					return
				}
				if f.Tag == 1 { // a long-poll with no news: wait until the client gives up
					<-ctx.Done()
					handlerErr <- st.WriteFrame(context.Background(), 1, testMsg{})
					return
				}
				st.WriteFrame(ctx, f.Tag, msgpackRaw(f.Body))
			}
		})
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := c.Call(ctx, 1, testMsg{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("canceled call: %v", err)
		}
		err := within(t, handlerErr, time.Minute)
		var se *quic.StreamError
		if !errors.Is(err, ErrStreamCanceled) || !errors.As(err, &se) || se.ErrorCode != StreamCodeCanceled {
			t.Fatalf("handler's write after the cancel: %v, want ErrStreamCanceled with StreamCodeCanceled", err)
		}
		if _, err := c.Call(context.Background(), 2, testMsg{}); err != nil {
			t.Fatalf("call after a canceled one: %v", err)
		}
		if err := c.Context().Err(); err != nil {
			t.Fatalf("connection harmed: %v", err)
		}
	})
}

// TestClientBadFrames: oversize, truncated and garbage frames reset only
// their own stream; a long-poll stream opened before, and calls made after,
// work on the same connection.
func TestClientBadFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		h := &echoHandler{errs: make(chan error, 10)}
		a := s.start(1, func(c *Config) {
			c.ClientHandler = h.serve
			c.MaxClientFrame = 4096
		})
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		ctx := context.Background()
		poll, err := c.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := poll.WriteFrame(ctx, 1, testMsg{Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := poll.ReadFrame(ctx); err != nil {
			t.Fatal(err)
		}
		oversize, _ := AppendFrame(nil, 1, testMsg{Data: make([]byte, 4097)}, 0)
		justFits, _ := AppendFrame(nil, 1, msgpackRaw(append([]byte{0xc5, 0x0f, 0xfd}, make([]byte, 4093)...)), 0)
		for _, tc := range []struct {
			name  string
			raw   []byte
			want  error
			close bool
		}{
			{"oversize", oversize, ErrFrameTooLarge, false},
			{"truncated", []byte{0, 0, 0, 50, 0, 1, 0x92, 1}, ErrTruncatedFrame, true},
			{"garbage", []byte{0, 0, 0, 3, 0, 1, 0x92, 1, 0xc1}, ErrMalformedFrame, false},
			{"trailing", []byte{0, 0, 0, 2, 0, 1, 1, 2}, ErrMalformedFrame, false},
			{"empty body", []byte{0, 0, 0, 0, 0, 1}, ErrMalformedFrame, false},
		} {
			st, err := c.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.writeRaw(ctx, tc.raw); err != nil {
				t.Fatal(tc.name, err)
			}
			if tc.close {
				st.CloseWrite()
			}
			if err := within(t, h.errs, time.Minute); !errors.Is(err, tc.want) {
				t.Fatalf("%s: handler got %v, want %v", tc.name, err, tc.want)
			}
			if _, err := st.ReadFrame(ctx); !errors.Is(err, ErrFrameRejected) {
				t.Fatalf("%s: client got %v, want ErrFrameRejected", tc.name, err)
			}
		}
		// A frame of exactly MaxClientFrame passes.
		st, _ := c.OpenStream(ctx)
		if err := st.writeRaw(ctx, justFits); err != nil {
			t.Fatal(err)
		}
		if f, err := st.ReadFrame(ctx); err != nil || len(f.Body) != 4096 {
			t.Fatalf("frame at the limit: %d bytes, %v", len(f.Body), err)
		}
		// The long-poll opened before still works, and so do new calls.
		if err := poll.WriteFrame(ctx, 1, testMsg{Seq: 2}); err != nil {
			t.Fatal(err)
		}
		var m testMsg
		if f, err := poll.ReadFrame(ctx); err != nil || f.Decode(&m) != nil || m.Seq != 2 {
			t.Fatalf("long-poll after bad frames: %+v %v", m, err)
		}
		if _, err := c.Call(ctx, 3, testMsg{}); err != nil {
			t.Fatal(err)
		}
		if n := a.Stats().BadFrames; n != 5 {
			t.Fatalf("BadFrames = %d", n)
		}
	})
}

// TestClientStreamLimit: with MaxStreamsPerClient 2, a third stream waits
// until one of the first two ends.
func TestClientStreamLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		release := make(chan struct{})
		s.start(1, func(c *Config) {
			c.MaxStreamsPerClient = 2
			c.ClientHandler = func(ctx context.Context, st *ServerStream) {
				if _, err := st.ReadFrame(ctx); err != nil {
					return
				}
				select {
				case <-release:
				case <-ctx.Done():
				}
				st.WriteFrame(ctx, 1, testMsg{})
			}
		})
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		ctx := context.Background()
		var held []*ClientStream
		for range 2 {
			st, err := c.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st.WriteFrame(ctx, 1, testMsg{})
			held = append(held, st)
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := c.OpenStream(short); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrStreamLimit) {
			t.Fatalf("third stream: %v, want to wait and then ErrStreamLimit", err)
		}
		close(release)
		for _, st := range held {
			if _, err := st.ReadFrame(ctx); err != nil {
				t.Fatal(err)
			}
			st.Close()
		}
		if _, err := c.Call(ctx, 1, testMsg{}); err != nil {
			t.Fatalf("after the limit freed: %v", err)
		}
	})
}

// TestConnLimitPerIP: MaxConnsPerIP closes the connection over the limit
// from one IP with ErrTooManyConns naming the limit, not those from
// others, and frees a slot when a connection closes; replicas, known by
// address, are exempt although here they all share one IP with the
// clients.
func TestConnLimitPerIP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2, 3)
		s.sameIP = true
		h := &echoHandler{}
		for _, id := range s.ids {
			s.start(id, func(c *Config) {
				c.MaxConnsPerIP = 1
				c.ClientHandler = h.serve
			})
		}
		dial := func(ip string) (*ClientConn, error) {
			return Dial(context.Background(), DialConfig{Addrs: []string{s.addr(1)}, CA: s.ca.Pool(), PacketConn: s.clientConn(ip), HandshakeTimeout: time.Second, Logger: testLogger()})
		}
		// Peers connect to each other: 2 connections per replica from 10.0.0.1.
		for _, from := range s.ids {
			for _, to := range s.ids {
				if from != to {
					_ = s.eps[from].Send(to, 1, testMsg{})
				}
			}
		}
		for _, id := range s.ids {
			recvOne(t, s.eps[id], 5*time.Second)
			recvOne(t, s.eps[id], 5*time.Second)
		}
		c1, err := dial("10.0.0.1")
		if err != nil {
			t.Fatalf("first client from the replicas' IP: %v", err)
		}
		over, err := dial("10.0.0.1")
		if err != nil {
			t.Fatalf("second connection from one IP: the handshake should complete, then close: %v", err)
		}
		_, err = over.Call(context.Background(), 1, testMsg{})
		if !errors.Is(err, ErrTooManyConns) || !errors.Is(err, ErrConnClosed) || !strings.Contains(err.Error(), "max_conns_per_ip") {
			t.Fatalf("call on the connection over the limit: %v, want ErrTooManyConns naming max_conns_per_ip", err)
		}
		over.Close()
		if n := s.eps[1].Stats().RefusedConnLimit; n == 0 {
			t.Fatalf("RefusedConnLimit = %d", n)
		}
		c2, err := dial("10.1.0.2")
		if err != nil {
			t.Fatalf("client from another IP: %v", err)
		}
		defer c2.Close()
		c1.Close()
		time.Sleep(time.Second) // the server notices the close
		c3, err := dial("10.0.0.1")
		if err != nil {
			t.Fatalf("after a close freed the slot: %v", err)
		}
		c3.Close()
	})
}

// TestClientsCut: cutting a replica's clients makes it unreachable for
// them, silently, while its peer links work; restoring brings them back.
func TestClientsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1, 2)
		h := &echoHandler{}
		s.startAll(func(c *Config) { c.ClientHandler = h.serve })
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		if _, err := c.Call(context.Background(), 1, testMsg{}); err != nil {
			t.Fatal(err)
		}
		s.faults.CutClients(1, true)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if _, err := c.Call(ctx, 1, testMsg{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call through a cut: %v", err)
		}
		cancel()
		select {
		case <-c.Context().Done():
		case <-time.After(2 * DefaultClientIdleTimeout):
			t.Fatal("client connection survived the cut past its idle timeout")
		}
		if !errors.Is(c.Context().Err(), context.Canceled) {
			t.Fatalf("conn ctx: %v", c.Context().Err())
		}
		c.Close()
		_ = s.eps[1].Send(2, 1, testMsg{})
		recvOne(t, s.eps[2], 5*time.Second)
		if s.eps[1].Stats().DropsClientCut == 0 {
			t.Fatal("no DropsClientCut counted")
		}
		s.faults.CutClients(1, false)
		c = s.dialClient("10.1.0.1", nil)
		defer c.Close()
		if _, err := c.Call(context.Background(), 1, testMsg{}); err != nil {
			t.Fatal(err)
		}
	})
}
