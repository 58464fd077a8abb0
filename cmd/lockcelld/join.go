package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
)

// `lockcelld init --join` prepares a replica that joins a running cell: the
// cell's directory (what `lockcelld init` wrote: certs/ca.pem, the CA's key,
// certs/signing-key.pem, replica-N.json) gains the new replica's
// certificate, signed by the cell CA, its config, which takes the cell-wide
// settings from an existing replica's config and names the current peers,
// and its data directory holding only the new-member marker. The new
// replica's ID was never a member's: it never voted, so it forgot nothing,
// and its empty store is new, not lost (cell.InitDataDir). It starts
// outside the membership, votes in nothing, and learns the cell's state by
// snapshot and log once the cell adds it (lockctl cell add-replica or
// replace-replica).

// Errors of lockcelld init --join. Each refusal happens before anything is
// written.
var (
	// ErrIDInUse: the new replica's ID (or address) belongs to a current or
	// former replica of the cell.
	ErrIDInUse = errors.New("lockcelld: replica ID already in use")
	// ErrCAKeyMissing: the cell CA's private key is not where the operator
	// said, or does not match the CA certificate.
	ErrCAKeyMissing = errors.New("lockcelld: cell CA key missing")
	// ErrDataDirNotEmpty: the new replica's data directory exists and is
	// not empty.
	ErrDataDirNotEmpty = errors.New("lockcelld: data directory not empty")
	// ErrNotACell: the directory holds no cell written by lockcelld init.
	ErrNotACell = errors.New("lockcelld: not a cell directory")
)

// joinOptions are lockcelld init --join's flags.
type joinOptions struct {
	dir      string
	id       uint64
	addr     string
	peers    string // "ID=host:port,..."; empty: from the configs in dir
	caKey    string // empty: dir/certs/ca-key.pem
	httpHost string
	httpBase int
}

// replicaConfigName matches the replica configs lockcelld init writes.
var replicaConfigName = regexp.MustCompile(`^replica-([0-9]+)\.json$`)

// cellConfigs reads every replica-N.json in dir, by ID.
func cellConfigs(dir string) (map[uint64]*fileConfig, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotACell, err)
	}
	out := map[uint64]*fileConfig{}
	for _, e := range ents {
		m := replicaConfigName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			continue
		}
		fc, err := readFileConfig(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if fc.ID != id {
			return nil, fmt.Errorf("%w: %s is the config of replica %d", ErrNotACell, e.Name(), fc.ID)
		}
		out[id] = fc
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no replica-N.json (run lockcelld init first)", ErrNotACell, dir)
	}
	return out, nil
}

// parsePeers parses "ID=host:port,...".
func parsePeers(s string) (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, p := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		id, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || id == 0 {
			return nil, fmt.Errorf("--peers: %q is not ID=host:port", p)
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			return nil, fmt.Errorf("--peers: replica %d: %w", id, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("--peers: replica %d named twice", id)
		}
		out[id] = v
	}
	return out, nil
}

// joinPlan is what prepareJoin found and join writes.
type joinPlan struct {
	ca      *certs.CA
	cfg     fileConfig // the new replica's config
	dataDir string     // absolute or relative to the working directory
	admin   string     // admin.json, or "" if the directory has none
}

// prepareJoin checks everything lockcelld init --join needs and refuses,
// writing nothing, a cell directory it cannot use, an ID or address in use,
// a missing CA key and a data directory that is not empty.
func prepareJoin(o joinOptions) (*joinPlan, error) {
	if o.id == 0 {
		return nil, fmt.Errorf("--id is required (a replica ID never used in this cell, at least 1)")
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return nil, fmt.Errorf("--addr %q: %w (want host:port)", o.addr, err)
	}
	cfgs, err := cellConfigs(o.dir)
	if err != nil {
		return nil, err
	}
	ids := make([]uint64, 0, len(cfgs))
	for id := range cfgs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	tmpl := cfgs[ids[0]]
	// Every ID this directory knows: its configs and their replica maps.
	// IDs are never reused, so a retired replica's ID counts.
	known := map[uint64]string{}
	for id, fc := range cfgs {
		for k, v := range fc.Replicas {
			if n, err := strconv.ParseUint(k, 10, 64); err == nil {
				known[n] = v
			}
		}
		if fc.Cell != tmpl.Cell {
			return nil, fmt.Errorf("%w: replica-%d.json is of cell %q, replica-%d.json of cell %q", ErrNotACell, id, fc.Cell, ids[0], tmpl.Cell)
		}
	}
	peers := known
	if o.peers != "" {
		if peers, err = parsePeers(o.peers); err != nil {
			return nil, err
		}
	}
	n := strconv.FormatUint(o.id, 10)
	if _, ok := known[o.id]; ok {
		return nil, fmt.Errorf("%w: replica %d is (or was) a replica of cell %q (replica-%s.json or a config's replicas name it); IDs are never reused", ErrIDInUse, o.id, tmpl.Cell, n)
	}
	if _, ok := peers[o.id]; ok {
		return nil, fmt.Errorf("%w: replica %d is one of the peers", ErrIDInUse, o.id)
	}
	for _, f := range []string{"replica-" + n + ".json", "certs/replica-" + n + ".pem", "certs/replica-" + n + "-key.pem"} {
		if _, err := os.Stat(filepath.Join(o.dir, f)); !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s exists: replica %d was issued before; IDs are never reused", ErrIDInUse, filepath.Join(o.dir, f), o.id)
		}
	}
	for id, a := range peers {
		if a == o.addr {
			return nil, fmt.Errorf("%w: address %s is replica %d's", ErrIDInUse, o.addr, id)
		}
	}
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(o.dir, p)
	}
	caPEM, err := os.ReadFile(rel(tmpl.CAFile))
	if err != nil {
		return nil, fmt.Errorf("%w: the CA certificate: %w", ErrNotACell, err)
	}
	keyFile := o.caKey
	if keyFile == "" {
		keyFile = filepath.Join(o.dir, "certs", "ca-key.pem")
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (give the cell CA's key with --ca-key)", ErrCAKeyMissing, err)
	}
	ca, err := certs.LoadCA(caPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s with %s: %w", ErrCAKeyMissing, keyFile, rel(tmpl.CAFile), err)
	}
	if tmpl.SigningKeyFile == "" {
		return nil, fmt.Errorf("%w: replica-%d.json names no signing_key_file", ErrNotACell, ids[0])
	}
	if _, err := os.Stat(rel(tmpl.SigningKeyFile)); err != nil {
		return nil, fmt.Errorf("%w: the sequencer-signing key: %w", ErrNotACell, err)
	}
	dataRel := "data/replica-" + n
	dataDir := filepath.Join(o.dir, dataRel)
	if ents, err := os.ReadDir(dataDir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("%w: %s holds %s; a joining replica starts on an empty one", ErrDataDirNotEmpty, dataDir, ents[0].Name())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", ErrDataDirNotEmpty, err)
	}
	replicas := map[string]string{n: o.addr}
	for id, a := range peers {
		replicas[strconv.FormatUint(id, 10)] = a
	}
	// The cell-wide settings come from the template; the per-process test
	// knobs (clock scale, fsync delay, unsafe_no_fsync) do not.
	fc := *tmpl
	fc.ID, fc.Replicas, fc.DataDir, fc.Join = o.id, replicas, dataRel, true
	fc.CertFile, fc.KeyFile = "certs/replica-"+n+".pem", "certs/replica-"+n+"-key.pem"
	fc.ClockScale, fc.SyncDelay, fc.UnsafeNoFsync = 0, "", false
	fc.HTTPAddr = ""
	if o.httpBase != 0 {
		fc.HTTPAddr = net.JoinHostPort(o.httpHost, strconv.Itoa(o.httpBase+int(o.id)-1))
	}
	// CAFile and SigningKeyFile stay as they are: relative ones are
	// relative to the cell directory, which holds the new config too.
	p := &joinPlan{ca: ca, cfg: fc, dataDir: dataDir}
	if _, err := os.Stat(filepath.Join(o.dir, "admin.json")); err == nil {
		p.admin = filepath.Join(o.dir, "admin.json")
	}
	return p, nil
}

// join writes what prepareJoin planned: certificate, config, data
// directory, and the new address in admin.json. If a write fails, what it
// wrote is removed.
func join(o joinOptions, p *joinPlan) (err error) {
	var made []string
	defer func() {
		if err != nil {
			for _, f := range slices.Backward(made) {
				_ = os.RemoveAll(f)
			}
		}
	}()
	write := func(rel string, b []byte) error {
		f := filepath.Join(o.dir, rel)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return err
		}
		made = append(made, f)
		return nil
	}
	if err := writeReplicaCert(p.ca, write, o.id, o.addr); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p.cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := write(fmt.Sprintf("replica-%d.json", o.id), append(b, '\n')); err != nil {
		return err
	}
	if err := cell.InitDataDir(p.dataDir); err != nil {
		return err
	}
	made = append(made, p.dataDir)
	if p.admin != "" {
		// The administrator's settings list the new address too, so that
		// lockctl finds the cell once the replaced replica is gone. Written
		// last: nothing needs undoing after it.
		b, err := os.ReadFile(p.admin)
		if err != nil {
			return err
		}
		f, err := clientfile.Parse(b)
		if err != nil {
			return fmt.Errorf("%s: %w", p.admin, err)
		}
		if !slices.Contains(f.Addrs, o.addr) {
			f.Addrs = append(f.Addrs, o.addr)
			if err := os.WriteFile(p.admin, f.Marshal(), 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// cmdJoin is lockcelld init --join.
func cmdJoin(o joinOptions, stdout, stderr io.Writer) int {
	p, err := prepareJoin(o)
	if err == nil {
		err = join(o, p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld init --join:", err)
		return exitError
	}
	var peers []string
	for k, v := range p.cfg.Replicas {
		if k != strconv.FormatUint(o.id, 10) {
			peers = append(peers, k+"="+v)
		}
	}
	sort.Strings(peers)
	d := o.dir
	fmt.Fprintf(stdout, "Prepared replica %d of cell %q at %s in %s/:\n", o.id, p.cfg.Cell, o.addr, d)
	fmt.Fprintf(stdout, "  replica-%d.json          its config (peers %s)\n", o.id, strings.Join(peers, " "))
	fmt.Fprintf(stdout, "  certs/replica-%d*.pem    its certificate, signed by the cell CA\n", o.id)
	fmt.Fprintf(stdout, "  %s/   its empty data directory (new member: it has never voted)\n", p.cfg.DataDir)
	if p.admin != "" {
		fmt.Fprintf(stdout, "  admin.json              now also lists %s\n", o.addr)
	}
	fmt.Fprintf(stdout, "\nNext (docs/operations.md, \"Replacing a replica\"):\n")
	fmt.Fprintf(stdout, "  1. On its host: lockcelld serve --config %s/replica-%d.json\n", d, o.id)
	fmt.Fprintf(stdout, "  2. Add it:      lockctl --config %s/admin.json cell add-replica %d %s\n", d, o.id, o.addr)
	fmt.Fprintf(stdout, "     or replace:  lockctl --config %s/admin.json cell replace-replica OLD-ID %d %s\n", d, o.id, o.addr)
	return exitOK
}
