// Package monotime is lockcell's monotonic time: an instant on this process's
// monotonic clock as a plain int64 of nanoseconds, and a small clock
// abstraction so that code holding a clock can be driven by a manual one in
// tests.
//
// Leases (the master lease, session leases, the client's grace period,
// lock-delay) are measured on each machine's monotonic clock and never on wall
// time (DESIGN.md, invariant 3). A Time is its own type so it cannot be mixed
// with a time.Time by accident, and it is 8 bytes, where a time.Time is 24.
// Decisions that depend on time take `now Time` as an argument and stay pure
// functions of their state and now; only the few places that must wait hold a
// Clock.
//
// A Time is meaningful only inside the process that produced it: never send
// one to another machine or store it. Send a relative time.Duration instead.
//
// Inside a testing/synctest bubble time.Now carries no monotonic reading, so
// Now is derived from the bubble's fake clock; differences between two Times
// taken in the same bubble stay exact, which is all this package promises.
package monotime
