package cache

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// DLLMOptions are dLLM-Cache's settings (dlmcache's defaults: Kp 50, Kr 2,
// Rho 0.25; the authors' LLaDA scripts with the cache on use Kp 50, Kr 1–8
// and Rho 0.25, their gsm8k script Kr 7, and their configuration class
// defaults to 1, 1 and 0).
type DLLMOptions struct {
	Kp  int     // prompt rows refreshed every Kp steps
	Kr  int     // response rows refreshed every Kr steps
	Rho float64 // between refreshes, the fraction of response rows recomputed
}

// dllmFlags are dLLM-Cache's flags.
func dllmFlags(fl *pflag.FlagSet, o *Options) {
	d := DefaultOptions().DLLM
	fl.IntVar(&o.DLLM.Kp, "dllm-kp", d.Kp, "dllm-cache: refresh the prompt's K/V every Kp steps")
	fl.IntVar(&o.DLLM.Kr, "dllm-kr", d.Kr, "dllm-cache: refresh the response's K/V every Kr steps")
	fl.Float64Var(&o.DLLM.Rho, "dllm-rho", d.Rho, "dllm-cache: between refreshes, the fraction of response rows recomputed (those whose V changed most)")
}

// dllmKnobs are dLLM-Cache's knobs.
var dllmKnobs = []Knob{
	intKnob("dllm-kp", "prompt refresh period in steps", 1, func(o *Options, k int) { o.DLLM.Kp = k }),
	intKnob("dllm-kr", "response refresh period in steps", 1, func(o *Options, k int) { o.DLLM.Kr = k }),
	floatKnob("dllm-rho", "fraction of response rows recomputed between refreshes", 0, 1, func(o *Options, r float64) { o.DLLM.Rho = r }),
}

// dllmCache is dLLM-Cache: the prompt's K/V are refreshed every Kp steps
// and the response's every Kr; between response refreshes every layer
// past the first takes the fresh value vectors of every response row,
// recomputes the fraction ρ of them (at least one) whose V changed most
// (the least cosine-similar between the fresh V and the cached one) and
// carries the others through the layer on their cached attention and MLP
// outputs (model.Carrier), their cached K with their fresh V, as the
// authors' code does (their hooks, dllm_cache/hooks/cache_hook_LLaDA.py:
// the first layer computed whole every step, the choice made anew at
// every later layer among all the response rows, every row's hidden
// state advancing to the top layer). Kp = Kr = 1 computes every row, as
// none.
type dllmCache struct{ base }

func newDLLMCache(o Options) (Method, error) {
	d := o.DLLM
	if d.Kp <= 0 || d.Kr <= 0 || d.Rho < 0 || d.Rho > 1 {
		return nil, fmt.Errorf("needs Kp > 0 (--dllm-kp), Kr > 0 (--dllm-kr) and Rho in [0, 1] (--dllm-rho), got Kp %d, Kr %d, Rho %g", d.Kp, d.Kr, d.Rho)
	}
	return &dllmCache{base{"dllm-cache", o}}, nil
}

func (m *dllmCache) Planner(lm *model.Network, _ string, _ *Info) sample.Planner {
	return &dllmPlanner{tokenPlan: tokenPlan{lm: lm}, o: m.o.DLLM}
}

type dllmPlanner struct {
	tokenPlan
	o DLLMOptions

	n, P     int
	response []int32
	// att, mlp: per layer, every row's attention and MLP outputs as last
	// computed ([n, d_model], allocated on first use).
	att, mlp []backend.Tensor

	prompt, resp bool    // this step refreshes the prompt / the response
	fed          []int32 // the response rows with the rows their logits are read from (logitSources)
}

func (p *dllmPlanner) Begin(r *sample.Request) error {
	p.n, p.P = len(r.Canvas), len(r.Prompt)
	p.begin(r)
	p.response = iota32(p.P, p.n)
	L := len(p.lm.Blocks)
	p.att, p.mlp = make([]backend.Tensor, L), make([]backend.Tensor, L)
	return nil
}

func (p *dllmPlanner) End() {
	p.tokenPlan.End()
	for l := range p.att {
		if p.att[l] != nil {
			p.lm.Backend.Free(p.att[l])
			p.lm.Backend.Free(p.mlp[l])
		}
	}
	p.att, p.mlp = nil, nil
}

func (p *dllmPlanner) Plan(s *sample.Step) model.Plan {
	p.prompt = s.Index%p.o.Kp == 0
	p.resp = s.Index%p.o.Kr == 0
	p.all = p.prompt && p.resp
	p.fed = mergeRows(p.response, logitSources(p.lm.Config, s))
	return p
}

// Rows: every row on a prompt refresh, else the response's (carried or
// computed, Carry says which).
func (p *dllmPlanner) Rows(int) []int32 {
	if p.prompt {
		return nil
	}
	return p.fed
}

// Carries: between response refreshes, past the first layer.
func (p *dllmPlanner) Carries(l int) bool { return !p.resp && l > 0 }

// Carry carries, between response refreshes and past the first layer, the
// response rows but the ρ fraction (at least one) whose fresh V is least
// cosine-similar to the kept one; every response row's kept V becomes its
// fresh one (their K stays as last computed).
func (p *dllmPlanner) Carry(l int, rows []int32, v backend.Tensor) []int32 {
	b := p.lm.Backend
	fresh := b.ToHost(v, nil)
	old := b.ToHost(p.kv.v[l], nil)
	cols := p.kv.cols
	type row struct {
		pos int32
		sim float64
	}
	var rs []row
	idx := make([]int32, 0, len(p.response))
	src := make([]int32, 0, len(p.response))
	for i, pos := range rows {
		if int(pos) < p.P {
			continue
		}
		a, c := fresh[i*cols:(i+1)*cols], old[int(pos)*cols:(int(pos)+1)*cols]
		var ac, aa, cc float64
		for j := range a {
			ac += float64(a[j]) * float64(c[j])
			aa += float64(a[j]) * float64(a[j])
			cc += float64(c[j]) * float64(c[j])
		}
		sim := 1.0
		if aa > 0 && cc > 0 {
			sim = ac / math.Sqrt(aa*cc)
		}
		rs = append(rs, row{pos, sim})
		idx, src = append(idx, pos), append(src, int32(i))
	}
	b.CopyRows(p.kv.v[l], idx, v, src)
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].sim < rs[b].sim })
	k := min(max(1, int(p.o.Rho*float64(len(p.response)))), len(rs))
	var carried []int32
	for _, r := range rs[k:] {
		carried = append(carried, r.pos)
	}
	slices.Sort(carried)
	return carried
}

// Outputs gives the carried rows' kept attention and MLP outputs.
func (p *dllmPlanner) Outputs(l int, carried []int32, att, mlp backend.Tensor) error {
	if p.att[l] == nil {
		return fmt.Errorf("cache: no kept outputs for layer %d", l)
	}
	b := p.lm.Backend
	b.CopyRows(att, nil, p.att[l], carried)
	b.CopyRows(mlp, nil, p.mlp[l], carried)
	return nil
}

// ObserveOutputs keeps the computed rows' attention and MLP outputs.
func (p *dllmPlanner) ObserveOutputs(l int, computed []int32, att, mlp backend.Tensor) {
	b := p.lm.Backend
	if p.att[l] == nil {
		d := p.lm.Config.DModel
		p.att[l], p.mlp[l] = b.New(p.n, d), b.New(p.n, d)
	}
	b.CopyRows(p.att[l], computed, att, nil)
	b.CopyRows(p.mlp[l], computed, mlp, nil)
}

// CheckModel refuses block-causal models (wholeCanvas).
func (m *dllmCache) CheckModel(c *model.Config) error { return wholeCanvas(m.name, c) }
