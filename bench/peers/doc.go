// Package peers holds the benchmark drivers for the systems lockcell is
// compared with — etcd (go.etcd.io/etcd/client/v3, concurrency.Mutex) and
// ZooKeeper (github.com/go-zookeeper/zk, Lock) — in a Go module of its own,
// so that lockcell's module does not depend on their client libraries. The
// clusters run on loopback, five members unless --replicas says 3 or 7,
// started by bench/scripts/etcd-cluster.sh and zk-cluster.sh (told the size
// in BENCH_REPLICAS), which this package calls to start, stop, list and
// restart members.
package peers
