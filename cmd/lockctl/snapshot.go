package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// cmdSnapshot runs the backup commands: snapshot save.
func cmdSnapshot(e *env, args []string) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		out, code := e.stdout, exitOK
		if len(args) == 0 {
			out, code = e.stderr, exitUsage
		}
		fmt.Fprint(out, `usage: lockctl snapshot save FILE

'save' asks the master for a backup of the cell's whole state (cell
administrator only: use admin.json or --admin), consistent at one applied
slot, and writes it to FILE atomically (a temporary file beside it, fsynced,
then renamed): FILE never holds a partial backup. It prints the slot, the
state checksum and the cell's identity. 'lockcelld check --backup FILE'
verifies a backup offline; 'lockcelld restore --from FILE' builds a new cell
from it (docs/operations.md, "Backup and restore").
`)
		return code
	}
	switch args[0] {
	case "save":
		return cmdSnapshotSave(e, args[1:])
	}
	fmt.Fprintf(e.stderr, "lockctl snapshot: unknown subcommand %q (save)\n", args[0])
	return exitUsage
}

func cmdSnapshotSave(e *env, args []string) int {
	fs := e.flags("snapshot save", "FILE", "Saves a backup of the cell's state to FILE (administrator).")
	if code, stop := e.parse(fs, args, 1, 1); stop {
		return code
	}
	path := fs.Arg(0)
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, false)
	if err != nil {
		return e.fail("snapshot save", err)
	}
	defer c.Close()
	head, err := saveSnapshotFile(ctx, c, path)
	if err != nil {
		return e.fail("snapshot save", err)
	}
	fmt.Fprintf(e.stdout, "saved %s: cell %q, slot %d, state checksum %016x, %d bytes, taken by replica %d (format %d)\n",
		path, head.Cell, head.Slot, head.Checksum, head.Size, head.Master, head.Format)
	return exitOK
}

// saveSnapshotFile streams the backup into a temporary file beside path,
// fsyncs it, renames it over path and fsyncs the directory. On any failure
// the temporary file is removed and path is untouched.
func saveSnapshotFile(ctx context.Context, c *client.Client, path string) (head api.SaveSnapshotResponse, err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return head, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	head, err = operator.New(c).SaveSnapshot(ctx, f)
	if err != nil {
		return head, err
	}
	if err = f.Sync(); err != nil {
		return head, err
	}
	if err = f.Close(); err != nil {
		return head, err
	}
	if err = os.Rename(tmp, path); err != nil {
		return head, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return head, err
	}
	err = d.Sync()
	_ = d.Close()
	return head, err
}
