package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
)

// exampleCell starts an in-process three-replica cell with tenant "t" and
// returns a client Config for principal "example" of that tenant.
func exampleCell(ctx context.Context) (client.Config, func()) {
	dir, err := os.MkdirTemp("", "lockcell-example-")
	if err != nil {
		panic(err)
	}
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: dir, Replicas: 3, Cell: "example", DevTenant: "t", Logger: quietLogger()})
	if err != nil {
		panic(err)
	}
	cert, err := lc.ClientCertificate("t", "example")
	if err != nil {
		panic(err)
	}
	cfg := client.Config{Addrs: lc.Addrs(), CA: lc.CA.Pool(), Certificate: &cert, Logger: quietLogger()}
	return cfg, func() { lc.Close(); os.RemoveAll(dir) }
}

func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, stop := exampleCell(ctx)
	defer stop()

	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	h, err := s.Open(ctx, "/t/greeting", client.OpenOptions{Create: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := h.SetContents(ctx, []byte("hello")); err != nil {
		fmt.Println(err)
		return
	}
	b, stat, err := h.GetContents(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s (content generation %d), session %v\n", b, stat.ContentGeneration, s.State())
	// Output: hello (content generation 2), session safe
}

func ExampleMutex() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, stop := exampleCell(ctx)
	defer stop()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	alice, _ := c.NewSession(ctx)
	bob, _ := c.NewSession(ctx)

	l, err := client.NewMutex(alice, "/t/job").Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	seq := l.Sequencer()
	fmt.Println("alice holds", seq.Path, seq.Mode)
	// Work under the lock watches l.Context(): it ends if the lock may be
	// lost (jeopardy, expiry, release).

	bm := client.NewMutex(bob, "/t/job")
	_, err = bm.TryLock(ctx)
	fmt.Println("bob's TryLock:", err != nil && errorsIs(err, client.ErrLocked))

	// The grant is released through the Lock itself; a second release of
	// the same grant is stale and frees nothing.
	if err := l.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("alice's lock context:", context.Cause(l.Context()))
	fmt.Println("releasing the same grant again:", errorsIs(l.Release(ctx), client.ErrNotHeld))
	lb, err := bm.TryLock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("bob holds it at a newer generation:", lb.Generation() > seq.Generation)
	// Output:
	// alice holds /t/job exclusive
	// bob's TryLock: true
	// alice's lock context: client: lock released
	// releasing the same grant again: true
	// bob holds it at a newer generation: true
}

func ExampleElection() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, stop := exampleCell(ctx)
	defer stop()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	observer, _ := c.NewSession(ctx)
	first, _ := c.NewSession(ctx)
	second, _ := c.NewSession(ctx)

	leaders := client.NewElection(observer, "/t/primary").Observe(ctx)
	l1, err := client.NewElection(first, "/t/primary").Campaign(ctx, []byte("replica-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("observed:", string((<-leaders).Value))
	won := make(chan error, 1)
	go func() {
		_, err := client.NewElection(second, "/t/primary").Campaign(ctx, []byte("replica-b"))
		won <- err
	}()
	// The first leader goes away; the second candidate takes over.
	first.Close(ctx)
	<-l1.Done()
	if err := <-won; err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("observed:", string((<-leaders).Value))
	// Output:
	// observed: replica-a
	// observed: replica-b
}
