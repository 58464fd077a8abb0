package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
)

// loopbackPair starts two replica endpoints on real loopback UDP sockets.
// handler, if set, serves clients on replica 1.
func loopbackPair(tb testing.TB, handler func(context.Context, *ServerStream)) (*certs.CA, *Endpoint, *Endpoint) {
	tb.Helper()
	ca, err := certs.NewCA("loopback", certs.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	var pcs [2]net.PacketConn
	peers := map[uint64]string{}
	for i := range pcs {
		if pcs[i], err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			tb.Fatal(err)
		}
		peers[uint64(i+1)] = pcs[i].LocalAddr().String()
	}
	var eps [2]*Endpoint
	for i := range eps {
		id := uint64(i + 1)
		cert, err := ca.IssueReplica(id, certs.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		cfg := Config{ID: id, PacketConn: pcs[i], Peers: peers, CA: ca.Pool(), Certificate: cert, Logger: testLogger(), PeerQueueLen: 8192, RecvQueueLen: 8192}
		if id == 1 {
			cfg.ClientHandler = handler
			cfg.MaxStreamsPerClient = 64
		}
		if eps[i], err = Listen(context.Background(), cfg); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { eps[i].Close() })
	}
	return ca, eps[0], eps[1]
}

func echo(ctx context.Context, s *ServerStream) {
	for {
		f, err := s.ReadFrame(ctx)
		if err != nil {
			return
		}
		if s.WriteFrame(ctx, f.Tag, msgpackRaw(f.Body)) != nil {
			return
		}
	}
}

// TestLoopbackUDP runs the peer and client paths over the operating
// system's loopback, with real time (bounded waits).
func TestLoopbackUDP(t *testing.T) {
	ca, a, b := loopbackPair(t, echo)
	for i := range 100 {
		if err := a.Send(2, 1, testMsg{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		var m testMsg
		if err := recvOne(t, b, 10*time.Second).Decode(&m); err != nil || m.Seq != i {
			t.Fatalf("seq %d: %+v %v", i, m, err)
		}
	}
	_ = b.Send(1, 2, testMsg{Seq: 7})
	if m := recvOne(t, a, 10*time.Second); m.From != 2 {
		t.Fatalf("from %d", m.From)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cert, err := ca.IssueClient(certs.ClientID{Tenant: "t", Principal: "p"}, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, DialConfig{Addrs: []string{a.Addr().String()}, CA: ca.Pool(), Certificate: &cert, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.Call(ctx, 5, testMsg{Seq: 9, Data: make([]byte, 100000)})
	var m testMsg
	if err != nil || f.Decode(&m) != nil || m.Seq != 9 || len(m.Data) != 100000 {
		t.Fatalf("call: %v", err)
	}
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds msgs/s and CPU per message (both ends, the whole process).
func report(b *testing.B, start time.Time, cpu0 time.Duration) {
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}

// BenchmarkPeerThroughput: one-way peer messages over loopback UDP, with
// 1 or 16 goroutines calling Send (the mesh has one stream per peer, so 16
// senders share it), at most 1024 in flight so nothing is dropped.
func BenchmarkPeerThroughput(b *testing.B) {
	for _, size := range []int{64, 4096} {
		for _, senders := range []int{1, 16} {
			b.Run(fmt.Sprintf("size=%d/senders=%d", size, senders), func(b *testing.B) {
				_, a, r := loopbackPair(b, nil)
				window := make(chan struct{}, 1024)
				var got atomic.Int64
				done := make(chan struct{})
				go func() {
					for range r.Recv() {
						<-window
						if got.Add(1) == int64(b.N)+1 { // +1: the warm-up message
							close(done)
						}
					}
				}()
				msg := testMsg{Data: make([]byte, size)}
				// Warm up the connection.
				window <- struct{}{}
				_ = a.Send(2, 1, msg)
				for got.Load() == 0 {
					time.Sleep(time.Millisecond)
				}
				b.ResetTimer()
				start, cpu0 := time.Now(), cpuTime()
				var wg sync.WaitGroup
				for s := range senders {
					n := b.N / senders
					if s < b.N%senders {
						n++
					}
					wg.Go(func() {
						for range n {
							window <- struct{}{}
							if err := a.Send(2, 1, msg); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				select {
				case <-done:
				case <-time.After(time.Minute):
					b.Fatalf("received %d of %d", got.Load(), b.N)
				}
				report(b, start, cpu0)
				if d := a.Stats().DropsQueueFull; d != 0 {
					b.Fatalf("%d drops", d)
				}
			})
		}
	}
}

// BenchmarkPeerLatency: a peer message and its answer (ping-pong) over
// loopback UDP; ns/op is the round trip.
func BenchmarkPeerLatency(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			_, a, r := loopbackPair(b, nil)
			go func() {
				for m := range r.Recv() {
					_ = r.Send(1, m.Tag, msgpackRaw(m.Body))
				}
			}()
			msg := testMsg{Data: make([]byte, size)}
			_ = a.Send(2, 1, msg)
			<-a.Recv()
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime()
			for range b.N {
				_ = a.Send(2, 1, msg)
				if _, ok := <-a.Recv(); !ok {
					b.Fatal("closed")
				}
			}
			report(b, start, cpu0)
		})
	}
}

// BenchmarkClientCall: request/response Calls (one stream each) over
// loopback UDP with 1 or 16 concurrent streams on one connection; with 1,
// ns/op is the round-trip latency.
func BenchmarkClientCall(b *testing.B) {
	for _, size := range []int{64, 4096} {
		for _, streams := range []int{1, 16} {
			b.Run(fmt.Sprintf("size=%d/streams=%d", size, streams), func(b *testing.B) {
				ca, a, _ := loopbackPair(b, echo)
				ctx := context.Background()
				c, err := Dial(ctx, DialConfig{Addrs: []string{a.Addr().String()}, CA: ca.Pool(), Logger: testLogger()})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				msg := testMsg{Data: make([]byte, size)}
				if _, err := c.Call(ctx, 1, msg); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				start, cpu0 := time.Now(), cpuTime()
				var wg sync.WaitGroup
				for s := range streams {
					n := b.N / streams
					if s < b.N%streams {
						n++
					}
					wg.Go(func() {
						for range n {
							if _, err := c.Call(ctx, 1, msg); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				report(b, start, cpu0)
			})
		}
	}
}

// TestDialLocalAddr: DialConfig.LocalAddr binds the client's socket to the
// given loopback IP, and the replica sees the connection come from it, so
// one machine can stand in for many client hosts.
func TestDialLocalAddr(t *testing.T) {
	remotes := make(chan net.Addr, 2)
	ca, a, _ := loopbackPair(t, func(ctx context.Context, s *ServerStream) {
		remotes <- s.RemoteAddr()
		echo(ctx, s)
	})
	for _, ip := range []string{"127.0.0.2", "127.0.0.3:0"} {
		c, err := Dial(context.Background(), DialConfig{Addrs: []string{a.Addr().String()}, CA: ca.Pool(), LocalAddr: ip, Logger: testLogger()})
		if err != nil {
			t.Fatalf("LocalAddr %s: %v", ip, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := c.Call(ctx, 1, testMsg{}); err != nil {
			t.Fatal(err)
		}
		cancel()
		want, _, _ := strings.Cut(ip, ":")
		got := (<-remotes).(*net.UDPAddr).IP.String()
		if got != want || c.LocalAddr().(*net.UDPAddr).IP.String() != want {
			t.Fatalf("LocalAddr %s: replica saw %s, local %s", ip, got, c.LocalAddr())
		}
		c.Close()
	}
	if _, err := Dial(context.Background(), DialConfig{Addrs: []string{a.Addr().String()}, CA: ca.Pool(), LocalAddr: "not-an-ip"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("bad LocalAddr: %v, want ErrInvalidConfig", err)
	}
}
