// Command lockcell-bench runs lockcell's benchmark workloads against a cell
// of lockcelld processes (or an in-process cell) and writes one JSON line
// per run, a summary table and, with --svg, a plot. The side-by-side
// comparison with etcd and ZooKeeper is bench/peers (make bench-peers).
//
//	go build -o bin/ ./cmd/... && go run ./bench/cmd/lockcell-bench --duration 5s --svg bench.svg
//
// Run with -h for the flags.
package main

import (
	"os"

	"github.com/lockcell/lockcell/bench"
)

func main() {
	os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr, []bench.DriverFactory{bench.LockcellFactory()}))
}
