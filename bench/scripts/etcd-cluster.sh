#!/usr/bin/env bash
# etcd cluster on loopback (five members unless BENCH_REPLICAS says), default
# durability (WAL fsync on every commit), one process per member, stopped by
# PID.
#
#   etcd-cluster.sh start            start members 1..N with fresh data
#   etcd-cluster.sh stop             stop every member (SIGTERM, then SIGKILL)
#   etcd-cluster.sh start-member N   start member N again on its data (after a kill)
#   etcd-cluster.sh endpoints        print the client endpoints, comma-separated
#   etcd-cluster.sh pids             print "N PID" for running members
#
# Member N listens for clients on 127.0.0.1:(23789+N) and peers on
# 127.0.0.1:(23799+N). State lives under $ETCD_BENCH_DIR
# (default /tmp/lockcell-bench/etcd).
# The cluster has $BENCH_REPLICAS members (3, 5 or 7; default 5), fixed by
# "start": the other commands use the number it recorded in the state
# directory.
set -euo pipefail
DIR=${ETCD_BENCH_DIR:-/tmp/lockcell-bench/etcd}
if [ "${1:-}" != start ] && [ -f "$DIR/replicas" ]; then
	N=$(cat "$DIR/replicas")
else
	N=${BENCH_REPLICAS:-5}
fi
case "$N" in 3 | 5 | 7) ;; *)
	echo "etcd-cluster.sh: BENCH_REPLICAS=$N: want 3, 5 or 7" >&2
	exit 2
	;;
esac
ETCD=${ETCD:-etcd}

client_port() { echo $((23789 + $1)); }
peer_port() { echo $((23799 + $1)); }

cluster() {
	local s="" i
	for i in $(seq 1 $N); do
		s+="m$i=http://127.0.0.1:$(peer_port $i),"
	done
	echo "${s%,}"
}

alive() { [ -f "$DIR/m$1.pid" ] && kill -0 "$(cat "$DIR/m$1.pid")" 2>/dev/null; }

start_member() {
	local i=$1 state=$2
	if alive "$i"; then return 0; fi
	mkdir -p "$DIR"
	"$ETCD" --name "m$i" --data-dir "$DIR/m$i.data" \
		--listen-client-urls "http://127.0.0.1:$(client_port $i)" \
		--advertise-client-urls "http://127.0.0.1:$(client_port $i)" \
		--listen-peer-urls "http://127.0.0.1:$(peer_port $i)" \
		--initial-advertise-peer-urls "http://127.0.0.1:$(peer_port $i)" \
		--initial-cluster "$(cluster)" --initial-cluster-state "$state" \
		--initial-cluster-token lockcell-bench \
		>"$DIR/m$i.log" 2>&1 &
	echo $! >"$DIR/m$i.pid"
}

wait_up() {
	local i deadline=$((SECONDS + 30))
	for i in $(seq 1 $N); do
		until curl -fsS "http://127.0.0.1:$(client_port $i)/health" 2>/dev/null | grep -q '"health":"true"'; do
			if [ $SECONDS -ge $deadline ]; then
				echo "etcd member $i not healthy after 30s; see $DIR/m$i.log" >&2
				return 1
			fi
			sleep 0.2
		done
	done
}

# stop_all stops members 1..7 (the most a start makes), whatever the
# size of the cluster that runs now.
stop_all() {
	local i pid
	for i in $(seq 1 7); do
		[ -f "$DIR/m$i.pid" ] || continue
		pid=$(cat "$DIR/m$i.pid")
		kill -TERM "$pid" 2>/dev/null || true
	done
	for i in $(seq 1 7); do
		[ -f "$DIR/m$i.pid" ] || continue
		pid=$(cat "$DIR/m$i.pid")
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$DIR/m$i.pid"
	done
}

case "${1:-}" in
start)
	stop_all
	rm -rf "$DIR"
	mkdir -p "$DIR"
	echo "$N" >"$DIR/replicas"
	for i in $(seq 1 $N); do start_member "$i" new; done
	wait_up
	echo "etcd: $N members up: $("$0" endpoints)"
	;;
start-member)
	start_member "${2:?member number}" existing
	;;
stop)
	stop_all
	;;
endpoints)
	s=""
	for i in $(seq 1 $N); do s+="127.0.0.1:$(client_port $i),"; done
	echo "${s%,}"
	;;
pids)
	for i in $(seq 1 $N); do
		if alive "$i"; then echo "$i $(cat "$DIR/m$i.pid")"; fi
	done
	;;
*)
	sed -n '2,18p' "$0" >&2
	exit 2
	;;
esac
