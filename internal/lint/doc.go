// Package lint holds repository-wide checks that run as plain Go tests: the
// import-direction rule of DESIGN.md, the purity rule of the paxos core,
// and the rule that package cell's parts (its handlers, membership,
// pipeline, master role parts, metrics and status page) reach their
// replica through narrow dependencies, never through the *Replica.
package lint
