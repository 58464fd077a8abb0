// Command bench-peers runs lockcell's benchmark workloads side by side on
// lockcell, etcd and ZooKeeper (make bench-peers). It is lockcell-bench
// with the etcd and ZooKeeper drivers added; run it from the repository
// root so that the default script and binary paths resolve.
//
//	bench/scripts/install-peers.sh
//	go build -o bin/ ./cmd/... && (cd bench/peers && go build -o ../../bin/ ./cmd/bench-peers)
//	bin/bench-peers --clients 1,64 --duration 10s --svg bench/results.svg
package main

import (
	"os"

	"github.com/lockcell/lockcell/bench"
	"github.com/lockcell/lockcell/bench/peers"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr, []bench.DriverFactory{
		bench.LockcellFactory(), peers.EtcdFactory(), peers.ZooKeeperFactory(),
	}))
}
