package main

import (
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// cmdCell runs the cell operations: stepdown.
func cmdCell(e *env, args []string) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		out, code := e.stdout, exitOK
		if len(args) == 0 {
			out, code = e.stderr, exitUsage
		}
		fmt.Fprint(out, `usage: lockctl cell stepdown [--to N]

Operates the cell with the administrator's certificate from the config file.
'stepdown' asks the master to hand mastership over now (to replica N if
possible; by default to the most caught-up other replica that answers),
without waiting out its lease: a planned fail-over, for example
before maintenance on the master's host, or to watch one happen. Sessions
survive it. 'lockctl status' shows the new master.
`)
		return code
	}
	switch args[0] {
	case "stepdown":
		return cmdCellStepDown(e, args[1:])
	}
	fmt.Fprintf(e.stderr, "lockctl cell: unknown subcommand %q (stepdown)\n", args[0])
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
	st, err := c.Status(ctx)
	if err != nil {
		return e.fail("cell stepdown", err)
	}
	next := *to
	if next == 0 {
		next = successor(st)
	}
	if err := c.StepDown(ctx, next); err != nil {
		return e.fail("cell stepdown", err)
	}
	fmt.Fprintf(e.stdout, "replica %d stepped down (epoch %s), handing over to replica %d; 'lockctl status' shows the new master\n", st.Master, st.Epoch, next)
	return exitOK
}

// successor picks the replica to hand mastership to: of the replicas other
// than the master that reported themselves recently, the one that applied
// the most (the lowest id among equals), so that the hand-over lands on a
// replica that is up and caught up, and never back on the master. 0 if
// none qualifies (the master then picks).
func successor(st *api.CellStatusResponse) uint64 {
	var best *api.ReplicaStatus
	for i := range st.Replicas {
		r := &st.Replicas[i]
		if r.ID == st.Master || r.HeardMillis < 0 || r.HeardMillis > 2000 || r.Role == api.RoleLearner {
			continue
		}
		if best == nil || r.Applied > best.Applied {
			best = r
		}
	}
	if best == nil {
		return 0
	}
	return best.ID
}
