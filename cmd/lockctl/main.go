// Command lockctl is lockcell's command-line client: it takes locks around
// commands, runs elections, reads and writes files, and administers the
// cell. Run `lockctl --help` for the commands, `lockctl CMD --help` for
// one command's flags.
//
// By default it reads the cell's settings from data/dev/client.json (the
// file `make run` writes), so after `make run` no flags are needed:
//
//	lockctl lock /dev/demo -- echo hi
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	// exitLocked: lock --try (or elect --try) found the lock held.
	exitLocked = 4
	// exitLockLost: the lock (or leadership) may have been lost while the
	// command ran; lockctl stopped it (EX_TEMPFAIL).
	exitLockLost = 75
)

// env is what a command runs with: streams, the signal context, and the
// global options.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	ctx            context.Context
	config         string
	admin          bool
	token          string
	timeout        time.Duration
	grace          time.Duration
	// usedAdmin: the last dial used the administrator's certificate.
	usedAdmin bool
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) int
}

var commands []command

func init() {
	commands = []command{
		{"lock", "run a command while holding a lock", cmdLock},
		{"elect", "campaign for leadership, or observe an election", cmdElect},
		{"get", "print a file's contents", cmdGet},
		{"put", "write a file's contents (creating it)", cmdPut},
		{"mkdir", "create a directory", cmdMkdir},
		{"ls", "list a directory", cmdLs},
		{"stat", "print a node's metadata", cmdStat},
		{"rm", "delete a node", cmdRm},
		{"sessions", "list a tenant's open sessions", cmdSessions},
		{"locks", "list a tenant's held locks", cmdLocks},
		{"status", "show the cell's replicas, master, epoch and slots", cmdStatus},
		{"cell", "operate the cell: stepdown, add-replica, remove-replica, replace-replica (administrator)", cmdCell},
		{"tenant", "create, update or list tenants (administrator)", cmdTenant},
		{"snapshot", "save a backup of the cell's state (administrator)", cmdSnapshot},
		{"certs", "create a CA and certificates", cmdCerts},
	}
}

func main() {
	// lock stops its command's descendants that left the command's process
	// group too (Linux only; a no-op elsewhere).
	becomeSubreaper()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage: lockctl [global flags] COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Global flags:
  --config FILE   client settings (env LOCKCELL_CONFIG; default data/dev/client.json)
  --admin         use the cell administrator's certificate from the config file
  --token-file F  authenticate with the tenant token in F instead of a
                  certificate (env LOCKCELL_TOKEN holds the token itself)
  --timeout D     bound for commands that do not wait for a lock (default 30s;
                  0: no bound, as lock --wait 0)
  --grace D       session grace period (default 45s)

Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 locked,
75 the lock may have been lost while the command ran.
Run 'lockctl COMMAND --help' for a command's flags.
`)
}

// run is main without the process: tests call it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, ctx: ctx}
	fs := flag.NewFlagSet("lockctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := os.Getenv("LOCKCELL_CONFIG")
	if def == "" {
		def = "data/dev/client.json"
	}
	fs.StringVar(&e.config, "config", def, "")
	fs.BoolVar(&e.admin, "admin", false, "")
	tokenFile := fs.String("token-file", "", "")
	fs.DurationVar(&e.timeout, "timeout", 30*time.Second, "")
	fs.DurationVar(&e.grace, "grace", 0, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return exitOK
		}
		fmt.Fprintln(stderr, "lockctl:", err)
		usage(stderr)
		return exitUsage
	}
	e.token = os.Getenv("LOCKCELL_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "lockctl: reading --token-file:", err)
			return exitUsage
		}
		e.token = strings.TrimSpace(string(b))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr)
		return exitUsage
	}
	if rest[0] == "help" {
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == rest[0] {
			return c.run(e, rest[1:])
		}
	}
	fmt.Fprintf(stderr, "lockctl: unknown command %q\n", rest[0])
	usage(stderr)
	return exitUsage
}

// flags makes a command's flag set; parse handles --help and errors.
func (e *env) flags(name, argsUsage, doc string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "usage: lockctl %s %s\n\n%s\n", name, argsUsage, doc)
		var flags []string
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
		if len(flags) > 0 {
			fmt.Fprintln(e.stdout, "\nFlags:")
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return fs
}

// parse parses args; it returns (code, true) when the command should stop.
// Flags may come before or after the arguments; everything after "--" is
// an argument (kept with the "--", for lock).
func (e *env) parse(fs *flag.FlagSet, args []string, nargs ...int) (int, bool) {
	// NB: flag calls Usage itself on -h and on every error; print the help
	// once, here, and only when asked for.
	help := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = help }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				help()
				return exitOK, true
			}
			fmt.Fprintf(e.stderr, "lockctl %s: %v (see 'lockctl %s --help')\n", fs.Name(), err, fs.Name())
			return exitUsage, true
		}
		consumed := args[:len(args)-len(fs.Args())]
		args = fs.Args()
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(append(pos, "--"), args...)
			break
		}
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	_ = fs.Parse(append([]string{"--"}, pos...))
	if len(nargs) == 2 && (fs.NArg() < nargs[0] || fs.NArg() > nargs[1]) {
		want := fmt.Sprintf("%d", nargs[0])
		if nargs[1] != nargs[0] {
			want = fmt.Sprintf("%d to %d", nargs[0], nargs[1])
		}
		fmt.Fprintf(e.stderr, "lockctl %s: want %s arguments, got %d (see 'lockctl %s --help')\n", fs.Name(), want, fs.NArg(), fs.Name())
		return exitUsage, true
	}
	return 0, false
}

// fail prints err and returns its exit code.
func (e *env) fail(name string, err error) int {
	fmt.Fprintf(e.stderr, "lockctl %s: %s\n", name, e.explain(err))
	switch {
	case errors.Is(err, api.ErrNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrLocked):
		return exitLocked
	}
	return exitError
}

// explain adds a hint to the errors a new user meets.
func (e *env) explain(err error) string {
	msg := collapseRepeats(err.Error())
	switch {
	case errors.Is(err, os.ErrNotExist) && strings.Contains(msg, "config"):
		msg += "\n  (no cell settings: start a dev cell with 'make run', or pass --config FILE or set LOCKCELL_CONFIG)"
	case errors.Is(err, api.ErrPermissionDenied) && (e.admin || e.usedAdmin):
		msg += "\n  (not even the cell administrator may do this)"
	case errors.Is(err, api.ErrPermissionDenied):
		msg += "\n  (the certificate's principal may not do this; administrators use --admin)"
	case errors.Is(err, api.ErrUnauthenticated):
		msg += "\n  (credentials refused: a token may be unknown or revoked - the administrator issues a new one with 'lockctl tenant token'; without a token the config file must name a client certificate)"
	case errors.Is(err, client.ErrNoMaster):
		msg += "\n  (the cell has no quorum: start or reconnect replicas; 'lockctl status' shows what each replica says)"
	case errors.Is(err, client.ErrUnreachable):
		msg += "\n  (is the cell running, and are the addresses in the config file right?)"
	case errors.Is(err, context.DeadlineExceeded):
		msg += "\n  (is the cell running? see 'lockctl status'; --timeout sets the bound)"
	}
	return msg
}

// dial connects with the config file's settings.
func (e *env) dial(ctx context.Context, admin bool) (*client.Client, *client.ConfigFile, error) {
	f, err := client.ReadConfigFile(e.config)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := f.Config(admin || e.admin)
	if err != nil {
		return nil, nil, err
	}
	if e.token != "" && !admin && !e.admin {
		cfg.Certificate, cfg.Token = nil, e.token
	}
	e.usedAdmin = cfg.Certificate != nil && (admin || e.admin || f.User.Cert == "")
	cfg.GracePeriod = e.grace
	cfg.Logger = quietLogger()
	c, err := client.Dial(ctx, cfg)
	switch {
	case errors.Is(err, client.ErrCertificate):
		return nil, nil, fmt.Errorf("%w\n  (the CA is %q and the client certificate %q, as %s says)", err, f.CA, f.User.Cert, e.config)
	case errors.Is(err, client.ErrUnauthenticated), errors.Is(err, client.ErrNoMaster), errors.Is(err, client.ErrUnreachable):
		return nil, nil, err
	case err != nil:
		return nil, nil, fmt.Errorf("cannot reach the cell at %s: %w", strings.Join(cfg.Addrs, ","), err)
	}
	return c, f, nil
}

// session dials and opens a session; the returned close ends both.
func (e *env) session(ctx context.Context) (*client.Session, func(), error) {
	c, _, err := e.dial(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return s, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Close(cctx)
		cancel()
		c.Close()
	}, nil
}

// bounded returns a context bounded by --timeout (0: no bound).
func (e *env) bounded() (context.Context, context.CancelFunc) {
	if e.timeout <= 0 {
		return context.WithCancel(e.ctx)
	}
	return context.WithTimeout(e.ctx, e.timeout)
}

// collapseRepeats drops a run of ": "-separated words that repeats the run
// just before it ("transport: connection closed: transport: connection
// closed: x" becomes "transport: connection closed: x"), as wrapping the
// same error twice leaves.
func collapseRepeats(msg string) string {
	parts := strings.Split(msg, ": ")
	for n := 1; n <= 3; n++ {
		for i := 0; i+2*n <= len(parts); {
			if slices.Equal(parts[i:i+n], parts[i+n:i+2*n]) {
				parts = slices.Delete(parts, i+n, i+2*n)
				continue
			}
			i++
		}
	}
	return strings.Join(parts, ": ")
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
