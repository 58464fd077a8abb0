package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/lockcell/lockcell"

// allowed lists, for each package of ours (by its path inside the module), the
// packages of ours its non-test files may import. It is the table in
// ../shared/STYLE.md ("Package dependency direction"), which mirrors the layer
// picture in ../shared/DESIGN.md. Every package may import internal/...
// helpers (but see internalLimited); internal/... packages may import only
// each other. A package is
// matched by its longest listed prefix ("tools" covers tools/nemesis).
// Beyond the DESIGN.md picture, packages within tools/ may import each
// other (tools/nemesis reuses tools/fencedkv), and so may packages within
// bench/ (bench/cmd/... runs the bench harness); cmd/* never import each
// other, and nothing outside the top layer imports it. One edge goes beyond
// the style guide's table: tools/ may import transport, because the
// fault-injection suite builds the transport's fault rules (partitions,
// delays) that it sends to replicas' /debug/faults. Another: cmd/lockcelld
// may import api, because `lockcelld dev --procs` creates the dev tenant
// through client/operator, whose calls take and return api's types.
// client/operator (the operators' and administrator's calls) builds on
// client's connection and sits just above it; it imports transport only
// for the frame type of a streamed reply (SaveSnapshot). cell/celltest's
// "transport" includes the simulated network, transport/memnet.
var allowed = map[string][]string{
	"paxos":             {},
	"paxos/paxostest":   {"paxos"},
	"sequencer":         {},
	"api":               {},
	"transport":         {},
	"namespace":         {"api", "sequencer"},
	"session":           {"api"},
	"cell":              {"paxos", "namespace", "session", "sequencer", "api", "transport"},
	"cell/celltest":     {"cell", "client", "api", "transport", "transport/memnet"},
	"client":            {"api", "transport", "sequencer"},
	"client/operator":   {"client", "api", "transport"},
	"cmd/lockcelld":     {"cell", "client", "client/operator", "api"},
	"cmd/lockctl":       {"client", "client/operator", "api"},
	"tools":             {"client", "client/operator", "api", "sequencer", "cell", "cell/celltest", "namespace", "paxos", "transport"},
	"bench":             {"client", "client/operator", "api", "sequencer", "cell", "cell/celltest"},
	"internal":          {},
	"internal/proccell": {"api", "client", "client/operator", "transport"},
}

// internalLimited lists the packages that may import only the listed
// internal/... helpers, not every one: paxos and sequencer stay free of the
// rest of the tree (sequencer is linked by protected servers; paxos is a
// pure state machine), and internal/wire, which both use, imports nothing
// of ours.
var internalLimited = map[string][]string{
	"paxos":         {"internal/wire"},
	"sequencer":     {"internal/wire"},
	"internal/wire": {},
}

// stdOnly lists the packages whose non-test files may import only the
// standard library (no third-party module either).
var stdOnly = []string{"sequencer", "internal/wire"}

// topLayerInternal are internal packages that belong to the top layer:
// only cmd, tools and bench, and tests, may import them.
var topLayerInternal = []string{"internal/proccell"}

// pureCoreForbidden are standard-library imports the paxos core must not use:
// it is a deterministic state machine (DESIGN.md). Only its Pebble storage
// file (named storage_pebble*.go) may touch the disk.
var pureCoreForbidden = []string{"time", "net", "os", "math/rand", "math/rand/v2", "sync", "sync/atomic"}

// edge is one import of ours found in a file.
type edge struct {
	file   string // path relative to the module root
	from   string // importing package, relative to the module root
	to     string // imported package, relative to the module root
	isTest bool
}

func TestImportDirection(t *testing.T) {
	root := moduleRoot(t)
	edges, stdImports, nonStd := collect(t, root)
	for _, v := range checkEdges(edges) {
		t.Error(v)
	}
	for _, v := range checkPaxosPurity(stdImports) {
		t.Error(v)
	}
	for _, v := range checkStdOnly(nonStd) {
		t.Error(v)
	}
}

// TestCheckerCatchesBadEdges proves the checker can fail: each planted edge
// breaks the layering and must be reported.
func TestCheckerCatchesBadEdges(t *testing.T) {
	bad := []edge{
		{file: "paxos/x.go", from: "paxos", to: "namespace"},
		{file: "namespace/x.go", from: "namespace", to: "cell"},
		{file: "session/x.go", from: "session", to: "paxos"},
		{file: "client/x.go", from: "client", to: "cell"},
		{file: "cell/x.go", from: "cell", to: "client"},
		{file: "transport/x.go", from: "transport", to: "api"},
		{file: "cell/x_test.go", from: "cell", to: "cmd/lockctl", isTest: true},
		{file: "internal/certs/x.go", from: "internal/certs", to: "api"},
		{file: "weird/x.go", from: "weird", to: "api"},
		{file: "cmd/lockctl/x.go", from: "cmd/lockctl", to: "cmd/lockcelld"},
		{file: "bench/x.go", from: "bench", to: "tools/nemesis"},
		{file: "client/x.go", from: "client", to: "client/operator"},
		{file: "client/operator/x.go", from: "client/operator", to: "cell"},
		{file: "paxos/x.go", from: "paxos", to: "internal/invariants"},
		{file: "sequencer/x.go", from: "sequencer", to: "internal/certs"},
		{file: "internal/wire/x.go", from: "internal/wire", to: "internal/invariants"},
		{file: "cell/x.go", from: "cell", to: "internal/proccell"},
		{file: "client/x.go", from: "client", to: "internal/proccell"},
		{file: "internal/proccell/x.go", from: "internal/proccell", to: "cell"},
		{file: "internal/certs/x.go", from: "internal/certs", to: "internal/proccell"},
	}
	for _, e := range bad {
		if v := checkEdges([]edge{e}); len(v) != 1 {
			t.Errorf("edge %s -> %s (%s) not reported", e.from, e.to, e.file)
		}
	}
	good := []edge{
		{file: "cmd/lockctl/x.go", from: "cmd/lockctl", to: "client/operator"},
		{file: "client/operator/x.go", from: "client/operator", to: "client"},
		{file: "cell/x.go", from: "cell", to: "paxos"},
		{file: "client/x.go", from: "client", to: "internal/certs"},
		{file: "tools/nemesis/x.go", from: "tools/nemesis", to: "client"},
		{file: "client/x_test.go", from: "client", to: "cell", isTest: true},
		{file: "tools/nemesis/x.go", from: "tools/nemesis", to: "tools/fencedkv"},
		{file: "bench/cmd/b/x.go", from: "bench/cmd/b", to: "bench"},
		{file: "paxos/x.go", from: "paxos", to: "internal/wire"},
		{file: "sequencer/x.go", from: "sequencer", to: "internal/wire"},
		{file: "namespace/x.go", from: "namespace", to: "internal/wire"},
		{file: "paxos/x_test.go", from: "paxos", to: "internal/invariants", isTest: true},
		{file: "bench/x.go", from: "bench", to: "internal/proccell"},
		{file: "tools/nemesis/x.go", from: "tools/nemesis", to: "internal/proccell"},
		{file: "cmd/lockcelld/x_test.go", from: "cmd/lockcelld", to: "internal/proccell", isTest: true},
		{file: "internal/proccell/x.go", from: "internal/proccell", to: "client"},
		{file: "internal/proccell/x.go", from: "internal/proccell", to: "internal/certs"},
	}
	if v := checkEdges(good); len(v) != 0 {
		t.Errorf("allowed edges reported: %v", v)
	}
	impure := map[string][]string{"paxos/node.go": {"time"}, "paxos/storage_pebble.go": {"os"}}
	if v := checkPaxosPurity(impure); len(v) != 1 {
		t.Errorf("purity check: got %v, want exactly paxos/node.go reported", v)
	}
	third := map[string][]string{"internal/wire/x.go": {"github.com/vmihailenco/msgpack/v5"}, "namespace/x.go": {"github.com/cockroachdb/pebble/v2"}}
	if v := checkStdOnly(third); len(v) != 1 {
		t.Errorf("standard-library-only check: got %v, want exactly internal/wire/x.go reported", v)
	}
}

// checkStdOnly reports third-party imports (nonStd: per non-test file) in
// the stdOnly packages.
func checkStdOnly(nonStd map[string][]string) []string {
	var out []string
	files := make([]string, 0, len(nonStd))
	for f := range nonStd {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if contains(stdOnly, filepath.ToSlash(filepath.Dir(f))) {
			for _, imp := range nonStd[f] {
				out = append(out, f+": imports "+imp+", but its package may import only the standard library")
			}
		}
	}
	return out
}

func checkEdges(edges []edge) []string {
	var out []string
	for _, e := range edges {
		if e.from == e.to {
			continue
		}
		if top := topLayerOf(e.from); top != "" && top == topLayerOf(e.to) && top != "cmd" {
			// tools/nemesis may use tools/fencedkv, bench/cmd/x the bench
			// harness: a top-layer tree may share its own packages.
			continue
		}
		if e.isTest {
			// Tests may wire anything together (an Example in client runs
			// against an in-process cell), but nothing imports the top layer.
			if isTopLayer(e.to) {
				out = append(out, e.file+": test imports "+e.to+", and nothing may import cmd, tools or bench")
			}
			continue
		}
		if only, ok := internalLimited[e.from]; ok && strings.HasPrefix(e.to, "internal/") {
			if !contains(only, e.to) {
				out = append(out, e.file+": "+e.from+" imports "+e.to+"; of internal/... it may import only "+strings.Join(only, ", ")+" (internal/lint internalLimited)")
			}
			continue
		}
		if contains(topLayerInternal, e.to) && !isTopLayer(e.from) {
			out = append(out, e.file+": "+e.from+" imports "+e.to+", a top-layer harness only cmd, tools and bench may import")
			continue
		}
		if strings.HasPrefix(e.to, "internal/") && (!strings.HasPrefix(e.from, "internal") || contains(topLayerInternal, e.from)) {
			continue
		}
		key, ok := tableKey(e.from)
		if !ok {
			out = append(out, e.file+": package "+e.from+" is not in the layer table (internal/lint/imports_test.go); add it there and to DESIGN.md")
			continue
		}
		if strings.HasPrefix(key, "internal") && !contains(topLayerInternal, key) {
			if !strings.HasPrefix(e.to, "internal/") {
				out = append(out, e.file+": internal helper "+e.from+" imports "+e.to)
			}
			continue
		}
		if !contains(allowed[key], e.to) {
			out = append(out, e.file+": "+e.from+" imports "+e.to+", an edge not in the DESIGN.md picture")
		}
	}
	return out
}

func checkPaxosPurity(stdImports map[string][]string) []string {
	var out []string
	files := make([]string, 0, len(stdImports))
	for f := range stdImports {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if filepath.Dir(f) != "paxos" || strings.HasPrefix(filepath.Base(f), "storage_pebble") {
			continue
		}
		for _, imp := range stdImports[f] {
			if contains(pureCoreForbidden, imp) {
				out = append(out, f+": the paxos core imports "+imp+"; it must stay free of clocks, sockets, disk, goroutines and global randomness")
			}
		}
	}
	return out
}

// topLayerOf returns "cmd", "tools" or "bench" for a package in that tree,
// and "" otherwise.
func topLayerOf(p string) string {
	for _, top := range []string{"cmd", "tools", "bench"} {
		if p == top || strings.HasPrefix(p, top+"/") {
			return top
		}
	}
	return ""
}

func isTopLayer(p string) bool {
	for _, top := range []string{"cmd", "tools", "bench"} {
		if p == top || strings.HasPrefix(p, top+"/") {
			return true
		}
	}
	return false
}

func tableKey(pkg string) (string, bool) {
	best := ""
	for k := range allowed {
		if (pkg == k || strings.HasPrefix(pkg, k+"/")) && len(k) > len(best) {
			best = k
		}
	}
	return best, best != ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// collect parses every .go file of the main module (not testdata, not nested
// modules such as bench/peers) and returns the import edges between our
// packages, and per non-test file its standard-library imports and its
// third-party ones.
func collect(t *testing.T, root string) ([]edge, map[string][]string, map[string][]string) {
	t.Helper()
	var edges []edge
	std := map[string][]string{}
	nonStd := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "data" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module has its own rules
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		from := filepath.ToSlash(filepath.Dir(rel))
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			switch {
			case p == module || strings.HasPrefix(p, module+"/"):
				to := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
				edges = append(edges, edge{file: filepath.ToSlash(rel), from: from, to: to, isTest: isTest})
			case !strings.Contains(strings.Split(p, "/")[0], ".") && !isTest:
				std[filepath.ToSlash(rel)] = append(std[filepath.ToSlash(rel)], p)
			case !isTest:
				nonStd[filepath.ToSlash(rel)] = append(nonStd[filepath.ToSlash(rel)], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return edges, std, nonStd
}
