//go:build lockcell_weaken_lockctx

package client

// exactLease is false in builds with the lockcell_weaken_lockctx tag: lock
// contexts and the session state then ignore the lease deadline and change
// only when the KeepAlive goroutine's timer runs, so a holder paused past
// its lease resumes believing it still holds its locks.
//
// NB: this build exists only so that the fault-injection suite can prove
// that its mutual-exclusion checker fires (a weakened run must report
// overlapping holds). Never ship a binary built with this tag.
const exactLease = false
