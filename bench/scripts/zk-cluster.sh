#!/usr/bin/env bash
# ZooKeeper ensemble on loopback (five servers unless BENCH_REPLICAS says)
# from the distribution's package, default durability (forceSync=yes: the
# transaction log is fsynced before a write is acknowledged), one JVM per
# server, stopped by PID.
#
#   zk-cluster.sh start            start servers 1..N with fresh data
#   zk-cluster.sh stop             stop every server (SIGTERM, then SIGKILL)
#   zk-cluster.sh start-member N   start server N again on its data (after a kill)
#   zk-cluster.sh endpoints        print the client endpoints, comma-separated
#   zk-cluster.sh pids             print "N PID" for running servers
#
# Server N listens for clients on 127.0.0.1:(21809+N), quorum traffic on
# 28879+N and leader election on 38879+N. Changed from the package's
# zoo.cfg only where five servers on one host need it: ports, no admin web
# server (it would take port 8080 five times), no per-address connection
# cap (every benchmark client comes from 127.0.0.1), and the srvr/mntr
# four-letter words. State lives under $ZK_BENCH_DIR (default
# /tmp/lockcell-bench/zk).
# The cluster has $BENCH_REPLICAS members (3, 5 or 7; default 5), fixed by
# "start": the other commands use the number it recorded in the state
# directory.
set -euo pipefail
DIR=${ZK_BENCH_DIR:-/tmp/lockcell-bench/zk}
if [ "${1:-}" != start ] && [ -f "$DIR/replicas" ]; then
	N=$(cat "$DIR/replicas")
else
	N=${BENCH_REPLICAS:-5}
fi
case "$N" in 3 | 5 | 7) ;; *)
	echo "zk-cluster.sh: BENCH_REPLICAS=$N: want 3, 5 or 7" >&2
	exit 2
	;;
esac
JAVA=${JAVA:-java}
CP="/usr/share/java/zookeeper.jar"
HEAP=${ZK_HEAP:-512m}

client_port() { echo $((21809 + $1)); }

alive() { [ -f "$DIR/s$1.pid" ] && kill -0 "$(cat "$DIR/s$1.pid")" 2>/dev/null; }

write_config() {
	local i=$1 j
	mkdir -p "$DIR/s$i/data" "$DIR/s$i/conf"
	echo "$i" >"$DIR/s$i/data/myid"
	{
		echo "tickTime=2000"
		echo "initLimit=10"
		echo "syncLimit=5"
		echo "dataDir=$DIR/s$i/data"
		echo "clientPortAddress=127.0.0.1"
		echo "clientPort=$(client_port "$i")"
		echo "maxClientCnxns=0"
		echo "admin.enableServer=false"
		echo "4lw.commands.whitelist=srvr,mntr,ruok"
		for j in $(seq 1 $N); do
			echo "server.$j=127.0.0.1:$((28879 + j)):$((38879 + j))"
		done
	} >"$DIR/s$i/conf/zoo.cfg"
	cp /etc/zookeeper/conf/log4j.properties "$DIR/s$i/conf/" 2>/dev/null || true
}

start_member() {
	local i=$1
	if alive "$i"; then return 0; fi
	(
		ulimit -n 200000 2>/dev/null || ulimit -n 65536 2>/dev/null || true
		exec "$JAVA" -Xmx"$HEAP" -Dzookeeper.log.dir="$DIR/s$i" -Dzookeeper.root.logger=WARN,CONSOLE \
			-cp "$DIR/s$i/conf:$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$DIR/s$i/conf/zoo.cfg" \
			>"$DIR/s$i.log" 2>&1
	) &
	echo $! >"$DIR/s$i.pid"
}

wait_up() {
	local i deadline=$((SECONDS + 60)) mode
	for i in $(seq 1 $N); do
		until mode=$( (exec 3<>/dev/tcp/127.0.0.1/"$(client_port "$i")" && printf srvr >&3 && cat <&3) 2>/dev/null | sed -n 's/^Mode: //p') && [ -n "$mode" ]; do
			if [ $SECONDS -ge $deadline ]; then
				echo "ZooKeeper server $i not serving after 60s; see $DIR/s$i.log" >&2
				return 1
			fi
			sleep 0.3
		done
	done
}

# stop_all stops members 1..7 (the most a start makes), whatever the
# size of the cluster that runs now.
stop_all() {
	local i pid
	for i in $(seq 1 7); do
		[ -f "$DIR/s$i.pid" ] || continue
		kill -TERM "$(cat "$DIR/s$i.pid")" 2>/dev/null || true
	done
	for i in $(seq 1 7); do
		[ -f "$DIR/s$i.pid" ] || continue
		pid=$(cat "$DIR/s$i.pid")
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$DIR/s$i.pid"
	done
}

case "${1:-}" in
start)
	stop_all
	rm -rf "$DIR"
	mkdir -p "$DIR"
	echo "$N" >"$DIR/replicas"
	for i in $(seq 1 $N); do write_config "$i"; done
	for i in $(seq 1 $N); do start_member "$i"; done
	wait_up
	echo "zookeeper: $N servers up: $("$0" endpoints)"
	;;
start-member)
	start_member "${2:?server number}"
	;;
stop)
	stop_all
	;;
endpoints)
	s=""
	for i in $(seq 1 $N); do s+="127.0.0.1:$(client_port "$i"),"; done
	echo "${s%,}"
	;;
pids)
	for i in $(seq 1 $N); do
		if alive "$i"; then echo "$i $(cat "$DIR/s$i.pid")"; fi
	done
	;;
*)
	sed -n '2,24p' "$0" >&2
	exit 2
	;;
esac
