package lint

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// cellParts are the files of package cell that hold one part each, built
// from narrow dependencies: none of them may name the *Replica, reach a
// field or method of it, or hold a value of it (through another part's
// field, say). The replica wires the parts in replica.go and wire.go, and
// its own concerns (status, progress, rebuild, the HTTP listener, the
// stall, the watchdog, backups) are methods of it in their own files;
// those files are not listed.
var cellParts = []string{
	// The RPC handlers, by family, and their admission.
	"rpc.go", "rpc_admin.go", "rpc_handle.go", "rpc_lock.go", "rpc_member.go", "rpc_session.go",
	"kastream.go", "auth.go", "tokens.go",
	// Membership change and the replicated directory.
	"membership.go", "directory.go",
	// The propose pipeline, the master role and its parts.
	"pipeline.go", "master.go", "load.go", "lockhandover.go",
	"fair.go", "limits.go", "lockqueue.go", "events.go", "owners.go", "cachereg.go",
	// Metrics and the status page, over their sources.
	"metrics.go", "statuspage.go",
}

// TestCellPartsReachNoReplica type-checks package cell and fails if a
// file of cellParts uses the Replica type: a method declared on it, a
// field or method selected from it, or any expression of type Replica or
// *Replica (a parameter, a field of another part, a method expression).
// Its floor: every listed file was found and checked, and the same check
// finds uses in replica.go, so that a check that sees nothing cannot pass.
func TestCellPartsReachNoReplica(t *testing.T) {
	root := moduleRoot(t)
	uses, checked := replicaUses(t, root)
	for _, f := range cellParts {
		if !checked[f] {
			t.Errorf("cell/%s was not found among package cell's files; update cellParts", f)
			continue
		}
		if u := uses[f]; len(u) > 0 {
			t.Errorf("cell/%s reaches the Replica (give it the narrow dependency it needs instead): %s", f, strings.Join(u, "; "))
		}
	}
	if n := len(uses["replica.go"]); n < 10 {
		t.Fatalf("the check found %d uses of the Replica in replica.go, want at least 10: it sees nothing", n)
	}
}

// replicaUses type-checks package cell's non-test files (with the export
// data go list reports for its imports) and returns, per file, where it
// uses the Replica type, and the files it checked.
func replicaUses(t *testing.T, root string) (map[string][]string, map[string]bool) {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", "./cell")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./cell: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	var cell struct {
		ImportPath, Dir string
		GoFiles         []string
	}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct {
			ImportPath, Export, Dir string
			GoFiles                 []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list ./cell: %v", err)
		}
		exports[p.ImportPath] = p.Export
		if p.ImportPath == module+"/cell" {
			cell.ImportPath, cell.Dir, cell.GoFiles = p.ImportPath, p.Dir, p.GoFiles
		}
	}
	if len(cell.GoFiles) == 0 {
		t.Fatal("go list reported no files for package cell")
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range cell.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(cell.Dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check(cell.ImportPath, fset, files, info); err != nil {
		t.Fatalf("type-checking package cell: %v", err)
	}
	isReplica := func(tp types.Type) bool {
		if p, ok := tp.(*types.Pointer); ok {
			tp = p.Elem()
		}
		n, ok := tp.(*types.Named)
		return ok && n.Obj().Name() == "Replica" && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == cell.ImportPath
	}
	uses := map[string][]string{}
	checked := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(fset.Position(f.Pos()).Filename)
		checked[name] = true
		// One note per line: the first found, which for a selector is
		// the member it selects (ast.Inspect visits it before its operand).
		seen := map[int]bool{}
		note := func(n ast.Node, what string) {
			line := fset.Position(n.Pos()).Line
			if !seen[line] {
				seen[line] = true
				uses[name] = append(uses[name], "line "+strconv.Itoa(line)+": "+what)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv != nil && len(n.Recv.List) > 0 && isReplica(info.Types[n.Recv.List[0].Type].Type) {
					note(n, "method "+n.Name.Name+" of Replica")
				}
			case *ast.SelectorExpr:
				if sel, ok := info.Selections[n]; ok && isReplica(sel.Recv()) {
					note(n, "Replica."+n.Sel.Name)
					return true
				}
			}
			if e, ok := n.(ast.Expr); ok {
				if tv, ok := info.Types[e]; ok && isReplica(tv.Type) {
					note(n, "a value of type "+types.TypeString(tv.Type, func(*types.Package) string { return "" }))
				}
			}
			return true
		})
	}
	return uses, checked
}
