package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// withSession runs fn with a session, bounded by --timeout.
func (e *env) withSession(name string, fn func(s *client.Session) error) int {
	ctx, cancel := e.bounded()
	defer cancel()
	s, closeAll, err := e.session(ctx)
	if err != nil {
		return e.fail(name, err)
	}
	defer closeAll()
	if err := fn(s); err != nil {
		return e.fail(name, err)
	}
	return exitOK
}

// resolve turns a path as the user typed it into the cell's form: a
// relative path is taken below the session's tenant root ("dir/x" is
// "/<tenant>/dir/x"), and trailing slashes are dropped ("/t/dir/" is
// "/t/dir").
func resolve(s *client.Session, p string) string {
	if p != "" && !strings.HasPrefix(p, "/") && s.Tenant() != "" {
		p = "/" + s.Tenant() + "/" + p
	}
	for len(p) > 1 && strings.HasSuffix(p, "/") {
		p = p[:len(p)-1]
	}
	return p
}

// errIsDir: get on a directory.
var errIsDir = errors.New("is a directory")

func cmdGet(e *env, args []string) int {
	fs := e.flags("get", "PATH", "Prints the contents of the file at PATH (a relative PATH is below your tenant's root).")
	if code, stop := e.parse(fs, args, 1, 1); stop {
		return code
	}
	return e.withSession("get", func(s *client.Session) error {
		ctx, cancel := e.bounded()
		defer cancel()
		path := resolve(s, fs.Arg(0))
		h, err := s.Open(ctx, path, client.OpenOptions{})
		if err != nil {
			return err
		}
		b, st, err := h.GetContents(ctx)
		if err != nil {
			return err
		}
		if st.IsDir {
			return fmt.Errorf("%s %w (list it with 'lockctl ls %s')", path, errIsDir, path)
		}
		if _, err = e.stdout.Write(b); err != nil {
			return err
		}
		if len(b) > 0 && b[len(b)-1] != '\n' && isTerminal(e.stdout) {
			// Leave the shell's prompt on a line of its own.
			_, err = io.WriteString(e.stdout, "\n")
		}
		return err
	})
}

func cmdPut(e *env, args []string) int {
	fs := e.flags("put", "PATH VALUE | PATH -", "Writes VALUE (or standard input, for -) to the file at PATH, creating it.")
	ephemeral := fs.Bool("ephemeral", false, "create the file ephemeral (deleted when this command's session ends)")
	if code, stop := e.parse(fs, args, 2, 2); stop {
		return code
	}
	data := []byte(fs.Arg(1))
	if fs.Arg(1) == "-" {
		b, err := io.ReadAll(io.LimitReader(e.stdin, 1<<20))
		if err != nil {
			return e.fail("put", err)
		}
		data = b
	}
	return e.withSession("put", func(s *client.Session) error {
		ctx, cancel := e.bounded()
		defer cancel()
		h, info, err := s.OpenStat(ctx, resolve(s, fs.Arg(0)), client.OpenOptions{Create: true, Ephemeral: *ephemeral, Contents: data})
		if err != nil {
			return err
		}
		if info.Created {
			return nil
		}
		_, err = h.SetContents(ctx, data)
		return err
	})
}

func cmdMkdir(e *env, args []string) int {
	fs := e.flags("mkdir", "PATH", "Creates the directory PATH (its parent must exist).")
	if code, stop := e.parse(fs, args, 1, 1); stop {
		return code
	}
	return e.withSession("mkdir", func(s *client.Session) error {
		ctx, cancel := e.bounded()
		defer cancel()
		_, err := s.Open(ctx, resolve(s, fs.Arg(0)), client.OpenOptions{MustCreate: true, Dir: true})
		return err
	})
}

func cmdLs(e *env, args []string) int {
	fs := e.flags("ls", "PATH", "Lists the directory PATH: one child per line, directories with a trailing /.\nA relative PATH is below your tenant's root; / lists the tenant roots you can see.")
	long := fs.Bool("l", false, "long listing: size, lock mode and generations")
	if code, stop := e.parse(fs, args, 1, 1); stop {
		return code
	}
	if strings.Trim(fs.Arg(0), "/") == "" && fs.Arg(0) != "" {
		return lsRoot(e)
	}
	return e.withSession("ls", func(s *client.Session) error {
		ctx, cancel := e.bounded()
		defer cancel()
		path := resolve(s, fs.Arg(0))
		h, err := s.Open(ctx, path, client.OpenOptions{})
		if err != nil {
			return err
		}
		entries, err := h.ReadDir(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		for _, de := range entries {
			name := de.Name
			if de.Stat.IsDir {
				name += "/"
			}
			if *long {
				fmt.Fprintf(tw, "%s\t%d\t%s\tcgen %d\tlgen %d\n", name, de.Stat.Size, de.Stat.LockMode, de.Stat.ContentGeneration, de.Stat.LockGeneration)
			} else {
				fmt.Fprintln(tw, name)
			}
		}
		return tw.Flush()
	})
}

func cmdStat(e *env, args []string) int {
	fs := e.flags("stat", "PATH", "Prints the metadata of the node at PATH.")
	if code, stop := e.parse(fs, args, 1, 1); stop {
		return code
	}
	return e.withSession("stat", func(s *client.Session) error {
		ctx, cancel := e.bounded()
		defer cancel()
		h, err := s.Open(ctx, resolve(s, fs.Arg(0)), client.OpenOptions{})
		if err != nil {
			return err
		}
		st, err := h.Stat(ctx)
		if err != nil {
			return err
		}
		printStat(e.stdout, resolve(s, fs.Arg(0)), st)
		return nil
	})
}

func printStat(w io.Writer, path string, st api.NodeStat) {
	kind := "file"
	if st.IsDir {
		kind = "directory"
	}
	ts := func(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "path:\t%s\n", path)
	fmt.Fprintf(tw, "type:\t%s\n", kind)
	fmt.Fprintf(tw, "instance:\t%d\n", st.Instance)
	fmt.Fprintf(tw, "size:\t%d\n", st.Size)
	fmt.Fprintf(tw, "content generation:\t%d\n", st.ContentGeneration)
	fmt.Fprintf(tw, "lock:\t%s (holders %d, generation %d)\n", st.LockMode, st.LockHolders, st.LockGeneration)
	fmt.Fprintf(tw, "lock-delay:\t%v\n", time.Duration(st.LockDelay))
	fmt.Fprintf(tw, "acl generation:\t%d\n", st.ACLGeneration)
	fmt.Fprintf(tw, "acl:\tread=%q write=%q change-acl=%q\n", st.ACL.Read, st.ACL.Write, st.ACL.ChangeACL)
	if st.EphemeralOwner != 0 {
		fmt.Fprintf(tw, "ephemeral owner:\tsession %d\n", st.EphemeralOwner)
	}
	fmt.Fprintf(tw, "created:\t%s\n", ts(st.Created))
	fmt.Fprintf(tw, "modified:\t%s\n", ts(st.Modified))
	fmt.Fprintf(tw, "checksum:\t%016x\n", st.Checksum)
	_ = tw.Flush()
}

func cmdRm(e *env, args []string) int {
	fs := e.flags("rm", "PATH", "Deletes the node at PATH (a directory must be empty).")
	if code, stop := e.parse(fs, args, 1, 1); stop {
		return code
	}
	return e.withSession("rm", func(s *client.Session) error {
		ctx, cancel := e.bounded()
		defer cancel()
		h, err := s.Open(ctx, resolve(s, fs.Arg(0)), client.OpenOptions{})
		if err != nil {
			return err
		}
		return h.Delete(ctx)
	})
}

// lsRoot lists "/": the tenant roots the caller can see - every tenant for
// the cell administrator, else the caller's own.
func lsRoot(e *env) int {
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, false)
	if err != nil {
		return e.fail("ls", err)
	}
	defer c.Close()
	ts, err := operator.New(c).ListTenants(ctx)
	if err != nil {
		return e.fail("ls", err)
	}
	names := make([]string, 0, len(ts))
	for _, t := range ts {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(e.stdout, "%s/\n", n)
	}
	return exitOK
}
