package paxos

import (
	"fmt"
	"sort"
	"strings"
)

func fmtAny(args ...any) string { return fmt.Sprint(args...) }

func describeStatus(st Status) string {
	return fmt.Sprintf("id=%d role=%s leader=%d epoch=%s promised=%s master=%v lease=%d chosen=%d applied=%d compacted=%d pending=%d",
		st.ID, st.Role, st.Leader, st.Epoch, st.Promised, st.Master, st.LeaseTicksLeft, st.Chosen, st.Applied, st.Compacted, st.Pending)
}

func describeMsgs(ms []Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.String())
		b.WriteByte(';')
	}
	return b.String()
}

func describeEntries(es []Entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(describeEntry(e))
		b.WriteByte(' ')
	}
	return b.String()
}

// logEntries returns the node's in-memory log in slot order.
func logEntries(n *Node) []Entry {
	out := make([]Entry, 0, len(n.log))
	for _, e := range n.log {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}
