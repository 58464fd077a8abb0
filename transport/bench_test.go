package transport

import (
	"context"
	"testing"
	"time"
)

// oneShotHandler serves a stream as a replica serves an RPC: it reads one
// request frame, answers it with the same tag and body, and returns.
func oneShotHandler(ctx context.Context, s *ServerStream) {
	f, err := s.ReadFrame(ctx)
	if err != nil {
		return
	}
	_ = s.WriteFrame(ctx, f.Tag, msgpackRaw(f.Body))
}

// BenchmarkRPC: one RPC as the cell serves it — Call opens a stream, sends
// the request and its end; the endpoint's handler reads that one frame,
// answers and returns — over real QUIC and TLS on loopback UDP, one call at
// a time. It measures the transport's own CPU per RPC, both ends together
// (run it under callgrind for instruction counts: bench/RESULTS.md).
func BenchmarkRPC(b *testing.B) {
	ca, a, _ := loopbackPair(b, oneShotHandler)
	ctx := context.Background()
	// A generous handshake timeout: under callgrind on a loaded machine
	// the handshake runs 50-100 times slower than native.
	c, err := Dial(ctx, DialConfig{Addrs: []string{a.Addr().String()}, CA: ca.Pool(), Logger: testLogger(), HandshakeTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := testMsg{Seq: 1, Data: []byte("a lock request of about sixty bytes, as an Acquire is")}
	if _, err := c.Call(ctx, 7, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f, err := c.Call(ctx, 7, req)
		if err != nil {
			b.Fatal(err)
		}
		if f.Tag != 7 {
			b.Fatalf("reply tag %d", f.Tag)
		}
	}
}
