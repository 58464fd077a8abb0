package clientfile

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMigrateV1: version 1 files (flat credentials, no "version"), as
// lockcelld and cell.StartLocal wrote them before the one schema, load
// into the current layout with every field where it belongs, and are
// written back in the current layout, byte for byte as a current writer
// writes them.
func TestMigrateV1(t *testing.T) {
	dev := File{Version: Version, Cell: "dev", Addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"},
		CA: "certs/ca.pem", PublicKey: "certs/signing-pub.pem",
		User:  Credential{Cert: "certs/t.pem", Key: "certs/t-key.pem"},
		Admin: Credential{Cert: "certs/admin.pem", Key: "certs/admin-key.pem"}}
	cases := []struct {
		file string
		want File
	}{
		{"v1-dev.json", dev},
		{"v1-token.json", File{Version: Version, Cell: "prod", Addrs: []string{"10.0.0.1:7001"}, CA: "/etc/lockcell/ca.pem",
			User: Credential{TokenFile: "robot.token"}}},
		{"v2-dev.json", dev},
	}
	for _, c := range cases {
		got, err := Parse(read(t, c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", c.file, got, c.want)
		}
		again, err := Parse(got.Marshal())
		if err != nil || !reflect.DeepEqual(again, c.want) {
			t.Fatalf("%s: written and read again: %+v, %v", c.file, again, err)
		}
	}
	if got, want := dev.Marshal(), read(t, "v2-dev.json"); !bytes.Equal(got, want) {
		t.Fatalf("Marshal writes\n%s\nwant (testdata/v2-dev.json)\n%s", got, want)
	}
	t.Logf("judged %d files and their round trips", len(cases))
}

// TestParseRejects: what is not a settings file of a known layout is
// refused with ErrInvalid, never half-read.
func TestParseRejects(t *testing.T) {
	bad := map[string]string{
		"malformed":        `{"addrs": 5}`,
		"no addrs":         `{"version": 2, "ca": "ca.pem"}`,
		"no ca":            `{"addrs": ["a:1"]}`,
		"future version":   `{"version": 3, "addrs": ["a:1"], "ca": "ca.pem"}`,
		"v2 with flat":     `{"version": 2, "addrs": ["a:1"], "ca": "ca.pem", "admin_cert": "admin.pem"}`,
		"v1 with sections": `{"addrs": ["a:1"], "ca": "ca.pem", "user": {"cert": "u.pem"}}`,
	}
	for name, text := range bad {
		if f, err := Parse([]byte(text)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Parse = %+v, %v; want ErrInvalid", name, f, err)
		}
	}
	t.Logf("judged %d bad files", len(bad))
}
