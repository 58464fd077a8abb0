package transport

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/transport/memnet"
)

// countingConn counts the datagrams a PacketConn sends.
type countingConn struct {
	net.PacketConn
	sent *atomic.Int64
}

func (c countingConn) WriteTo(p []byte, a net.Addr) (int, error) {
	c.sent.Add(1)
	return c.PacketConn.WriteTo(p, a)
}

// SetReadBuffer and SetWriteBuffer do nothing, as memnet's do, so quic-go
// does not warn that it cannot size the buffers.
func (c countingConn) SetReadBuffer(int) error { return nil }

func (c countingConn) SetWriteBuffer(int) error { return nil }

// unaryPair starts replica 1 serving clients with oneShotHandler and dials
// it, over loopback UDP or, with mem, a memnet network whose datagrams
// (both ways) are counted in sent.
func unaryPair(b *testing.B, mem bool, sent *atomic.Int64) *ClientConn {
	ca, err := certs.NewCA("unary", certs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var spc, cpc net.PacketConn
	if mem {
		n := &memnet.Network{}
		s, err := n.Listen("10.0.0.1:4000")
		if err != nil {
			b.Fatal(err)
		}
		c, err := n.Listen("10.1.0.1:5000")
		if err != nil {
			b.Fatal(err)
		}
		spc, cpc = countingConn{s, sent}, countingConn{c, sent}
	} else {
		if spc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
	}
	cert, err := ca.IssueReplica(1, certs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := Listen(context.Background(), Config{ID: 1, PacketConn: spc, Peers: map[uint64]string{1: spc.LocalAddr().String()},
		CA: ca.Pool(), Certificate: cert, Logger: testLogger(), ClientHandler: oneShotHandler, MaxStreamsPerClient: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	// A generous handshake timeout, for callgrind (see BenchmarkRPC).
	cfg := DialConfig{Addrs: []string{spc.LocalAddr().String()}, CA: ca.Pool(), Logger: testLogger(), HandshakeTimeout: time.Minute}
	if mem {
		cfg.PacketConn = cpc
	}
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkUnary: one unary RPC as the client library makes it — open a
// stream, write the request frame, finish the sending side, read the reply
// frame, close — served by a handler that reads one frame, answers and
// returns (as cell's serveStream does), one call at a time. net=udp runs
// real QUIC on loopback, net=mem on memnet; ctx=background passes a context
// that cannot be canceled, ctx=deadline one with a timeout, as clients do.
// allocs/op and B/op count both ends; on memnet pkts/op counts the
// datagrams of both ends. ns/op is wall-clock and means little on a shared
// machine: use callgrind (bench/RESULTS.md) for instructions.
func BenchmarkUnary(b *testing.B) {
	for _, nw := range []string{"udp", "mem"} {
		for _, cx := range []string{"background", "deadline"} {
			b.Run("net="+nw+"/ctx="+cx, func(b *testing.B) {
				var sent atomic.Int64
				c := unaryPair(b, nw == "mem", &sent)
				req := testMsg{Seq: 1, Data: []byte("a lock request of about sixty bytes, as an Acquire is")}
				call := func() {
					ctx := context.Background()
					if cx == "deadline" {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, time.Minute)
						defer cancel()
					}
					s, err := c.OpenStream(ctx)
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					if err := s.WriteFrame(ctx, 7, req); err != nil {
						b.Fatal(err)
					}
					_ = s.CloseWrite()
					f, err := s.ReadFrame(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if f.Tag != 7 {
						b.Fatalf("reply tag %d", f.Tag)
					}
				}
				call()
				b.ReportAllocs()
				sent.Store(0)
				b.ResetTimer()
				for range b.N {
					call()
				}
				b.StopTimer()
				if nw == "mem" {
					b.ReportMetric(float64(sent.Load())/float64(b.N), "pkts/op")
				}
			})
		}
	}
}
