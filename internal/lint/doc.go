// Package lint holds repository-wide checks that run as plain Go tests: the
// import-direction rule of DESIGN.md and the purity rule of the paxos core.
package lint
