package memnet

import (
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
