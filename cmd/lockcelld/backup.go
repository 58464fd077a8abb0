package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/lockcell/lockcell/cell"
)

// cmdRestore builds one replica's data directory of a new cell from a
// backup (lockctl snapshot save). Run it once per replica of the new cell,
// each with its own config, before their first start.
func cmdRestore(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockcelld restore", flag.ContinueOnError)
	from := fs.String("from", "", "the backup file (lockctl snapshot save FILE); required")
	configFile := fs.String("config", "", "the new replica's config (from 'lockcelld init --cell NEW'): its id, cell and data_dir")
	dir := fs.String("dir", "", "the new replica's data directory (instead of --config; with --id and --cell)")
	id := fs.Uint64("id", 0, "the new replica's id (with --dir)")
	name := fs.String("cell", "", "the new cell's name, which must differ from the backup's (with --dir)")
	if code, stop := parseFlags(fs, args, stdout, stderr); stop {
		return code
	}
	if *from == "" || (*configFile == "") == (*dir == "") {
		fmt.Fprintln(stderr, "lockcelld restore: give --from FILE and either --config FILE or --dir DIR --id N --cell NAME")
		return exitUsage
	}
	rc := cell.RestoreConfig{From: *from, DataDir: *dir, ID: *id, Cell: *name}
	if *configFile != "" {
		fc, err := readFileConfig(*configFile)
		if err != nil {
			fmt.Fprintln(stderr, "lockcelld restore:", err)
			return exitError
		}
		rc.DataDir, rc.ID, rc.Cell = fc.DataDir, fc.ID, fc.Cell
		if !filepath.IsAbs(rc.DataDir) {
			rc.DataDir = filepath.Join(filepath.Dir(*configFile), rc.DataDir)
		}
	}
	rec, err := cell.Restore(rc)
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld restore:", err)
		if errors.Is(err, cell.ErrInvalidConfig) {
			return exitUsage
		}
		return exitError
	}
	fmt.Fprintf(stdout, "restored %s as replica %d of cell %q\n", rc.DataDir, rc.ID, rc.Cell)
	fmt.Fprintf(stdout, "  from: cell %q, slot %d, state checksum %s (verified: the installed state recomputes to it)\n", rec.From.Cell, rec.From.Slot, rec.From.Checksum)
	fmt.Fprintf(stdout, "  new cell starts at slot %d, state checksum %s\n", rec.Slot, rec.Checksum)
	fmt.Fprintf(stdout, "  sessions ended: %d (locks released: %d, ephemeral nodes deleted: %d)\n", rec.Sessions, rec.LocksReleased, rec.EphemeralDeleted)
	fmt.Fprintf(stdout, "  session IDs, node instances and lock generations continue above %d, %d and %d\n", rec.NextSession, rec.NextInstance, rec.NextLockGen)
	return exitOK
}

// cmdCheck verifies a replica's data directory, or a backup file, offline.
func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockcelld check", flag.ContinueOnError)
	dir := fs.String("dir", "", "a replica's data directory (the replica must be stopped)")
	configFile := fs.String("config", "", "a replica's config: check its data_dir")
	backup := fs.String("backup", "", "a backup file (lockctl snapshot save) instead of a data directory")
	if code, stop := parseFlags(fs, args, stdout, stderr); stop {
		return code
	}
	n := 0
	for _, s := range []string{*dir, *configFile, *backup} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		fmt.Fprintln(stderr, "lockcelld check: give exactly one of --dir DIR, --config FILE, --backup FILE")
		return exitUsage
	}
	var (
		rep *cell.CheckReport
		err error
	)
	switch {
	case *backup != "":
		fmt.Fprintf(stdout, "checking backup %s\n", *backup)
		rep, err = cell.CheckBackup(*backup)
	default:
		d := *dir
		if *configFile != "" {
			fc, ferr := readFileConfig(*configFile)
			if ferr != nil {
				fmt.Fprintln(stderr, "lockcelld check:", ferr)
				return exitError
			}
			d = fc.DataDir
			if !filepath.IsAbs(d) {
				d = filepath.Join(filepath.Dir(*configFile), d)
			}
		}
		fmt.Fprintf(stdout, "checking data directory %s\n", d)
		rep, err = cell.CheckDataDir(d)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld check:", err)
		return exitError
	}
	_, _ = rep.WriteTo(stdout)
	if !rep.OK() {
		return exitError
	}
	return exitOK
}
