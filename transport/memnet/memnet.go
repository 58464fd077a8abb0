// Package memnet is an in-process packet network: net.PacketConn endpoints
// that exchange datagrams through channels instead of sockets. Tests hand a
// memnet Conn to transport.Listen (Config.PacketConn) or transport.Dial
// (DialConfig.PacketConn) to run real QUIC without the operating system's
// network.
//
// Its point is testing/synctest: a goroutine blocked in ReadFrom waits on a
// channel, which synctest counts as durably blocked, so a bubble's fake clock
// advances through QUIC's handshake, idle and keep-alive timers in no real
// time. (A goroutine blocked on a real UDP socket is not durably blocked, and
// the fake clock would stall.) A Network and its Conns must then be created
// inside the bubble.
//
// Delivery is immediate unless Latency is set, and a datagram is dropped
// when the receiver's queue is full, as UDP would. Block makes an address
// a black hole, which looks like a crashed or unplugged host to everyone
// else.
package memnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// queueLen is how many datagrams wait for a reader before more are dropped.
const queueLen = 4096

// ErrAddrInUse reports a Listen on an address that already has a Conn.
var ErrAddrInUse = errors.New("memnet: address in use")

// Network is a set of Conns that can reach each other. The zero value is
// ready to use. A Network is safe for concurrent use.
type Network struct {
	// Latency, if positive, delays every datagram by this long. Set it before
	// the first Listen.
	Latency time.Duration

	mu      sync.Mutex
	conns   map[netip.AddrPort]*Conn
	blocked map[netip.AddrPort]bool
}

// Listen returns a Conn bound to addr, an "ip:port" literal. It returns
// ErrAddrInUse if another open Conn has that address.
func (n *Network) Listen(addr string) (*Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("memnet: %w", err)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		n.conns = map[netip.AddrPort]*Conn{}
	}
	if _, ok := n.conns[ap]; ok {
		return nil, fmt.Errorf("%w: %s", ErrAddrInUse, addr)
	}
	c := &Conn{
		net:    n,
		addr:   ap,
		udp:    net.UDPAddrFromAddrPort(ap),
		in:     make(chan datagram, queueLen),
		closed: make(chan struct{}),
	}
	c.rd.init()
	n.conns[ap] = c
	return c, nil
}

// Block makes addr a black hole (blocked true) or reachable again (false):
// datagrams to and from it vanish.
func (n *Network) Block(addr string, blocked bool) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("memnet: %w", err)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.blocked == nil {
		n.blocked = map[netip.AddrPort]bool{}
	}
	if blocked {
		n.blocked[ap] = true
	} else {
		delete(n.blocked, ap)
	}
	return nil
}

func (n *Network) route(from, to netip.AddrPort) *Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.blocked[from] || n.blocked[to] {
		return nil
	}
	return n.conns[to]
}

func (n *Network) remove(c *Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[c.addr] == c {
		delete(n.conns, c.addr)
	}
}

// datagram is one datagram in flight. Its bytes are a pooled buffer (see
// getBuf) that the receiver puts back once ReadFrom has copied it, or that
// is put back where the datagram is lost.
type datagram struct {
	b    *[]byte
	from *net.UDPAddr // the sender's Conn.udp
}

// maxPooledDatagram is the largest datagram whose buffer is pooled: QUIC's
// packets stay well below it.
const maxPooledDatagram = 2048

// bufs holds *[]byte of capacity maxPooledDatagram, so that sending a
// datagram copies it without allocating.
var bufs = sync.Pool{New: func() any {
	b := make([]byte, 0, maxPooledDatagram)
	return &b
}}

// getBuf returns a buffer holding a copy of p.
func getBuf(p []byte) *[]byte {
	if len(p) > maxPooledDatagram {
		b := append([]byte(nil), p...)
		return &b
	}
	b := bufs.Get().(*[]byte)
	*b = append((*b)[:0], p...)
	return b
}

// putBuf returns b to the pool; nothing may use it afterwards.
func putBuf(b *[]byte) {
	if cap(*b) == maxPooledDatagram {
		bufs.Put(b)
	}
}

// Conn is one endpoint of a Network; it implements net.PacketConn.
type Conn struct {
	net       *Network
	addr      netip.AddrPort
	udp       *net.UDPAddr // addr, made once: the From of every datagram this Conn sends
	in        chan datagram
	closed    chan struct{}
	closeOnce sync.Once
	rd        deadline
}

var _ net.PacketConn = (*Conn)(nil)

// ReadFrom reads the next datagram. It returns os.ErrDeadlineExceeded after
// the read deadline and net.ErrClosed after Close. The address it returns
// is shared by all datagrams from one sender: do not modify it.
func (c *Conn) ReadFrom(p []byte) (int, net.Addr, error) {
	select {
	case <-c.closed:
		return 0, nil, net.ErrClosed
	default:
	}
	select {
	case d := <-c.in:
		n := copy(p, *d.b)
		putBuf(d.b)
		return n, d.from, nil
	case <-c.closed:
		return 0, nil, net.ErrClosed
	case <-c.rd.wait():
		return 0, nil, os.ErrDeadlineExceeded
	}
}

// WriteTo sends p to addr (a *net.UDPAddr). Like UDP it reports success for
// a datagram that is then lost.
func (c *Conn) WriteTo(p []byte, addr net.Addr) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, fmt.Errorf("memnet: address %v is not a *net.UDPAddr", addr)
	}
	to := ua.AddrPort()
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	d := datagram{b: getBuf(p), from: c.udp}
	if c.net.Latency > 0 {
		time.AfterFunc(c.net.Latency, func() { c.deliver(to, d) })
	} else {
		c.deliver(to, d)
	}
	return len(p), nil
}

// deliver queues d for the Conn at to, or loses it.
func (c *Conn) deliver(to netip.AddrPort, d datagram) {
	dst := c.net.route(c.addr, to)
	if dst == nil {
		putBuf(d.b)
		return
	}
	select {
	case dst.in <- d:
	default: // receiver queue full: lost, as on a real network
		putBuf(d.b)
	}
}

// Close closes the Conn and frees its address.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.net.remove(c)
	})
	return nil
}

// LocalAddr returns the Conn's address as a *net.UDPAddr.
func (c *Conn) LocalAddr() net.Addr { return net.UDPAddrFromAddrPort(c.addr) }

// SetDeadline sets the read deadline; writes never block.
func (c *Conn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline makes a blocked or later ReadFrom return
// os.ErrDeadlineExceeded once t has passed; a zero t clears it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rd.set(t)
	return nil
}

// SetWriteDeadline does nothing: writes never block.
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

// SetReadBuffer does nothing; it exists so quic-go does not warn that it
// cannot size the buffer.
func (c *Conn) SetReadBuffer(int) error { return nil }

// SetWriteBuffer does nothing, like SetReadBuffer.
func (c *Conn) SetWriteBuffer(int) error { return nil }

// deadline is a resettable read deadline: wait returns a channel closed once
// the deadline has passed.
type deadline struct {
	mu    sync.Mutex
	gen   uint64 // bumped by every set, so a stale timer does nothing
	timer *time.Timer
	ch    chan struct{} // closed when the deadline passes
}

func (d *deadline) init() { d.ch = make(chan struct{}) }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	select {
	case <-d.ch: // expired before: re-arm with a fresh channel
		d.ch = make(chan struct{})
	default:
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		close(d.ch)
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			close(d.ch) // INVARIANT: only this timer closes the channel of generation gen
		}
	})
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}
