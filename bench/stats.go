package bench

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Histogram buckets durations log-linearly: values below subBuckets
// nanoseconds are exact, and every power of two above is split into
// subBuckets equal buckets, so a quantile is off by at most 1/(2·subBuckets)
// of its value (under 0.8%). It is the HDR histogram idea in a fixed array:
// recording is an index computation and an increment, merging is addition.
//
// A Histogram is not safe for concurrent use; give each worker its own and
// Merge them.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

const (
	subBucketBits = 6
	subBuckets    = 1 << subBucketBits
	// numBuckets covers every non-negative int64: 64 exact values, then 57
	// octaves of 64 buckets.
	numBuckets = subBuckets + (63-subBucketBits)*subBuckets
)

// bucketOf returns the bucket index of v ≥ 0.
func bucketOf(v int64) int {
	if v < subBuckets {
		return int(v)
	}
	exp := bits.Len64(uint64(v)) - subBucketBits - 1
	return subBuckets + exp*subBuckets + int(uint64(v)>>exp) - subBuckets
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < subBuckets {
		return int64(i), int64(i)
	}
	exp := (i - subBuckets) / subBuckets
	m := int64((i-subBuckets)%subBuckets + subBuckets)
	return m << exp, (m+1)<<exp - 1
}

// Record adds one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max return the exact extremes (0 when empty).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest recorded value (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the exact mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) by the nearest-rank rule —
// the smallest recorded value v such that at least q·n values are ≤ v — up
// to the bucket's resolution: the answer is the middle of that value's
// bucket, clamped to [Min, Max]. It returns 0 for an empty histogram and
// panics on a q outside [0, 1] (a programming error, not input).
func (h *Histogram) Quantile(q float64) time.Duration {
	if q < 0 || q > 1 || math.IsNaN(q) {
		panic(fmt.Sprintf("bench: quantile %v outside [0, 1]", q))
	}
	if h.n == 0 {
		return 0
	}
	rank := nearestRank(q, h.n)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := bucketBounds(i)
			mid := lo + (hi-lo)/2
			return time.Duration(min(max(mid, h.min), h.max))
		}
	}
	return time.Duration(h.max) // unreachable: cum ends at n ≥ rank
}

// nearestRank is the 1-based rank of the q-quantile of n values.
func nearestRank(q float64, n uint64) uint64 {
	r := uint64(math.Ceil(q * float64(n)))
	return min(max(r, 1), n)
}

// Percentile returns the exact q-quantile of values by the nearest-rank
// rule (Histogram.Quantile's reference). values need not be sorted; it is
// not modified. It returns 0 for no values.
func Percentile(values []time.Duration, q float64) time.Duration {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	return s[nearestRank(q, uint64(len(s)))-1]
}

// Buckets calls fn for every non-empty bucket in increasing order with the
// bucket's bounds and count (for plots and debugging).
func (h *Histogram) Buckets(fn func(lo, hi time.Duration, count uint64)) {
	for i, c := range h.counts {
		if c != 0 {
			lo, hi := bucketBounds(i)
			fn(time.Duration(lo), time.Duration(hi), c)
		}
	}
}

// LatencySummary is a histogram's summary in milliseconds, as it appears
// in the JSON lines and the table.
type LatencySummary struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary returns h's summary.
func (h *Histogram) Summary() LatencySummary {
	return LatencySummary{
		Count: h.n, Mean: ms(h.Mean()), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()),
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
