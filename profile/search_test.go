package profile

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
)

// The race keeps the fastest setting that holds every answer; a setting
// that breaks answers stops after its first changed ones, a slow one once
// an accepted one is faster beyond the noise, and the front holds the
// chosen setting and none.
func TestSearchCellPicksTheFastestThatHolds(t *testing.T) {
	grid := []lut.Setting{
		{Method: "none", Decoder: "threshold:0.9"},  // fast, holds
		{Method: "block", Decoder: "threshold:0.9"}, // faster, breaks every other answer
		{Method: "d2cache", Decoder: "schedule"},    // holds, slow
	}
	s := &Searcher{Grid: grid, Test: DefaultChangeTest, MinGain: 0.1, Z: 1.2816, MaxLoss: 1}
	const n = 80
	var bin []ClassRequest
	for i := range n {
		bin = append(bin, ClassRequest{Request: Request{ID: fmt.Sprint(i)}, Class: "long"})
	}
	yes := true
	runs := map[string]int{}
	run := func(_ context.Context, q ClassRequest, setting string) (searchLine, error) {
		runs[setting]++
		switch setting {
		case "":
			return searchLine{Seconds: 10, FLOPs: 100, Correct: &yes}, nil
		case "none@threshold:0.9":
			return searchLine{Equal: true, Seconds: 1, FLOPs: 8, Correct: &yes}, nil
		case "block@threshold:0.9":
			odd := q.ID[len(q.ID)-1]%2 == 1
			c := !odd
			return searchLine{Equal: !odd, Seconds: 0.5, FLOPs: 4, Correct: &c}, nil
		}
		return searchLine{Equal: true, Seconds: 5, FLOPs: 50, Correct: &yes}, nil
	}
	ch, err := s.searchCell(context.Background(), bin, run, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Setting.String() != "none@threshold:0.9" || ch.SpeedUp != 10 || ch.FLOPsSpeedUp != 12.5 || ch.Samples != n ||
		ch.Over != "none@schedule" || ch.GainLow != 10 || ch.SpeedUpLow != 10 {
		t.Errorf("chose %s at %.2f× (FLOPs %.2f×, low %.2f×, over %s by %.2f×), %d samples", ch.Setting, ch.SpeedUp, ch.FLOPsSpeedUp, ch.SpeedUpLow, ch.Over, ch.GainLow, ch.Samples)
	}
	stopped := map[string]string{}
	for _, p := range ch.Tried {
		stopped[p.Setting.String()] = p.Stopped + "/" + p.Decision
	}
	if stopped["block@threshold:0.9"] != "changes/rejected" || stopped["d2cache@schedule"] != "dominated/undecided" || stopped["none@threshold:0.9"] != "/accepted" {
		t.Errorf("stops: %v", stopped)
	}
	if runs["block@threshold:0.9"] > 4 || runs["d2cache@schedule"] > n/4+1 || runs[""] != n {
		t.Errorf("runs: %v (the losing settings should stop early)", runs)
	}
	if len(ch.Front) != 1 || ch.Front[0].Setting.String() != "none@threshold:0.9" {
		t.Errorf("front: %+v", ch.Front)
	}
	// With every answer of the fast setting changed, none on the schedule
	// is all that holds.
	run2 := func(ctx context.Context, q ClassRequest, setting string) (searchLine, error) {
		l, err := run(ctx, q, setting)
		l.Equal = l.Equal && setting == ""
		return l, err
	}
	ch, err = s.searchCell(context.Background(), bin, run2, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Setting.String() != "none@schedule" || ch.SpeedUp != 1 {
		t.Errorf("nothing holds: chose %s", ch.Setting)
	}
	// Fewer requests than the test needs to accept anything: none on the
	// schedule stays.
	ch, err = s.searchCell(context.Background(), bin[:DefaultChangeTest.MinRequests()-1], run, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Setting.String() != "none@schedule" {
		t.Errorf("%d requests: chose %s", DefaultChangeTest.MinRequests()-1, ch.Setting)
	}
}

// The changed-answer test: a setting with no changed answer is accepted
// after MinRequests; two early changes reject; and, simulated, a setting
// changing 5% of its answers is accepted at most about 10% of the time,
// one changing 1% passes about 80% of the time (on up to 300 requests).
func TestChangeTestBounds(t *testing.T) {
	c := DefaultChangeTest
	if m := c.MinRequests(); m != 56 || c.Decide(m, 0) != Accepted || c.Decide(m-1, 0) != Undecided {
		t.Fatalf("MinRequests %d: Decide(%d, 0) = %v", m, m, c.Decide(m, 0))
	}
	if c.Decide(3, 2) != Rejected {
		t.Errorf("two changed of three: %v", c.Decide(3, 2))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := func(p float64) float64 {
		acc := 0
		for range 4000 {
			changed := 0
			for n := 1; n <= 300; n++ {
				if rng.Float64() < p {
					changed++
				}
				if d := c.Decide(n, changed); d != Undecided {
					if d == Accepted {
						acc++
					}
					break
				}
			}
		}
		return float64(acc) / 4000
	}
	t.Logf("accepted: 1%% changed %.3f, 5%% %.3f, 8%% %.3f of 4000 runs", accepted(0.01), accepted(0.05), accepted(0.08))
	if a := accepted(0.05); a > c.Alpha {
		t.Errorf("5%% changed accepted %.3f of the time, want ≤ %.2f", a, c.Alpha)
	}
	if a := accepted(0.08); a > 0.05 {
		t.Errorf("8%% changed accepted %.3f of the time", a)
	}
	if a := accepted(0.01); a < 0.75 {
		t.Errorf("1%% changed accepted %.3f of the time, want ≥ about %.2f", a, 1-c.Beta)
	}
}

// The choice is stable under timing noise: the same recorded answers, run
// through the selection with each timing multiplied by an independent
// log-normal factor (σ 0.1), give the same choice every time. A setting 4%
// faster than the simpler one never replaces it (inside the noise and the
// 10% minimum gain), one 30% faster always does, and one that changes 6 of
// 100 answers is never chosen, whatever its speed.
func TestSearchChoiceStableUnderTimingNoise(t *testing.T) {
	simple := lut.Setting{Method: "none", Decoder: "threshold:0.9"}
	slight := lut.Setting{Method: "bicache", Decoder: "threshold:0.9", Knobs: map[string]float64{"depth": 1}, Source: "store"}
	breaks := lut.Setting{Method: "bicache", Decoder: "threshold:0.9", Knobs: map[string]float64{"depth": 2}, Source: "store"}
	clear := lut.Setting{Method: "block", Decoder: "threshold:0.9"}
	const n = 100
	var bin []ClassRequest
	for i := range n {
		bin = append(bin, ClassRequest{Request: Request{ID: fmt.Sprint(i)}, Class: "long"})
	}
	// Recorded outcomes: seconds without noise and whether the answer held.
	type outcome struct {
		sec   float64
		equal func(i int) bool
	}
	all := func(int) bool { return true }
	rec := map[string]outcome{
		"":              {1.5, all},
		simple.String(): {0.10, all},
		slight.String(): {0.10 / 1.04, all},
		breaks.String(): {0.10 / 1.6, func(i int) bool { return i%16 != 7 }},
		clear.String():  {0.10 / 1.3, all},
	}
	for _, tc := range []struct {
		grid []lut.Setting
		want string
	}{
		{[]lut.Setting{simple, slight, breaks}, simple.String()},
		{[]lut.Setting{breaks, slight, simple}, simple.String()},
		{[]lut.Setting{simple, slight, breaks, clear}, clear.String()},
		{[]lut.Setting{slight}, slight.String()},
	} {
		choices := map[string]int{}
		for seed := range uint64(200) {
			rng := rand.New(rand.NewPCG(seed, 9))
			s := &Searcher{Grid: tc.grid, Test: DefaultChangeTest, MinGain: 0.1, Z: 1.2816, MaxLoss: 1}
			ch, err := s.searchCell(context.Background(), bin, func(_ context.Context, q ClassRequest, setting string) (searchLine, error) {
				i, _ := strconv.Atoi(q.ID)
				o := rec[setting]
				return searchLine{Equal: setting == "" || o.equal(i), Seconds: o.sec * math.Exp(0.1*rng.NormFloat64()), FLOPs: 1}, nil
			}, func() {})
			if err != nil {
				t.Fatal(err)
			}
			choices[ch.Setting.String()]++
		}
		if len(choices) != 1 || choices[tc.want] != 200 {
			t.Errorf("grid %v: choices over 200 noisy runs %v, want %s every time", tc.grid, choices, tc.want)
		}
	}
}

// A setting that keeps the answers' agreement but loses accuracy beyond
// MaxLoss does not pass.
func TestSearchCellHoldsAccuracyLoss(t *testing.T) {
	s := &Searcher{Grid: []lut.Setting{{Method: "none", Decoder: "threshold:0.5"}}, Test: DefaultChangeTest, MinGain: 0.1, Z: 1.2816, MaxLoss: 1}
	var bin []ClassRequest
	for i := range 80 {
		bin = append(bin, ClassRequest{Request: Request{ID: fmt.Sprint(i)}, Class: "long"})
	}
	yes, no := true, false
	ch, err := s.searchCell(context.Background(), bin, func(_ context.Context, q ClassRequest, setting string) (searchLine, error) {
		if setting == "" {
			return searchLine{Seconds: 10, Correct: &yes}, nil
		}
		if q.ID == "3" || q.ID == "7" { // two answers of eighty held but scored wrong: 2.5 points lost
			return searchLine{Equal: true, Seconds: 1, Correct: &no}, nil
		}
		return searchLine{Equal: true, Seconds: 1, Correct: &yes}, nil
	}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Setting.Method != "none" || ch.Setting.Decoder != "schedule" || ch.Tried[0].Passed || ch.Tried[0].Decision != "accepted" {
		t.Errorf("a setting losing 2.5 points passed: %+v", ch)
	}
}
