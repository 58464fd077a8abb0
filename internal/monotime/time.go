package monotime

import "time"

// origin is the instant Now measures from. It is a time.Time taken at process
// start, so it carries a monotonic reading and time.Since(origin) does too.
var origin = time.Now()

// Time is an instant on the process's monotonic clock, in nanoseconds since
// an arbitrary origin fixed at process start. Times compare with the ordinary
// operators (or Before and After). The zero value has no special meaning; do
// not use it as "unset".
type Time int64

// Now returns the current instant of the process's monotonic clock.
func Now() Time {
	return Time(time.Since(origin))
}

// Add returns the instant t+d.
func (t Time) Add(d time.Duration) Time {
	return t + Time(d)
}

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration {
	return time.Duration(t - u)
}

// Before reports whether t is strictly before u.
func (t Time) Before(u Time) bool {
	return t < u
}

// After reports whether t is strictly after u.
func (t Time) After(u Time) bool {
	return t > u
}
