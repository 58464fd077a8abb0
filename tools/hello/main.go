// Command hello is a tenant's first Go program against a lockcell cell,
// the one README.md's "Operating a cell" walks through: it reads the
// tenant's client settings (the <tenant>.json that lockcelld init writes),
// opens a session, takes a lock, writes and reads a file under it, and
// prints the lock's sequencer.
//
//	go run ./tools/hello --config deploy/app.json --path /app/hello
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/lockcell/lockcell/client"
)

func main() {
	config := flag.String("config", "deploy/app.json", "the tenant's client settings")
	path := flag.String("path", "/app/hello", "the file to lock, write and read")
	flag.Parse()
	if err := run(*config, *path); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(config, path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Connect with the tenant's settings and open a session.
	f, err := client.ReadConfigFile(config)
	if err != nil {
		return err
	}
	cfg, err := f.Config(false)
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())

	// Take the lock, write the file while holding it, read it back.
	lock, err := client.NewMutex(s, path+".lock").Lock(ctx)
	if err != nil {
		return err
	}
	defer lock.Release(context.Background())
	h, err := s.Open(ctx, path, client.OpenOptions{Create: true})
	if err != nil {
		return err
	}
	if _, err := h.SetContents(ctx, []byte("hello from Go")); err != nil {
		return err
	}
	data, _, err := h.GetContents(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%s holds %q; lock generation %d\n", path, data, lock.Generation())
	return nil
}
