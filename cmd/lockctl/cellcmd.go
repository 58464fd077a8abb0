package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client/operator"
)

// cmdCell runs the cell operations: stepdown and the membership changes.
func cmdCell(e *env, args []string) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		out, code := e.stdout, exitOK
		if len(args) == 0 {
			out, code = e.stderr, exitUsage
		}
		fmt.Fprint(out, `usage: lockctl cell stepdown [--to N]
       lockctl cell add-replica ID ADDR
       lockctl cell remove-replica ID
       lockctl cell replace-replica OLD-ID NEW-ID ADDR

Operates the cell with the administrator's certificate from the config file.
'stepdown' asks the master to hand mastership over now (to replica N if
possible; by default to the most caught-up other replica that answers),
without waiting out its lease: a planned fail-over, for example before
maintenance on the master's host, or to watch one happen. The master
finishes the commands in flight, waits until the successor has caught
up, stops serving and tells the successor to take over at once; clients
are redirected to it, and their sessions, locks and handles survive.
'lockctl status' shows the new master.

'add-replica' adds the new replica ID, already running at ADDR (prepared
with 'lockcelld init --join'), as a learner; once it has caught up (by
snapshot, then the log) it is promoted to voter. 'remove-replica' removes
replica ID (if it is the master, it hands over first); then stop its
process: every replica refuses it. 'replace-replica' does both, one change
at a time: add NEW-ID at ADDR, catch it up, promote it, remove OLD-ID.
A replica ID is used once in a cell's life: a former member's ID is
refused. An interrupted command run again continues where it stopped.
Each prints the changes it made and the membership in force.
`)
		return code
	}
	switch args[0] {
	case "stepdown":
		return cmdCellStepDown(e, args[1:])
	case "add-replica":
		return cmdCellMember(e, "add-replica", "ID ADDR", "Adds a new replica: as a learner, then, once caught up, as a voter (administrator).", args[1:])
	case "remove-replica":
		return cmdCellMember(e, "remove-replica", "ID", "Removes a replica from the cell (administrator).", args[1:])
	case "replace-replica":
		return cmdCellMember(e, "replace-replica", "OLD-ID NEW-ID ADDR", "Replaces a replica by a new one at ADDR (administrator).", args[1:])
	}
	fmt.Fprintf(e.stderr, "lockctl cell: unknown subcommand %q (stepdown, add-replica, remove-replica, replace-replica)\n", args[0])
	return exitUsage
}

func cmdCellStepDown(e *env, args []string) int {
	fs := e.flags("cell stepdown", "[--to N]", "Asks the master to hand mastership over now (administrator).")
	to := fs.Uint64("to", 0, "the replica to hand over to, if it can (0: any)")
	if code, stop := e.parse(fs, args, 0, 0); stop {
		return code
	}
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, true)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	defer c.Close()
	st, err := operator.New(c).Status(ctx)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	// The master picks the successor itself unless told: it knows which
	// replica has caught up (the status only says who applied the most).
	got, err := operator.New(c).HandOver(ctx, *to)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	if got == 0 {
		fmt.Fprintf(e.stdout, "replica %d stepped down (epoch %s); 'lockctl status' shows the new master\n", st.Master, st.Epoch)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "replica %d stepped down (epoch %s), handing over to replica %d; 'lockctl status' shows the new master\n", st.Master, st.Epoch, got)
	return exitOK
}

// cmdCellMember runs one membership change: add-replica, remove-replica or
// replace-replica.
func cmdCellMember(e *env, sub, argsUsage, doc string, args []string) int {
	name := "cell " + sub
	fs := e.flags(name, argsUsage, doc)
	n := len(strings.Fields(argsUsage))
	code, stop := e.parse(fs, args, n, n)
	if stop {
		return code
	}
	pos := fs.Args()
	ids := make([]uint64, 0, 2)
	for _, a := range pos {
		if strings.Contains(a, ":") {
			break // the address
		}
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil || id == 0 {
			fmt.Fprintf(e.stderr, "lockctl %s: %q is not a replica ID (a positive number)\n", name, a)
			return exitUsage
		}
		ids = append(ids, id)
	}
	ctx, cancel := e.bounded()
	defer cancel()
	c, _, err := e.dial(ctx, true)
	if err != nil {
		return e.fail(name, err)
	}
	defer c.Close()
	op := operator.New(c)
	var resp *api.MembershipResponse
	switch {
	case sub == "add-replica" && len(ids) == 1:
		resp, err = op.AddReplica(ctx, ids[0], pos[1])
	case sub == "remove-replica" && len(ids) == 1:
		resp, err = op.RemoveReplica(ctx, ids[0])
	case sub == "replace-replica" && len(ids) == 2:
		resp, err = op.ReplaceReplica(ctx, ids[0], ids[1], pos[2])
	default:
		fmt.Fprintf(e.stderr, "lockctl %s: want %s (see 'lockctl %s --help')\n", name, argsUsage, name)
		return exitUsage
	}
	if err != nil {
		return e.fail(name, err)
	}
	if len(resp.Steps) == 0 {
		fmt.Fprintln(e.stdout, "nothing to change: already done")
	}
	for _, s := range resp.Steps {
		fmt.Fprintln(e.stdout, s)
	}
	fmt.Fprint(e.stdout, formatMembership(resp))
	return exitOK
}

// formatMembership prints a membership, one replica a line.
func formatMembership(resp *api.MembershipResponse) string {
	var b strings.Builder
	if resp.Slot == 0 {
		fmt.Fprintln(&b, "membership (the cell's first):")
	} else {
		fmt.Fprintf(&b, "membership (chosen at slot %d):\n", resp.Slot)
	}
	line := func(id uint64, role string) {
		fmt.Fprintf(&b, "  replica %d  %-7s  %s\n", id, role, resp.Addrs[id])
	}
	for _, id := range resp.Voters {
		line(id, "voter")
	}
	for _, id := range resp.Learners {
		line(id, "learner")
	}
	return b.String()
}
