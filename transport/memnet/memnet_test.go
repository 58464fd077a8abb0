package memnet

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

func TestMemnet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n Network
		a, err := n.Listen("10.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := n.Listen("10.0.0.2:1")
		if _, err := n.Listen("10.0.0.1:1"); !errors.Is(err, ErrAddrInUse) {
			t.Fatalf("reuse: %v", err)
		}
		if _, err := n.Listen("nonsense"); err == nil {
			t.Fatal("bad address accepted")
		}
		if _, err := a.WriteTo([]byte("hi"), b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		k, from, err := b.ReadFrom(buf)
		if err != nil || string(buf[:k]) != "hi" || from.String() != "10.0.0.1:1" {
			t.Fatalf("%q from %v: %v", buf[:k], from, err)
		}
		// Deadlines: a blocked read times out at the deadline, a cleared
		// deadline blocks again, and a past deadline fails at once.
		start := time.Now()
		b.SetReadDeadline(start.Add(time.Second))
		if _, _, err := b.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("deadline: %v after %v", err, time.Since(start))
		}
		b.SetReadDeadline(time.Time{})
		go func() {
			time.Sleep(time.Minute)
			a.WriteTo([]byte("late"), b.LocalAddr())
		}()
		if k, _, err := b.ReadFrom(buf); err != nil || string(buf[:k]) != "late" {
			t.Fatalf("after clearing the deadline: %q %v", buf[:k], err)
		}
		b.SetReadDeadline(time.Now().Add(-time.Second))
		if _, _, err := b.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("past deadline: %v", err)
		}
		b.SetReadDeadline(time.Time{})
		// Blocked addresses lose their datagrams both ways.
		n.Block("10.0.0.2:1", true)
		a.WriteTo([]byte("lost"), b.LocalAddr())
		n.Block("10.0.0.2:1", false)
		a.WriteTo([]byte("kept"), b.LocalAddr())
		if k, _, _ := b.ReadFrom(buf); string(buf[:k]) != "kept" {
			t.Fatalf("got %q", buf[:k])
		}
		// Close unblocks a reader and frees the address.
		go func() {
			time.Sleep(time.Second)
			b.Close()
		}()
		if _, _, err := b.ReadFrom(buf); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v", err)
		}
		if _, err := b.WriteTo([]byte("x"), a.LocalAddr()); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after close: %v", err)
		}
		if _, err := n.Listen("10.0.0.2:1"); err != nil {
			t.Fatalf("address not freed: %v", err)
		}
		// Latency delays delivery.
		l := Network{Latency: 50 * time.Millisecond}
		x, _ := l.Listen("10.0.0.1:1")
		y, _ := l.Listen("10.0.0.2:1")
		start = time.Now()
		x.WriteTo([]byte("slow"), y.LocalAddr())
		y.ReadFrom(buf)
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("latency %v", d)
		}
	})
}

// TestMemnetDatagramsIntact: queued datagrams keep their bytes while the
// sender reuses its buffer and the pooled copies are recycled, for
// datagrams of every size up to and past the pooled size, with and without
// latency, and with some lost to a full queue.
func TestMemnetDatagramsIntact(t *testing.T) {
	for _, latency := range []time.Duration{0, time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			n := Network{Latency: latency}
			a, _ := n.Listen("10.0.0.1:1")
			b, _ := n.Listen("10.0.0.2:1")
			full, _ := n.Listen("10.0.0.3:1")
			send := make([]byte, 3*maxPooledDatagram)
			// Datagram i starts with i, so that it is known however the
			// timers of a latency deliver it.
			want := func(i int) []byte {
				k := 2 + i*37%(3*maxPooledDatagram-2)
				for j := range send[:k] {
					send[j] = byte(i*7 + j)
				}
				send[0], send[1] = byte(i>>8), byte(i)
				return send[:k]
			}
			const count = 300
			for i := range count {
				if _, err := a.WriteTo(want(i), b.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				// A receiver that never reads: past queueLen its datagrams
				// are lost, and their buffers go back to the pool.
				for range queueLen/count + 2 {
					a.WriteTo(want(i), full.LocalAddr())
				}
			}
			buf := make([]byte, 4*maxPooledDatagram)
			seen := map[int]bool{}
			for range count {
				k, from, err := b.ReadFrom(buf)
				if err != nil || from.String() != "10.0.0.1:1" || k < 2 {
					t.Fatalf("%d bytes from %v: %v", k, from, err)
				}
				i := int(buf[0])<<8 | int(buf[1])
				if w := want(i); i >= count || seen[i] || !bytes.Equal(buf[:k], w) {
					t.Fatalf("datagram %d: %d bytes, a repeat or unlike the %d sent", i, k, len(w))
				}
				seen[i] = true
			}
			if len(seen) != count {
				t.Fatalf("%d datagrams checked, want %d", len(seen), count)
			}
		})
	}
}
