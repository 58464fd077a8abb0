package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/transport/memnet"
)

// TestConfigFileMatchesCell: the file cell.StartLocal writes is in the one
// settings-file layout (version 2) and loads with client.LoadConfigFile;
// so does the same file in the older flat layout (no "version"), and both
// reach the cell with the user's and the administrator's certificates.
func TestConfigFileMatchesCell(t *testing.T) {
	tc := startCell(t, 3, nil)
	ctx := testCtx(t, 30*time.Second)
	b, err := os.ReadFile(tc.ClientFilePath())
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || raw["version"] != float64(2) || raw["user"] == nil || raw["cert"] != nil {
		t.Fatalf("the cell wrote %s (%v); want version 2 with a \"user\" section and no flat \"cert\"", b, err)
	}
	f, err := client.ReadConfigFile(tc.ClientFilePath())
	if err != nil {
		t.Fatal(err)
	}
	// The same settings in the flat layout of files written before the one
	// schema, beside it (its paths are relative to the same directory).
	old, _ := json.Marshal(map[string]any{"cell": f.Cell, "addrs": f.Addrs, "ca": f.CA, "public_key": f.PublicKey,
		"cert": f.User.Cert, "key": f.User.Key, "admin_cert": f.Admin.Cert, "admin_key": f.Admin.Key})
	oldPath := filepath.Join(filepath.Dir(tc.ClientFilePath()), "client-v1.json")
	if err := os.WriteFile(oldPath, old, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{tc.ClientFilePath(), oldPath} {
		cfg, err := client.LoadConfigFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logger = quietLogger()
		c, err := client.Dial(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Tenant() != "t" {
			t.Fatalf("%s: session tenant %q, want t (the file's user certificate)", path, s.Tenant())
		}
		f, err := client.ReadConfigFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := f.SigningKey()
		if err != nil || !pub.Equal(tc.PublicKey()) {
			t.Fatalf("%s: public key from the file: %v", path, err)
		}
		admin, err := f.Config(true)
		if err != nil {
			t.Fatal(err)
		}
		admin.Logger = quietLogger()
		ac, err := client.Dial(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		if _, err := operator.New(ac).ListTenants(ctx); err != nil {
			t.Fatalf("%s: the file's administrator certificate: %v", path, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []client.Config{
		{},
		{Addrs: []string{"127.0.0.1:1"}},
		{Addrs: []string{""}, CA: nil},
		{Addrs: []string{"127.0.0.1:1"}, CA: emptyPool(), GracePeriod: -1},
		{Addrs: []string{"127.0.0.1:1"}, CA: emptyPool(), Drift: 0.7},
		{Addrs: []string{"127.0.0.1:1"}, CA: emptyPool(), ReconnectMin: time.Second, ReconnectMax: time.Millisecond},
		{Addrs: []string{"127.0.0.1:1"}, CA: emptyPool(), LocalAddr: "host.example"},
	} {
		if _, err := client.Dial(ctx, c); !errors.Is(err, client.ErrInvalidConfig) {
			t.Fatalf("Dial(%+v): %v; want ErrInvalidConfig", c, err)
		}
	}
	dir := t.TempDir()
	bad := dir + "/bad.json"
	_ = os.WriteFile(bad, []byte(`{"addrs": 5}`), 0o600)
	if _, err := client.LoadConfigFile(bad); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("malformed file: %v", err)
	}
	empty, _ := json.Marshal(map[string]any{"addrs": []string{}})
	_ = os.WriteFile(bad, empty, 0o600)
	if _, err := client.LoadConfigFile(bad); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("file without addrs: %v", err)
	}
	if _, err := client.LoadConfigFile(dir + "/missing.json"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestDialUnreachable: Dial gives up when its context ends, and not
// before. It dials an address where nothing listens on a simulated
// network (transport/memnet) in simulated time.
func TestDialUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const patience = 500 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		var nw memnet.Network
		var sockets atomic.Int32
		start := time.Now()
		_, err := client.Dial(ctx, client.Config{Addrs: []string{"10.0.0.1:9"}, CA: emptyPool(), HandshakeTimeout: 100 * time.Millisecond, Logger: quietLogger(),
			PacketConn: func() (net.PacketConn, error) {
				return nw.Listen(fmt.Sprintf("10.1.0.1:%d", 1000+sockets.Add(1)))
			}})
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial to nothing: %v; want DeadlineExceeded", err)
		}
		if d := time.Since(start); d < patience {
			t.Fatalf("Dial to nothing gave up after %v, before its context ended (%v)", d, patience)
		}
		if sockets.Load() == 0 {
			t.Fatal("Dial never opened a socket: it judged nothing")
		}
	})
}

// TestConfigFilePathsFromItsDirectory: names in a settings file are
// relative to the file's directory, and what the file says back (the public
// key's path, a certificate named in an error) is relative to the working
// directory, so a user can open it as printed.
func TestConfigFilePathsFromItsDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "settings.json")
	b, _ := json.Marshal(map[string]any{"addrs": []string{"127.0.0.1:1"}, "ca": "certs/ca.pem",
		"cert": "certs/missing.pem", "key": "certs/missing-key.pem", "public_key": "certs/signing-pub.pem"})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := client.ReadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.PublicKeyPath(), filepath.Join(dir, "certs", "signing-pub.pem"); got != want {
		t.Fatalf("PublicKeyPath() = %q, want %q", got, want)
	}
	if _, err := f.Config(false); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "certs", "ca.pem")) {
		t.Fatalf("a missing CA: %v, want an error naming %s", err, filepath.Join(dir, "certs", "ca.pem"))
	}
}
