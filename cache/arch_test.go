package cache

import (
	"cmp"
	"context"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/safetensors"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// The caches on every architecture: every registered method on a fixture
// of each architecture the model package loads (LLaDA, Dream, LLaDA-MoE,
// LLaDA 2.x). What is exact is checked token for token; what approximates
// runs to the end with finite logits and accounting that adds up.

// archDegenerate is, for each registered method, the setting under which
// it computes every row (nil: it has none), where it must give the tokens
// and the rows of none. A method missing here fails TestCachesOnEveryArchitecture.
var archDegenerate = map[string]func(o *Options, g *sample.GenOptions, c *model.Config){
	"none":            func(*Options, *sample.GenOptions, *model.Config) {},
	"prefix-all":      nil, // the prefix's K/V from the store at every layer, always
	"bicache":         func(o *Options, _ *sample.GenOptions, _ *model.Config) { atDepth0(o) },
	"bicache-elastic": func(o *Options, _ *sample.GenOptions, _ *model.Config) { atDepth0(o) },
	"block":           oneStepPerBlock,
	"bicache+block":   func(o *Options, g *sample.GenOptions, c *model.Config) { atDepth0(o); oneStepPerBlock(o, g, c) },
	"exact-block":     nil, // exact by construction: TestCachesOnEveryArchitecture's block-causal half
	"d2cache":         func(o *Options, _ *sample.GenOptions, _ *model.Config) { o.D2.P = 1 },
	"dllm-cache":      func(o *Options, _ *sample.GenOptions, _ *model.Config) { o.DLLM.Kp, o.DLLM.Kr = 1, 1 },
	"freecache":       func(o *Options, _ *sample.GenOptions, _ *model.Config) { o.Free.Refresh = 1 },
	"bicache+d2cache": func(o *Options, _ *sample.GenOptions, _ *model.Config) { atDepth0(o); o.D2.P = 1 },
	"bicache+freecache": func(o *Options, _ *sample.GenOptions, _ *model.Config) {
		atDepth0(o)
		o.Free.Refresh = 1
	},
}

// atDepth0 serves depth 0 at every ratio: no layer reuses the prefix.
func atDepth0(o *Options) { o.Table = DepthTable(o.Table.Model, 0) }

// oneStepPerBlock makes every step a block start (a full forward for the
// dual cache): one step per block on the schedule (threshold decoding
// would take as many steps as its threshold needs).
func oneStepPerBlock(o *Options, g *sample.GenOptions, c *model.Config) {
	g.Steps = g.GenLength / cmp.Or(c.CausalBlock(), g.BlockLength)
	o.Decoding = sample.Decoding{Kind: sample.DecodeSchedule}
}

// blockCausalServes are the methods a block-causal model is served with;
// the others plan rows over the whole canvas at every step and refuse it.
var blockCausalServes = []string{"none", "block", "exact-block"}

// archRegime is the tests' regime on model c: the bidirectional fixtures'
// cards' (two blocks of 8 slots, two slots a step), two of a block-causal
// model's own blocks at two slots a step (its default threshold decoder).
func archRegime(c *model.Config) sample.GenOptions {
	if B := c.CausalBlock(); B > 0 {
		return sample.BlockDefaults(c, sample.GenOptions{Regime: regime.Regime{GenLength: 2 * B, Steps: B}}) // as engine.Model.GenOptions settles them
	}
	return sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
}

func TestCachesOnEveryArchitecture(t *testing.T) {
	for _, a := range testmodel.Archs {
		t.Run(a.Name, func(t *testing.T) {
			m := testmodel.Shared(t, a.Fixture)
			if got := m.Config.ArchName(); got != a.Name {
				t.Fatalf("%s loads as %q", a.Fixture, got)
			}
			L, gen := len(m.Blocks), archRegime(m.Config)
			ids, pl := request(t, m, 0)
			for _, name := range Names() {
				if name == "table" { // serves the others' settings: TestTableMethodDispatches
					continue
				}
				degenerate, listed := archDegenerate[name]
				if !listed {
					t.Errorf("%s: not in archDegenerate: say how it computes every row (nil: it cannot)", name)
					continue
				}
				t.Run(name, func(t *testing.T) {
					// Approximate: the prefix reused at layer 1 (a table of depth
					// 1 leaves deep layers on every fixture), deep layers
					// refreshed every 4 steps.
					o := DefaultOptions()
					o.Store, o.Table, o.Fingerprint, o.BiCache.Refresh = NewStore(m.Backend, 1<<30, FIFO), table(L, 1), m.Fingerprint, 4
					meth := mk(t, name, o)
					if err := CheckModel(meth, m.Config); err != nil {
						served := slices.Contains(blockCausalServes, name)
						switch B := m.Config.CausalBlock(); {
						case B == 0 && name != "exact-block":
							t.Fatalf("a bidirectional model refused: %v", err)
						case B > 0 && served:
							t.Fatalf("the block-causal model refused: %v", err)
						case B > 0 && !strings.Contains(err.Error(), "block-causal"):
							t.Errorf("refusal does not say why: %v", err)
						}
						return
					}
					if m.Config.CausalBlock() > 0 && !slices.Contains(blockCausalServes, name) {
						t.Fatalf("serves the block-causal model, which decodes one block at a time: its plans index the whole canvas")
					}
					checkApproximate(t, m, meth, ids, pl, gen)
					if degenerate != nil {
						d, g := o, gen
						degenerate(&d, &g, m.Config)
						checkDegenerate(t, m, mk(t, name, d), ids, pl, g)
					}
				})
			}
			if B := m.Config.CausalBlock(); B > 0 {
				checkExactOnBlockCausal(t, m, gen)
			}
		})
	}
}

// checkApproximate runs meth twice on one request (the second finds the
// prefix in the store) and checks that it ran to the end with finite
// logits, skipped rows (but for none), reported its depth and prefix, and
// that the stored prefix served the answer its computation did.
func checkApproximate(t *testing.T, m *load.Model, meth Method, ids []int32, pl int, gen sample.GenOptions) {
	t.Helper()
	L, name := len(m.Blocks), meth.Name()
	var runs [2]*Result
	for i := range runs {
		var logits [][]float32
		res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, logged(m, gen, &logits))
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		runs[i] = res
		if slices.Contains(res.Answer, int32(m.Config.MaskTokenID)) {
			t.Errorf("run %d: answer still masked: %v", i+1, res.Answer)
		}
		if f, j, ok := allFinite(logits); !ok {
			t.Errorf("run %d: forward %d's logit %d is %g", i+1, f, j, logits[f][j])
		}
		if len(logits) != res.NFE {
			t.Errorf("run %d: %d forwards, NFE %d", i+1, len(logits), res.NFE)
		}
		rowsOK := res.RowsComputed > 0 && res.RowsComputed < res.RowsFull
		flopsOK := res.FLOPs > 0 && res.FLOPs < res.FLOPsFull
		if name == "none" {
			rowsOK, flopsOK = res.RowsComputed == res.RowsFull, res.FLOPs == res.FLOPsFull
		}
		if !rowsOK || !flopsOK {
			t.Errorf("run %d: %d of %d rows, %g of %g FLOPs", i+1, res.RowsComputed, res.RowsFull, res.FLOPs, res.FLOPsFull)
		}
	}
	first, second := runs[0], runs[1]
	if !slices.Equal(first.Canvas, second.Canvas) || first.RowsComputed != second.RowsComputed {
		t.Errorf("the stored prefix answers %v (%d rows), its computation %v (%d rows)", second.Answer, second.RowsComputed, first.Answer, first.RowsComputed)
	}
	info, n := second.Info, len(first.Canvas)
	// The prefix tokens a store serves: all of them, or on a block-causal
	// model (exact-block) its full blocks.
	wantDepth, reusable := 0, pl
	if B := m.Config.CausalBlock(); B > 0 {
		reusable = pl / B * B
	}
	switch {
	case TableOf(meth) != nil:
		wantDepth = 1
	case name == "prefix-all" || name == "exact-block":
		wantDepth = L
	}
	if info.Depth != wantDepth {
		t.Errorf("depth %d, want %d", info.Depth, wantDepth)
	}
	if wantDepth > 0 {
		if info.PrefixToken != pl || math.Abs(info.Ratio-float64(pl)/float64(n)) > 1e-12 {
			t.Errorf("prefix %d tokens, ratio %g; want %d, %g", info.PrefixToken, info.Ratio, pl, float64(pl)/float64(n))
		}
		if f := first.Info; f.Hit || f.PrefixRows != L*pl || !info.Hit || info.HitTokens != reusable || info.PrefixRows != 0 {
			t.Errorf("store: first run hit %v, %d rows filled; second hit %v, %d of %d tokens, %d rows filled; want a miss filling %d rows, then a hit of %d tokens",
				f.Hit, f.PrefixRows, info.Hit, info.HitTokens, info.QueryTokens, info.PrefixRows, L*pl, reusable)
		}
	}
}

// checkDegenerate: meth at a setting that computes every row gives the
// tokens and rows of none under the same options.
func checkDegenerate(t *testing.T, m *load.Model, meth Method, ids []int32, pl int, gen sample.GenOptions) {
	t.Helper()
	gen = meth.Gen(gen)
	want, _ := generate(t, m, mk(t, "none", Options{}), ids, pl, gen)
	got, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, gen)
	if err != nil {
		t.Fatalf("computing every row: %v", err)
	}
	if !slices.Equal(got.Canvas, want.Canvas) || got.RowsComputed != want.RowsComputed {
		t.Errorf("computing every row (%d steps, block length %d, %s): %v, %d rows\nnone %v, %d rows",
			gen.Steps, gen.BlockLength, sample.DecodingOf(gen), got.Answer, got.RowsComputed, want.Answer, want.RowsComputed)
	}
}

// checkExactOnBlockCausal: on a block-causal model committed blocks' K/V
// never change, so two caches are exact — exact-block (alone, and with a
// shared system message's full blocks from a block store), and the dual
// cache when the prompt ends at a block boundary (the blocks it keeps are
// then all committed): the tokens and logits of none from fewer rows.
func checkExactOnBlockCausal(t *testing.T, m *load.Model, gen sample.GenOptions) {
	B := m.Config.CausalBlock()
	ids, pl := request(t, m, 0)
	checkExact(t, m, "exact-block", mk(t, "exact-block", Options{}), ids, pl, gen)
	withStore := mk(t, "exact-block", Options{Store: NewBlockStore(m.Backend, B, 1<<30, true, nil), Fingerprint: m.Fingerprint})
	for _, i := range []int{0, 3} { // one system message, two questions
		ids, pl := request(t, m, i)
		info := checkExact(t, m, "exact-block with a block store", withStore, ids, pl, gen)
		// The second request finds the first's full blocks: the shared
		// prefix's at least.
		if lo, hi := map[int]int{3: pl / B * B}[i], map[int]int{3: pl}[i]; info.HitTokens < lo || info.HitTokens > hi || info.Depth != len(m.Blocks) {
			t.Errorf("exact-block with a block store, request %d: %d prefix tokens from the store at depth %d, want %d to %d at %d", i, info.HitTokens, info.Depth, lo, hi, len(m.Blocks))
		}
	}
	n := len(ids) / B * B
	if n == 0 {
		t.Fatalf("prompt of %d tokens: no full block of %d", len(ids), B)
	}
	checkExact(t, m, "block, prompt ending at a block boundary", mk(t, "block", DefaultOptions()), ids[:n], min(pl, n), gen)
}

// checkExact: meth gives the tokens of none under meth's options, the
// logits within 1e-4, from fewer rows; it returns meth's info.
func checkExact(t *testing.T, m *load.Model, name string, meth Method, ids []int32, pl int, gen sample.GenOptions) Info {
	t.Helper()
	gen = meth.Gen(gen)
	var wantLogits, gotLogits [][]float32
	want, _ := generate(t, m, mk(t, "none", Options{}), ids, pl, logged(m, gen, &wantLogits))
	got, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, logged(m, gen, &gotLogits))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !slices.Equal(got.Canvas, want.Canvas) {
		t.Errorf("%s: %v\nnone %v", name, got.Answer, want.Answer)
	}
	if d := logitsDiff(gotLogits, wantLogits); d > 1e-4 {
		t.Errorf("%s: the steps' logits differ from none's by %g", name, d)
	}
	if got.RowsComputed >= want.RowsComputed {
		t.Errorf("%s: %d rows, none %d", name, got.RowsComputed, want.RowsComputed)
	}
	return got.Info
}

// allFinite reports the first logit that is not finite (forward i, logit
// j), if any.
func allFinite(logits [][]float32) (i, j int, ok bool) {
	for i, l := range logits {
		for j, x := range l {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return i, j, false
			}
		}
	}
	return 0, 0, true
}

// archDegenerate names every method the registry offers (and no other).
func TestArchDegenerateListsTheRegistry(t *testing.T) {
	names := slices.DeleteFunc(Names(), func(n string) bool { return n == "table" })
	if listed := slices.Sorted(maps.Keys(archDegenerate)); !slices.Equal(listed, slices.Sorted(slices.Values(names))) {
		t.Errorf("archDegenerate lists %v, the registry offers %v", listed, names)
	}
}

// oneLayer is fixture name cut to its first layer: the same embeddings,
// head and layer 0, config.json saying one layer.
func oneLayer(t *testing.T, name string) *load.Model {
	t.Helper()
	dir := testmodel.Derive(t, name, []string{"tokenizer.json", "tokenizer_config.json", "dlmcache.json"}, func(c map[string]any) {
		for _, k := range []string{"n_layers", "num_hidden_layers"} {
			if _, ok := c[k]; ok {
				c[k] = 1
			}
		}
	})
	src := testmodel.Dir(name)
	set := must(safetensors.Open(src))
	defer set.Close()
	deeper := regexp.MustCompile(`\.(blocks|layers)\.[1-9][0-9]*\.`)
	var keep []safetensors.WriteTensor
	for _, n := range set.Names() {
		if deeper.MatchString(n) {
			continue
		}
		info, _, _ := set.Info(n)
		tn := must(set.Tensor(n))
		keep = append(keep, safetensors.WriteTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: tn.Data})
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), keep, set.Metadata()); err != nil {
		t.Fatal(err)
	}
	return testmodel.LoadDir(t, dir)
}

// On one layer a row's K/V depend on its token and position alone, so
// every cache that recomputes the rows whose tokens changed is exact:
// prefix-all and the bicache family (the prefix alone has the K/V it has
// in the request), the dual cache and d2Cache (the tokens just decoded),
// dLLM-Cache (its first layer computes every response row each step, the
// prompt's K/V kept). Each architecture's layer cut to one gives none's
// tokens and logits from fewer rows — every reuse path (kept K/V, the
// store, the shallow layers) copies the right rows. FreeCache is not
// exact there: a finished block keeps the K/V of its last step, from
// before that step's tokens were committed (FlashDLM's definition).
func TestCachesExactOnOneLayer(t *testing.T) {
	exact := []string{"prefix-all", "bicache", "bicache-elastic", "block", "bicache+block", "d2cache", "dllm-cache", "bicache+d2cache"}
	for _, a := range testmodel.Archs {
		if a.Name == "llada2" {
			continue // block-causal: exact-block and block are exact on every layer (TestCachesOnEveryArchitecture)
		}
		t.Run(a.Name, func(t *testing.T) {
			m := oneLayer(t, a.Fixture)
			ids, pl := request(t, m, 1)
			for _, name := range exact {
				o := DefaultOptions()
				o.Store, o.Table, o.Fingerprint, o.BiCache.Refresh = NewStore(m.Backend, 1<<30, FIFO), table(1, 1), m.Fingerprint, 4
				checkExact(t, m, name, mk(t, name, o), ids, pl, archRegime(m.Config))
			}
		})
	}
}

// TestCausalModelsTakeNone: an autoregressive model (model/testdata's
// tiny-qwen2) is served by none (and none@schedule) alone, through
// cache.Run, which decodes it token by token; every other method, and
// none under a diffusion decoder, is refused with the reason.
func TestCausalModelsTakeNone(t *testing.T) {
	m := testmodel.Shared(t, "tiny-qwen2")
	o := DefaultOptions()
	o.Store, o.Table, o.Fingerprint = NewStore(m.Backend, 1<<30, FIFO), table(len(m.Blocks), 1), m.Fingerprint
	for _, name := range append(Names(), "none@schedule", "none@threshold:0.9") {
		meth, err := New(name, o)
		if err != nil {
			continue // a method these options cannot build (the table method needs a calibrated table)
		}
		err = CheckModel(meth, m.Config)
		switch {
		case (name == "none" || name == "none@schedule") && err != nil:
			t.Errorf("%s refused: %v", name, err)
		case name != "none" && name != "none@schedule" && (err == nil || !strings.Contains(err.Error(), "autoregressive")):
			t.Errorf("%s: error %v, want a refusal that says the model is autoregressive", name, err)
		}
	}
	ids := []int32{257, 115, 121, 10, 258, 257, 97, 10}
	gen := sample.GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 8, BlockLength: 1}}
	res, err := Run(context.Background(), m.Network, mk(t, "none", o), Request{Prompt: ids}, gen)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sample.Generate(context.Background(), m.Network, ids, 0, gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Answer, want.Answer) || res.NFE != want.Decoded || res.RowsComputed != len(m.Blocks)*(len(ids)+want.Decoded-1) {
		t.Errorf("Run: answer %v, NFE %d, rows %d; Generate: %v after %d tokens", res.Answer, res.NFE, res.RowsComputed, want.Answer, want.Decoded)
	}
}
