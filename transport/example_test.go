package transport_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/transport"
)

// Two replicas on loopback exchange a peer message, and a client with a
// certificate calls replica 1.
func Example() {
	ctx := context.Background()
	ca, _ := certs.NewCA("example", certs.Options{})
	// Bind the sockets first so each replica knows the other's address.
	pcs := map[uint64]net.PacketConn{}
	peers := map[uint64]string{}
	for _, id := range []uint64{1, 2} {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		pcs[id], peers[id] = pc, pc.LocalAddr().String()
	}
	type ping struct{ N int }
	eps := map[uint64]*transport.Endpoint{}
	for _, id := range []uint64{1, 2} {
		cert, _ := ca.IssueReplica(id, certs.Options{})
		ep, err := transport.Listen(ctx, transport.Config{
			ID: id, PacketConn: pcs[id], Peers: peers, CA: ca.Pool(), Certificate: cert,
			Logger: slog.New(slog.DiscardHandler),
			ClientHandler: func(ctx context.Context, s *transport.ServerStream) {
				f, err := s.ReadFrame(ctx)
				if err != nil {
					return
				}
				var p ping
				_ = f.Decode(&p)
				_ = s.WriteFrame(ctx, 2, fmt.Sprintf("hello %s, replica %d got %d", s.Identity(), id, p.N))
			},
		})
		if err != nil {
			panic(err)
		}
		defer ep.Close()
		eps[id] = ep
	}

	_ = eps[1].Send(2, 7, ping{N: 42})
	m := <-eps[2].Recv()
	var p ping
	_ = m.Decode(&p)
	fmt.Printf("replica 2 got tag %d from replica %d: %d\n", m.Tag, m.From, p.N)

	cert, _ := ca.IssueClient(certs.ClientID{Tenant: "acme", Principal: "alice"}, certs.Options{})
	c, err := transport.Dial(ctx, transport.DialConfig{Addrs: []string{peers[1]}, CA: ca.Pool(), Certificate: &cert})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	f, err := c.Call(ctx, 1, ping{N: 5})
	if err != nil {
		panic(err)
	}
	var answer string
	_ = f.Decode(&answer)
	fmt.Println(answer)
	// Output:
	// replica 2 got tag 7 from replica 1: 42
	// hello acme/alice, replica 1 got 5
}
