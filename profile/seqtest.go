package profile

import (
	"fmt"
	"math"
)

// ChangeTest is the method search's accuracy criterion: a one-sided
// Clopper–Pearson (exact binomial) upper confidence bound on a setting's
// rate of changed answers (whole answers that differ from the model's own
// uncached ones), which must fall below Risk at confidence 1 − Alpha on
// the bin's requests, up to its cap (the bin's calibration requests of the
// class). The test is sequential in one direction: after every request the
// search stops a setting as soon as it can no longer pass — its changed
// answers so far already keep the bound at the cap at or above Risk
// (MaxChanges), or their lower confidence bound lies above Risk — and
// keeps sampling up to the cap while it may still pass. A setting is
// accepted only at the cap, on the bound of all its answers: stopping
// early for failure never accepts anything, so whatever the number of
// looks, a setting whose rate of changed answers is Risk or more is
// accepted with probability at most Alpha (the one-shot exact bound's
// guarantee; TestChangeTestBounds simulates it).
type ChangeTest struct {
	Risk  float64 // the rate of changed answers a setting must be shown to stay below
	Alpha float64 // 1 − the confidence of the bound
}

// DefaultChangeTest: a setting is served only where its rate of changed
// answers is below 2% at 95% confidence: with no changed answer that takes
// 149 requests (MinRequests), with one 236, with two 313.
var DefaultChangeTest = ChangeTest{Risk: 0.02, Alpha: 0.05}

// Check validates the test's risk and confidence.
func (c ChangeTest) Check() error {
	switch {
	case !(c.Risk > 0 && c.Risk < 1):
		return fmt.Errorf("changed-answer risk %g: want a rate in (0, 1)", c.Risk)
	case !(c.Alpha > 0 && c.Alpha < 0.5):
		return fmt.Errorf("confidence %g: want (0.5, 1)", 1-c.Alpha)
	}
	return nil
}

// Decision is the test's verdict after some requests.
type Decision int

// The verdicts.
const (
	Undecided Decision = iota
	Accepted
	Rejected
)

func (d Decision) String() string {
	return [...]string{"undecided", "accepted", "rejected"}[d]
}

// Decide is the verdict after n of a cap of requests, changed of them
// changed: rejected once the setting cannot pass within the cap (more
// changed answers than MaxChanges(cap), or a lower bound above Risk),
// accepted at the cap when its upper bound is below Risk, else undecided.
func (c ChangeTest) Decide(n, changed, cap int) Decision {
	switch {
	case !c.canPass(changed, cap) || (changed > 0 && 1-binomCDF(changed-1, n, c.Risk) < c.Alpha): // the lower bound above Risk
		return Rejected
	case n >= cap:
		return Accepted
	}
	return Undecided
}

// Upper is the one-sided upper confidence bound (confidence 1 − Alpha) of
// the rate of changed answers, changed of n.
func (c ChangeTest) Upper(changed, n int) float64 {
	return ClopperPearsonUpper(changed, n, c.Alpha)
}

// canPass reports whether changed answers of cap keep the upper bound
// below Risk: the bound lies below Risk exactly when P(X ≤ changed) at
// rate Risk is below Alpha.
func (c ChangeTest) canPass(changed, cap int) bool {
	return changed < cap && binomCDF(changed, cap, c.Risk) < c.Alpha
}

// MaxChanges is the most changed answers of cap with which a setting
// passes (-1: none passes on cap requests).
func (c ChangeTest) MaxChanges(cap int) int {
	k := -1
	for c.canPass(k+1, cap) {
		k++
	}
	return k
}

// MinRequests is the smallest cap on which a setting can pass (with no
// changed answer).
func (c ChangeTest) MinRequests() int {
	n := max(1, int(math.Floor(math.Log(c.Alpha)/math.Log1p(-c.Risk))))
	for !c.canPass(0, n) {
		n++
	}
	return n
}

// Text states the test for people.
func (c ChangeTest) Text() string {
	return fmt.Sprintf("changed answers: %g%% ruled out at %.0f%% confidence (Clopper–Pearson bound at the cap, stopped early once it cannot pass; ≥ %d requests)",
		100*c.Risk, 100*(1-c.Alpha), c.MinRequests())
}

// ClopperPearsonUpper is the exact one-sided upper confidence bound
// (confidence 1 − alpha) of a binomial rate with k successes in n trials:
// the p at which P(X ≤ k) = alpha (1 when k ≥ n; 1 for n = 0).
func ClopperPearsonUpper(k, n int, alpha float64) float64 {
	switch {
	case n <= 0 || k >= n:
		return 1
	case k == 0:
		return -math.Expm1(math.Log(alpha) / float64(n))
	}
	_, hi := bisect(func(p float64) bool { return binomCDF(k, n, p) > alpha })
	return hi
}

// ClopperPearsonLower is the exact one-sided lower confidence bound: the
// p at which P(X ≥ k) = alpha (0 for k = 0).
func ClopperPearsonLower(k, n int, alpha float64) float64 {
	switch {
	case k <= 0 || n <= 0:
		return 0
	case k >= n:
		return math.Exp(math.Log(alpha) / float64(n))
	}
	lo, _ := bisect(func(p float64) bool { return 1-binomCDF(k-1, n, p) < alpha })
	return lo
}

// bisect narrows [0, 1] in 100 halvings to the bracket [lo, hi] of the p
// where below (true at lo, false at hi; monotone) turns false.
func bisect(below func(p float64) bool) (lo, hi float64) {
	lo, hi = 0.0, 1.0
	for range 100 {
		mid := (lo + hi) / 2
		if below(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, hi
}

// binomCDF is P(X ≤ k) for X ~ Binomial(n, p), summed in logs.
func binomCDF(k, n int, p float64) float64 {
	if k < 0 {
		return 0
	}
	if k >= n || p <= 0 {
		return 1
	}
	if p >= 1 {
		return 0
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	lgn, _ := math.Lgamma(float64(n + 1))
	s := 0.0
	for i := 0; i <= k; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		s += math.Exp(lgn - a - b + float64(i)*lp + float64(n-i)*lq)
	}
	return min(1, s)
}

// pairedGain is the two-sided confidence interval (normal quantile z at
// each end) of the geometric-mean speed-up of times b over times a,
// paired by request (a's seconds over b's), and the point estimate; ok is
// false with fewer than three pairs.
func pairedGain(a, b []float64, z float64) (lo, est, hi float64, ok bool) {
	var d []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 {
			d = append(d, math.Log(a[i]/b[i]))
		}
	}
	if len(d) < 3 {
		return 0, 0, 0, false
	}
	mean, se := MeanSE(d)
	return math.Exp(mean - z*se), math.Exp(mean), math.Exp(mean + z*se), true
}

// MeanSE is the mean of d and its standard error (the sample standard
// deviation over √n; 0 for fewer than two values).
func MeanSE(d []float64) (mean, se float64) {
	if len(d) == 0 {
		return 0, 0
	}
	for _, x := range d {
		mean += x
	}
	mean /= float64(len(d))
	if len(d) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range d {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(d)-1) / float64(len(d)))
}
