package bench

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucketsTileTheRange(t *testing.T) {
	for i := 0; i < numBuckets-1; i++ {
		lo, hi := bucketBounds(i)
		nlo, _ := bucketBounds(i + 1)
		if lo > hi || hi+1 != nlo {
			t.Fatalf("bucket %d = [%d, %d], next starts at %d", i, lo, hi, nlo)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d bounds [%d, %d] map to %d, %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
	}
	if _, hi := bucketBounds(numBuckets - 1); hi != 1<<63-1 {
		t.Fatalf("last bucket ends at %d, want MaxInt64", hi)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := rng.Int64() >> rng.IntN(63)
		lo, hi := bucketBounds(bucketOf(v))
		if v < lo || v > hi {
			t.Fatalf("%d in bucket [%d, %d]", v, lo, hi)
		}
		// Resolution: a bucket is at most 1/64 of its lower bound wide.
		if lo >= subBuckets && float64(hi-lo+1) > float64(lo)/subBuckets {
			t.Fatalf("bucket [%d, %d] too wide", lo, hi)
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	v := []time.Duration{35, 20, 15, 50, 40} // unsorted on purpose
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, 15}, {0.05, 15}, {0.3, 20}, {0.4, 20}, {0.5, 35}, {0.8, 40}, {1, 50}} {
		if got := Percentile(v, c.q); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if v[0] != 35 {
		t.Error("Percentile sorted its argument")
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
}

func TestHistogramSmallValuesExact(t *testing.T) {
	var h Histogram
	var vals []time.Duration
	for v := time.Duration(1); v <= 63; v++ {
		h.Record(v)
		vals = append(vals, v)
	}
	for _, q := range []float64{0, 0.01, 0.25, 0.5, 0.9, 0.99, 1} {
		if got, want := h.Quantile(q), Percentile(vals, q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if h.Min() != 1 || h.Max() != 63 || h.Count() != 63 || h.Mean() != 32 {
		t.Errorf("min %v max %v count %d mean %v", h.Min(), h.Max(), h.Count(), h.Mean())
	}
}

// TestHistogramMatchesExactPercentile compares Quantile with the exact
// nearest-rank percentile of the same samples: they must agree to the
// bucket resolution (half a bucket, under 1/128 of the value).
func TestHistogramMatchesExactPercentile(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(5000)
		var h Histogram
		vals := make([]time.Duration, n)
		for i := range vals {
			// Log-uniform from 1 µs to 10 s, like latencies.
			v := time.Duration(float64(time.Microsecond) * pow10(rng.Float64()*7))
			vals[i] = v
			h.Record(v)
		}
		for _, q := range []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
			got, want := h.Quantile(q), Percentile(vals, q)
			if diff := got - want; diff < -want/128-1 || diff > want/128+1 {
				t.Fatalf("seed %d n %d: Quantile(%v) = %v, exact %v", seed, n, q, got, want)
			}
		}
	}
}

func pow10(x float64) float64 {
	r := 1.0
	for x >= 1 {
		r *= 10
		x--
	}
	// 10^x for x in [0, 1) by exp(x ln 10), good enough for test data.
	term, sum := 1.0, 1.0
	for k := 1; k < 30; k++ {
		term *= x * 2.302585092994046 / float64(k)
		sum += term
	}
	return r * sum
}

func TestHistogramMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var all, a, b Histogram
	for i := range 10000 {
		v := time.Duration(rng.Int64N(int64(time.Second)))
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{})
	if m != all {
		t.Fatalf("merged histogram differs: %+v vs %+v", m.Summary(), all.Summary())
	}
}

func TestHistogramEmptyAndNegative(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Mean() != 0 || h.Summary().Count != 0 {
		t.Fatal("empty histogram not zero")
	}
	h.Record(-5)
	if h.Quantile(1) != 0 || h.Min() != 0 {
		t.Fatal("negative duration not recorded as zero")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Quantile(1.5) did not panic")
		}
	}()
	h.Quantile(1.5)
}
