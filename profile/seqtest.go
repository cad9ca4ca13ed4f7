package profile

import (
	"fmt"
	"math"
)

// ChangeTest is the method search's accuracy criterion: Wald's sequential
// probability ratio test on a setting's rate of changed answers (whole
// answers that differ from the model's own uncached ones), between an
// acceptable rate P0 and a rate P1 a user must not be served. After each
// request the log-likelihood ratio of the answers so far under P1 and P0
// is compared with two thresholds: the setting is accepted once it falls
// to log(Alpha), rejected once it reaches log((1−Alpha)/Beta), and
// undecided (not accepted) when the bin's requests run out between.
// Whatever the number of looks, a setting whose rate is P1 or more is
// accepted with probability at most Alpha (the likelihood ratio at
// acceptance is at most Alpha, so P1(accept) ≤ Alpha·P0(accept): exact,
// not Wald's approximation), and one whose rate is P0 or less is rejected
// with probability about Beta or less (Wald's approximation): a bound on
// the rate of changed answers, reached with as few requests as the
// evidence allows (a setting whose first answers change stops at once,
// one that holds needs MinRequests).
type ChangeTest struct {
	P0, P1      float64 // acceptable and unacceptable rates of changed answers
	Alpha, Beta float64 // the test's error rates: accepting at P1, rejecting at P0
}

// DefaultChangeTest: a setting is served only when a 5% rate of changed
// answers is ruled out at 90% confidence; one that changes 1% of answers
// passes with probability 0.8. A setting with no changed answer is
// accepted after 56 requests; each changed answer costs about 39 more.
var DefaultChangeTest = ChangeTest{P0: 0.01, P1: 0.05, Alpha: 0.10, Beta: 0.20}

// Check validates the test's rates.
func (c ChangeTest) Check() error {
	switch {
	case !(c.P0 > 0 && c.P0 < c.P1 && c.P1 < 1):
		return fmt.Errorf("changed-answer rates %g and %g: want 0 < acceptable < risk < 1", c.P0, c.P1)
	case !(c.Alpha > 0 && c.Alpha < 0.5), !(c.Beta > 0 && c.Beta < 0.5):
		return fmt.Errorf("error rates %g, %g: want each in (0, 0.5)", c.Alpha, c.Beta)
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

// llr is the log-likelihood ratio (P1 against P0) of changed answers in n.
func (c ChangeTest) llr(n, changed int) float64 {
	return float64(changed)*math.Log(c.P1/c.P0) + float64(n-changed)*math.Log((1-c.P1)/(1-c.P0))
}

// Decide is the verdict after n requests of which changed changed. (In
// Wald's terms the hypothesis tested is "rate P0"; accepting it at rate P1
// is the error bounded by Alpha, rejecting it at P0 the one bounded by
// Beta.)
func (c ChangeTest) Decide(n, changed int) Decision {
	l := c.llr(n, changed)
	switch {
	case l >= math.Log((1-c.Alpha)/c.Beta):
		return Rejected
	case l <= math.Log(c.Alpha):
		return Accepted
	}
	return Undecided
}

// MinRequests is the fewest requests that can accept a setting (none of
// them changed).
func (c ChangeTest) MinRequests() int {
	return int(math.Ceil(math.Log(c.Alpha) / math.Log((1-c.P1)/(1-c.P0))))
}

// Text states the test for people.
func (c ChangeTest) Text() string {
	return fmt.Sprintf("changed answers: %g%% ruled out at %.0f%% confidence (sequential test; %g%% passes with probability %.0f%%, ≥ %d requests)",
		100*c.P1, 100*(1-c.Alpha), 100*c.P0, 100*(1-c.Beta), c.MinRequests())
}

// pairedGain is the one-sided lower confidence bound (normal quantile z)
// of the geometric-mean speed-up of times b over times a, paired by
// request (a's seconds over b's), and the point estimate; ok is false
// with fewer than three pairs.
func pairedGain(a, b []float64, z float64) (lo, est float64, ok bool) {
	var d []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 {
			d = append(d, math.Log(a[i]/b[i]))
		}
	}
	if len(d) < 3 {
		return 0, 0, false
	}
	mean, se := MeanSE(d)
	return math.Exp(mean - z*se), math.Exp(mean), true
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
