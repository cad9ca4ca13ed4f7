package profile

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/lut"
)

// recordedSearch is testdata/search-short-050-070.jsonl: the short class
// of ratio bin [0.50, 0.70) from a real calibration of the bundled model
// with its guide (calibrate --ratios 0.5,0.7 --per-ratio 150 --guide
// models/llada-tiny-ar, 2 Dec 2026, 2 shared cores; the reference answers'
// tokens left out): 150 requests, each setting's outcome on the requests
// it ran before it stopped.
const recordedSearch = "testdata/search-short-050-070.jsonl"

// The selection rule, run on recorded calibration outcomes with every
// timing multiplied by independent log-normal noise (σ 0.3: a shared
// machine's spread) and, in one request in ten, a slow spell doubling
// some runs, chooses what it chooses on the recorded timings, for each of
// 100 seeds: the choice does not flip on noise. An outcome the noisy run
// needs but the record lacks (a setting left behind later than it was
// when recorded) is its setting's mean recorded time, the answer kept; the
// test says how many there were.
func TestSearchChoiceStableOnRecordedOutcomes(t *testing.T) {
	lines, hdr, err := readSearch(recordedSearch)
	if err != nil {
		t.Fatal(err)
	}
	var grid []lut.Setting
	for _, name := range hdr.Settings {
		g, err := cache.ParseSetting(name)
		if err != nil || g.String() != name {
			t.Fatalf("setting %q: %v (reads back as %q)", name, err, g.String())
		}
		grid = append(grid, g)
	}
	// The bin's order is the references' order in the log.
	f, err := os.Open(recordedSearch)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bin []ClassRequest
	mean := map[string][2]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	sc.Scan() // the header
	for sc.Scan() {
		var l searchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Setting == "" {
			bin = append(bin, ClassRequest{Request: Request{ID: l.ID}, Class: l.Class})
		}
		m := mean[l.Setting]
		mean[l.Setting] = [2]float64{m[0] + l.Seconds, m[1] + 1}
	}
	if len(bin) != 150 {
		t.Fatalf("%d recorded requests, want 150", len(bin))
	}
	// calibrate's defaults on the whole bin, and make run's caps on its
	// first 60 requests.
	for _, tc := range []struct {
		test ChangeTest
		n    int
	}{{DefaultChangeTest, 150}, {ChangeTest{Risk: 0.05, Alpha: 0.05}, 60}} {
		t.Run(fmt.Sprintf("risk %g on %d", tc.test.Risk, tc.n), func(t *testing.T) {
			stableOnRecord(t, grid, bin[:tc.n], lines, mean, tc.test)
		})
	}
}

func stableOnRecord(t *testing.T, grid []lut.Setting, bin []ClassRequest, lines map[searchKey]searchLine, mean map[string][2]float64, test ChangeTest) {
	choose := func(noise func(float64) float64) (string, int) {
		missing := 0
		s := &Searcher{Grid: grid, Test: test, MinGain: 0.1, Z: 1.6449, MaxLoss: 1}
		ch, err := s.searchCell(context.Background(), bin, func(_ context.Context, q ClassRequest, setting string) (searchLine, error) {
			l, ok := lines[searchKey{q.ID, q.Class, setting}]
			if !ok {
				if setting == "" {
					return l, fmt.Errorf("request %s has no reference", q.ID)
				}
				missing++
				m := mean[setting]
				l = searchLine{ID: q.ID, Class: q.Class, Setting: setting, Equal: true, Seconds: m[0] / m[1], FLOPs: 1}
			}
			l.Seconds = noise(l.Seconds)
			return l, nil
		}, func() {})
		if err != nil {
			t.Fatal(err)
		}
		return ch.Setting.String(), missing
	}
	want, _ := choose(func(x float64) float64 { return x })
	t.Logf("recorded timings choose %s", want)
	flips, missing := map[string]int{}, 0
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 46))
		got, m := choose(func(x float64) float64 {
			x *= math.Exp(0.3 * rng.NormFloat64())
			if rng.IntN(20) == 0 {
				x *= 2
			}
			return x
		})
		missing += m
		if got != want {
			flips[got]++
		}
	}
	t.Logf("%d outcomes not in the record, filled in over 100 runs", missing)
	if len(flips) > 0 {
		t.Errorf("with timing noise the choice left %s: %v of 100 runs", want, flips)
	}
	if want == "none@schedule" {
		t.Errorf("the recorded bin chose none on the schedule: the test then shows nothing about speed")
	}
}
