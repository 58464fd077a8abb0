package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestKnobsNeedFaultInjection: each test-only setting is refused in a
// config without fault_injection, with a TestKnobError naming it, both by
// readFileConfig and by `lockcelld serve`; with fault_injection on, the
// same config reads.
func TestTestKnobsNeedFaultInjection(t *testing.T) {
	dir := t.TempDir()
	base := initOneReplica(t, dir+"/cell", "knobs", "127.0.0.1:1")
	knobs := map[string]any{"clock_scale": 2.0, "sync_delay": "10ms", "unsafe_no_fsync": true}
	for knob, value := range knobs {
		for _, faults := range []bool{false, true} {
			b, err := os.ReadFile(base)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m[knob] = value
			m["fault_injection"] = faults
			b, _ = json.Marshal(m)
			file := filepath.Join(dir, "cell", knob+".json")
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = readFileConfig(file)
			if faults {
				if err != nil {
					t.Errorf("%s with fault_injection: %v", knob, err)
				}
				continue
			}
			var ke *TestKnobError
			if !errors.As(err, &ke) || ke.Knob != knob || !errors.Is(err, ErrTestKnob) || !strings.Contains(err.Error(), knob) {
				// NB: not on to serve, which would then run.
				t.Errorf("%s without fault_injection: got %v, want a TestKnobError naming it", knob, err)
				continue
			}
			var out bytes.Buffer
			if code := run([]string{"serve", "--config", file}, &out, &out); code == 0 || !strings.Contains(out.String(), knob) {
				t.Errorf("serve with %s and no fault_injection: exit %d: %s", knob, code, out.String())
			}
		}
	}
}

// TestConnLimitSettings: max_conns_per_ip and max_streams_per_conn in a
// replica's config reach cell.Config; left out, they stay zero (the
// transport's defaults).
func TestConnLimitSettings(t *testing.T) {
	dir := t.TempDir()
	base := initOneReplica(t, dir+"/cell", "limits", "127.0.0.1:1")
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, set := range []bool{false, true} {
		if set {
			m["max_conns_per_ip"] = 300
			m["max_streams_per_conn"] = 40
		}
		b, _ = json.Marshal(m)
		file := filepath.Join(dir, "cell", "limits.json")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		fc, err := readFileConfig(file)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := fc.replicaConfig(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := [2]int{}
		if set {
			want = [2]int{300, 40}
		}
		if got := [2]int{cfg.MaxConnsPerIP, cfg.MaxStreamsPerConn}; got != want {
			t.Fatalf("set=%v: MaxConnsPerIP, MaxStreamsPerConn = %v, want %v", set, got, want)
		}
	}
}
