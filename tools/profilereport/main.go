// Command profilereport summarises profiling runs for docs/profiling.md:
// mean prefix K/V similarity per layer and ratio range, its spread across
// denoising steps, how the safe depth depends on the system prompt within a
// ratio bin, and how it depends on the task suite (measured here on held-out
// suite requests).
//
//	go run ./tools/profilereport -sim prof/similarity.parquet -all profall/similarity.parquet
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/cpu"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/models"
	"github.com/dlmcache/dlmcache/profile"
)

func main() {
	sim := flag.String("sim", "", "similarity.parquet of a first-step profile run")
	all := flag.String("all", "", "similarity.parquet of an --all-steps run (optional)")
	modelName := flag.String("model", models.Default, "model for the per-suite measurement (bundled name or directory)")
	perSuite := flag.Int("per-suite", 40, "held-out requests per task suite")
	flag.Parse()
	if err := run(*sim, *all, *modelName, *perSuite); err != nil {
		fmt.Fprintln(os.Stderr, "profilereport:", err)
		os.Exit(1)
	}
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

func std(x []float64) float64 {
	m, s := mean(x), 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return math.Sqrt(s / float64(len(x)))
}

func run(simPath, allPath, modelName string, perSuite int) error {
	recs, info, err := profile.ReadAll([]string{simPath})
	if err != nil {
		return err
	}
	L := info.Model.NLayers
	fmt.Printf("Run: model %s (%d layers), %d requests, τ=%g, gen length %d.\n\n", info.Model.Name, L, info.Requests, info.Tau, info.GenLength)

	similarityTables(recs, L)
	depthBySource(recs, info)
	if allPath != "" {
		if err := stepSpread(allPath); err != nil {
			return err
		}
	}
	return depthBySuite(modelName, info, perSuite)
}

// similarityTables prints the mean first-step similarity per layer and
// ratio range, for each statistic the profile holds.
func similarityTables(recs []profile.Record, L int) {
	// Mean S(l, 1) per layer and ratio range, for each statistic.
	ranges := [][2]float64{{0, 0.5}, {0.5, 0.8}, {0.8, 1.01}}
	for _, st := range []struct {
		title string
		of    func(profile.Record) float64
	}{
		{"Mean first-step similarity S(l,1) (whole-prefix K⊕V cosine) per layer, by shared-prefix ratio:", func(r profile.Record) float64 { return r.SimKV }},
		{"Mean first-step worst-row similarity (smallest per-row K⊕V cosine over the prefix) per layer, by shared-prefix ratio:", func(r profile.Record) float64 { return r.SimKVRowMin }},
	} {
		if math.IsNaN(st.of(recs[0])) {
			continue // a file from before the statistic
		}
		fmt.Println(st.title)
		fmt.Println()
		fmt.Print("| layer |")
		for _, r := range ranges {
			fmt.Printf(" r in [%.2g, %.2g) |", r[0], math.Min(r[1], 1))
		}
		fmt.Println(" all |")
		fmt.Println("|---|---|---|---|---|")
		for l := 1; l <= L; l++ {
			fmt.Printf("| %d |", l)
			var everything []float64
			for _, r := range ranges {
				var xs []float64
				for _, x := range recs {
					if int(x.Layer) == l && x.Step == 1 && x.Ratio >= r[0] && x.Ratio < r[1] {
						xs = append(xs, st.of(x))
					}
				}
				everything = append(everything, xs...)
				fmt.Printf(" %.4f |", mean(xs))
			}
			fmt.Printf(" %.4f |\n", mean(everything))
		}
		fmt.Println()
	}
	shallow, deep := layerMean(recs, 1, L/4), layerMean(recs, L/2+1, L)
	fmt.Printf("Shallow layers 1–%d: mean %.4f; deep layers %d–%d: mean %.4f.\n\n", max(1, L/4), shallow, L/2+1, L, deep)
}

// depthBySource prints the safe depth by system prompt within each bin.
func depthBySource(recs []profile.Record, info profile.RunInfo) {
	// Depth by system prompt within a bin.
	ds := profile.Depths(recs, info.Tau, profile.SimPrefix)
	type key struct {
		bin int
		src string
	}
	by := map[key][]float64{}
	for _, d := range ds {
		b := sort.SearchFloat64s(info.Edges, d.Ratio+1e-12) - 1
		by[key{b, d.Source}] = append(by[key{b, d.Source}], float64(d.Depth))
	}
	fmt.Println("Safe depth at τ by system prompt, in bins where several prompts were sampled (mean depth, count):")
	fmt.Println()
	fmt.Println("| bin | per system prompt | largest difference of means |")
	fmt.Println("|---|---|---|")
	var diffs []float64
	for b := 0; b+1 < len(info.Edges); b++ {
		var srcs []string
		for k := range by {
			if k.bin == b && len(by[k]) >= 3 {
				srcs = append(srcs, k.src)
			}
		}
		if len(srcs) < 2 {
			continue
		}
		sort.Strings(srcs)
		lo, hi := math.Inf(1), math.Inf(-1)
		cell := ""
		for _, s := range srcs {
			m := mean(by[key{b, s}])
			lo, hi = math.Min(lo, m), math.Max(hi, m)
			cell += fmt.Sprintf("%s %.2f (%d); ", s, m, len(by[key{b, s}]))
		}
		diffs = append(diffs, hi-lo)
		fmt.Printf("| [%.2f, %.2f) | %s | %.2f |\n", info.Edges[b], info.Edges[b+1], cell, hi-lo)
	}
	if len(diffs) > 0 {
		fmt.Printf("\nMean of the largest differences: %.2f layers over %d bins.\n\n", mean(diffs), len(diffs))
	}

}

// stepSpread prints the spread of S(l, t) across denoising steps of an
// --all-steps profile.
func stepSpread(allPath string) error {
	arecs, ainfo, err := profile.ReadAll([]string{allPath})
	if err != nil {
		return err
	}
	type rl struct {
		id string
		l  int32
	}
	series := map[rl][]float64{}
	for _, x := range arecs {
		series[rl{x.RequestID, x.Layer}] = append(series[rl{x.RequestID, x.Layer}], x.SimKV)
	}
	perLayer := make([][]float64, ainfo.Model.NLayers+1)
	for k, v := range series {
		perLayer[k.l] = append(perLayer[k.l], std(v))
	}
	fmt.Printf("Spread across denoising steps (--all-steps run, %d requests, %d steps): std over steps of S(l,t), mean over requests:\n\n", ainfo.Requests, ainfo.Steps)
	fmt.Println("| layer | std over steps |")
	fmt.Println("|---|---|")
	var allStd []float64
	for l := 1; l < len(perLayer); l++ {
		allStd = append(allStd, perLayer[l]...)
		fmt.Printf("| %d | %.4f |\n", l, mean(perLayer[l]))
	}
	fmt.Printf("\nMean over layers: %.4f.\n\n", mean(allStd))
	return nil
}

// depthBySuite prints the safe depth by task suite on held-out requests.
func depthBySuite(modelName string, info profile.RunInfo, perSuite int) error {
	// Depth by task suite, on held-out suite requests.
	dir, ok, err := models.Dir(modelName)
	if !ok || err != nil {
		if err != nil {
			return err
		}
		dir = modelName
	}
	m, err := load.Load(dir, cpu.New(0))
	if err != nil {
		return err
	}
	defer m.Close()
	gen := sample.GenOptions{Regime: m.Card.Regime}
	fmt.Printf("Safe depth at τ=%g by task suite (%d held-out requests each, first step):\n\n", info.Tau, perSuite)
	fmt.Println("| suite | mean ratio | mean depth | std | depth in r∈[0.80,0.90) |")
	fmt.Println("|---|---|---|---|---|")
	for _, suite := range datasets.Suites() {
		var depths, ratios, mid []float64
		for _, s := range datasets.Generate(suite, datasets.Eval, 11, perSuite, datasets.DefaultOptions()) {
			ids, pl, err := m.Tokenizer.EncodeChat(s.System, s.User)
			if err != nil {
				return err
			}
			sims, err := profile.Measure(context.Background(), m.Network, ids, pl, gen, false)
			if err != nil {
				return err
			}
			var s1 []float64
			for _, x := range sims {
				s1 = append(s1, x.KV)
			}
			d := float64(profile.SafeDepth(s1, info.Tau))
			r := float64(pl) / float64(len(ids)+gen.GenLength)
			depths, ratios = append(depths, d), append(ratios, r)
			if r >= 0.8 && r < 0.9 {
				mid = append(mid, d)
			}
		}
		fmt.Printf("| %s | %.3f | %.2f | %.2f | %.2f (%d) |\n", suite, mean(ratios), mean(depths), std(depths), mean(mid), len(mid))
	}
	return nil
}

func layerMean(recs []profile.Record, lo, hi int) float64 {
	var xs []float64
	for _, x := range recs {
		if int(x.Layer) >= lo && int(x.Layer) <= hi && x.Step == 1 {
			xs = append(xs, x.SimKV)
		}
	}
	return mean(xs)
}
