package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/clientfile"
	"github.com/lockcell/lockcell/internal/proccell"
)

// devProcsStopGrace is how long the replicas get to stop after SIGTERM
// before they are killed.
const devProcsStopGrace = 10 * time.Second

// runDevProcs is `lockcelld dev --procs`: a local cell of one `lockcelld
// serve` process per replica, written like an operator's (lockcelld init)
// into dir on first start and reused after, with the dev tenant created and
// dir/client.json holding its certificate and the administrator's. Killing
// one replica's process shows a fail-over; this process keeps the others
// running and says how to restart it. SIGINT or SIGTERM stops them all.
func runDevProcs(ctx context.Context, dir string, port, n int, tenant, logLevel string, stdout, stderr io.Writer) int {
	if _, err := os.Stat(filepath.Join(dir, "replica-1.json")); errors.Is(err, os.ErrNotExist) {
		var addrs []string
		for i := range n {
			addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port+i))
		}
		o := initOptions{dir: dir, name: "dev", tenant: tenant, principal: tenant, addrs: addrs, httpHost: "127.0.0.1", httpBase: port + 100}
		if err := initCell(o); err != nil {
			fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
			return exitError
		}
		// lockctl's settings: the dev tenant's certificate, and the
		// administrator's for status and tenant commands.
		cf := clientfile.File{Cell: "dev", Addrs: addrs, CA: "certs/ca.pem", PublicKey: "certs/signing-pub.pem",
			User:  clientfile.Credential{Cert: "certs/" + tenant + "-" + tenant + ".pem", Key: "certs/" + tenant + "-" + tenant + "-key.pem"},
			Admin: clientfile.Credential{Cert: "certs/admin.pem", Key: "certs/admin-key.pem"}}
		if err := os.WriteFile(filepath.Join(dir, "client.json"), cf.Marshal(), 0o600); err != nil {
			fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
			return exitError
		}
	} else if err != nil {
		fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
		return exitError
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
		return exitError
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
		return exitError
	}
	type proc struct {
		id int
		p  *proccell.Process
	}
	var procs []*proc
	stopAll := func() {
		for _, p := range procs {
			_ = p.p.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			select {
			case <-p.p.Done():
			case <-time.After(devProcsStopGrace):
				p.p.Kill()
			}
		}
	}
	exited := make(chan *proc, n)
	for id := 1; id <= n; id++ {
		// A process group of its own, so that a Ctrl-C reaches this
		// process, which stops the replicas in order; if this process dies
		// without stopping them, they get SIGTERM.
		pp, err := proccell.StartProcess(proccell.ProcessSpec{
			Name:        fmt.Sprintf("replica %d", id),
			Argv:        []string{self, "serve", "--config", filepath.Join(dir, fmt.Sprintf("replica-%d.json", id)), "--log-level", logLevel},
			LogFile:     filepath.Join(dir, "logs", fmt.Sprintf("replica-%d.log", id)),
			DeathSignal: syscall.SIGTERM,
		})
		if err != nil {
			fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
			stopAll()
			return exitError
		}
		p := &proc{id: id, p: pp}
		procs = append(procs, p)
		go func() { <-pp.Done(); exited <- p }()
	}
	defer stopAll()

	// The dev tenant, once a master serves.
	f, err := client.ReadConfigFile(filepath.Join(dir, "client.json"))
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
		return exitError
	}
	admin, err := f.Config(true)
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld dev --procs:", err)
		return exitError
	}
	admin.Logger = slog.New(slog.DiscardHandler)
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := createTenant(sctx, admin, tenant); err != nil {
		fmt.Fprintf(stderr, "lockcelld dev --procs: creating tenant %s: %v (replica logs in %s)\n", tenant, err, filepath.Join(dir, "logs"))
		return exitError
	}
	cfgPath := filepath.Join(dir, "client.json")
	fmt.Fprintf(stdout, "lockcell dev cell is up: %d replica processes on 127.0.0.1:%d-%d, status pages http://127.0.0.1:%d/ to :%d\n", n, port, port+n-1, port+100, port+100+n-1)
	fmt.Fprintf(stdout, "logs: %s; client settings: %s\n", filepath.Join(dir, "logs"), cfgPath)
	fmt.Fprintf(stdout, `
Try it (in another terminal):
  export LOCKCELL_CONFIG=%[1]s
  go run ./cmd/lockctl status                     # which replica is master
  go run ./cmd/lockctl put /%[2]s/hello world
  kill -9 $(cat %[3]s)   # kill replica N's process (here N=1; see status)
  go run ./cmd/lockctl status                     # another master within seconds
  go run ./cmd/lockctl cell stepdown              # or a planned hand-over

Ctrl-C stops every replica; running it again restarts the cell with its data.
`, cfgPath, tenant, filepath.Join(dir, "data", "replica-1", "lockcell-pid"))
	var once sync.Once
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stdout, "stopping the replicas")
			return exitOK
		case p := <-exited:
			fmt.Fprintf(stdout, "replica %d exited (%s); restart it with: %s serve --config %s\n", p.id, exitStatus(p.p.Err()), self, filepath.Join(dir, fmt.Sprintf("replica-%d.json", p.id)))
			once.Do(func() {
				fmt.Fprintln(stdout, "(the others keep running; a majority must run for the cell to serve)")
			})
		}
	}
}

// createTenant creates tenant (if it does not exist) as the
// administrator, retrying until a master serves or ctx ends.
func createTenant(ctx context.Context, admin client.Config, tenant string) error {
	admin.ReconnectMax = 200 * time.Millisecond
	for {
		err := func() error {
			c, err := client.Dial(ctx, admin)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = operator.New(c).CreateTenant(ctx, tenant, api.TenantQuota{}, api.ACLNames{})
			return err
		}()
		if err == nil || errors.Is(err, api.ErrAlreadyExists) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exitStatus says how a replica's process ended, as its wait status reads
// ("exit status 1", "signal: killed"), from proccell.Process.Err.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
