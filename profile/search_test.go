package profile

import (
	"context"
	"fmt"
	"testing"

	"github.com/dlmcache/dlmcache/lut"
)

// The race keeps the fastest setting that holds every answer; a setting
// that breaks answers stops once it cannot reach the bound, a slow one
// once a faster one is on course to pass, and the front holds the
// fastest passing setting and none.
func TestSearchCellPicksTheFastestThatHolds(t *testing.T) {
	grid := []lut.Setting{
		{Method: "none", Decoder: "threshold:0.9"},  // fast, holds
		{Method: "block", Decoder: "threshold:0.9"}, // faster, breaks every other answer
		{Method: "d2cache", Decoder: "schedule"},    // holds, slow
	}
	s := &Searcher{Grid: grid, Target: 0.9, Z: 1.2816, MaxLoss: 1}
	var bin []ClassRequest
	for i := range 24 {
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
	if ch.Setting.String() != "none@threshold:0.9" || ch.SpeedUp != 10 || ch.FLOPsSpeedUp != 12.5 || ch.Samples != 24 {
		t.Errorf("chose %s at %.2f× (FLOPs %.2f×), %d samples", ch.Setting, ch.SpeedUp, ch.FLOPsSpeedUp, ch.Samples)
	}
	stopped := map[string]string{}
	for _, p := range ch.Tried {
		stopped[p.Setting.String()] = p.Stopped
	}
	if stopped["block@threshold:0.9"] != "bound" || stopped["d2cache@schedule"] != "dominated" || stopped["none@threshold:0.9"] != "" {
		t.Errorf("stops: %v", stopped)
	}
	if runs["block@threshold:0.9"] >= 24 || runs["d2cache@schedule"] >= 24 || runs[""] != 24 {
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
}

// A setting that keeps the answers' agreement but loses accuracy beyond
// MaxLoss does not pass.
func TestSearchCellHoldsAccuracyLoss(t *testing.T) {
	s := &Searcher{Grid: []lut.Setting{{Method: "none", Decoder: "threshold:0.5"}}, Target: 0.5, Z: 1.2816, MaxLoss: 1}
	var bin []ClassRequest
	for i := range 20 {
		bin = append(bin, ClassRequest{Request: Request{ID: fmt.Sprint(i)}, Class: "long"})
	}
	yes, no := true, false
	ch, err := s.searchCell(context.Background(), bin, func(_ context.Context, q ClassRequest, setting string) (searchLine, error) {
		if setting == "" {
			return searchLine{Seconds: 10, Correct: &yes}, nil
		}
		if q.ID == "3" { // one answer of twenty changed and wrong: 5 points lost
			return searchLine{Seconds: 1, Correct: &no}, nil
		}
		return searchLine{Equal: true, Seconds: 1, Correct: &yes}, nil
	}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Setting.Method != "none" || ch.Setting.Decoder != "schedule" || ch.Tried[0].Passed {
		t.Errorf("a setting losing 5 points passed: %+v", ch)
	}
}
