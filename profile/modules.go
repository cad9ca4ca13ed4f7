package profile

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/datasets"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
)

// SampleModules cuts a sample's prompt into Prompt Cache modules: the chat
// template's head up to the system message, then each paragraph of the
// system message (instructions, filler documents, the data block; the
// last one with the end of the system turn), each tokenized alone as a
// module is; rest is the prompt after the system turn, as EncodeChat
// tokenizes it.
func SampleModules(m *load.Model, s datasets.Sample) (names []string, parts [][]int32, rest []int32, err error) {
	tok := m.Tokenizer
	ids, pl, err := tok.EncodeChat(s.System, s.User)
	if err != nil {
		return nil, nil, nil, err
	}
	prefix := tok.Decode(ids[:pl])
	at := strings.Index(prefix, s.System)
	if s.System == "" || at < 0 {
		return nil, nil, nil, fmt.Errorf("sample %s: the system message is not in its templated prefix", s.ID)
	}
	texts := []string{prefix[:at]}
	names = []string{"head"}
	paras := strings.SplitAfter(s.System, "\n\n")
	for i, p := range paras {
		if i == len(paras)-1 {
			p += prefix[at+len(s.System):]
		}
		texts = append(texts, p)
		names = append(names, fmt.Sprintf("p%d", i+1))
	}
	var keep []string
	for i, t := range texts {
		if t == "" {
			continue
		}
		keep = append(keep, names[i])
		parts = append(parts, tok.Encode(t))
	}
	return keep, parts, ids[pl:], nil
}

// ModulePoint is module reuse at one depth in one layout, over samples.
type ModulePoint struct {
	Layout       string  `json:"layout"` // contiguous, or gap (an unimported module's range before the last paragraph)
	Depth        int     `json:"depth"`
	N            int     `json:"n"`
	Correct      int     `json:"correct"`
	Agree        int     `json:"agree"` // answers equal to the whole request's
	RowsComputed int     `json:"rows_computed"`
	RowsFull     int     `json:"rows_full"`
	Accuracy     float64 `json:"accuracy"`
	Agreement    float64 `json:"agreement"`
}

// ModuleResult is a module sweep: the whole request's accuracy (modules'
// tokens, contiguous positions, nothing reused) and one point per layout
// and depth.
type ModuleResult struct {
	Refresh       int           `json:"refresh"`
	N             int           `json:"n"`
	WholeCorrect  int           `json:"whole_correct"`
	WholeAccuracy float64       `json:"whole_accuracy"`
	Points        []ModulePoint `json:"points"`
}

// ModuleLayouts are the layouts a module sweep measures.
var ModuleLayouts = []string{"contiguous", "gap"}

// ModuleSweep measures Prompt Cache's module reuse on suite samples: each
// sample's system message as modules (SampleModules), its K/V computed once
// per module alone at its reserved positions, reused in layers 0..d-1 with
// the deep layers computed every refresh steps; against computing the same
// tokens whole. The gap layout declares, before the last paragraph, a
// module the request does not import (the next sample's longest paragraph),
// so the paragraph after it sits past a gap of position ids. progress, if
// set, is called after each generation.
func ModuleSweep(ctx context.Context, m *load.Model, samples []datasets.Sample, depths []int, refresh int, gen sample.GenOptions, progress func()) (*ModuleResult, error) {
	res := &ModuleResult{Refresh: refresh}
	for _, lay := range ModuleLayouts { // point li*len(depths)+di: layout li, depth di
		for _, d := range depths {
			if d < 0 || d > len(m.Blocks) {
				return nil, fmt.Errorf("depth %d outside 0..%d", d, len(m.Blocks))
			}
			res.Points = append(res.Points, ModulePoint{Layout: lay, Depth: d})
		}
	}
	tick := func() {
		if progress != nil {
			progress()
		}
	}
	type cut struct {
		names []string
		parts [][]int32
		rest  []int32
	}
	cuts := make([]cut, len(samples))
	for i, s := range samples {
		c := &cuts[i]
		var err error
		if c.names, c.parts, c.rest, err = SampleModules(m, s); err != nil {
			return nil, err
		}
	}
	for i, s := range samples {
		names, parts, rest := cuts[i].names, cuts[i].parts, cuts[i].rest
		contiguous, err := cache.Layout(names, parts)
		if err != nil {
			return nil, fmt.Errorf("sample %s: %w", s.ID, err)
		}
		prompt, prefix, _, err := contiguous.Compose(names, rest)
		if err != nil {
			return nil, err
		}
		o := gen
		o.Positions = nil
		whole, err := sample.Generate(ctx, m.Network, prompt, prefix, o, nil)
		if err != nil {
			return nil, fmt.Errorf("sample %s: %w", s.ID, err)
		}
		tick()
		wholeText := m.AnswerText(whole.Answer)
		res.N++
		if datasets.CheckBenchmarkAnswer(s.Suite, wholeText, s.Answer) {
			res.WholeCorrect++
		}
		other := cuts[(i+1)%len(cuts)].parts
		if len(other) > 1 {
			other = other[1:] // a paragraph, not the template's head
		}
		long := other[0]
		for _, p := range other {
			if len(p) > len(long) {
				long = p
			}
		}
		k := len(names) - 1
		gapped, err := cache.Layout(append(append(append([]string(nil), names[:k]...), "unused"), names[k]),
			append(append(append([][]int32(nil), parts[:k]...), long), parts[k]))
		if err != nil {
			return nil, fmt.Errorf("sample %s: %w", s.ID, err)
		}
		for li, schema := range []*cache.Schema{contiguous, gapped} {
			store, err := cache.NewModuleStore(m.Backend, schema)
			if err != nil {
				return nil, err
			}
			prompt, prefix, pos, err := schema.Compose(names, rest)
			if err != nil {
				return nil, err
			}
			o.Positions = pos
			for di, d := range depths {
				g, err := sample.Generate(ctx, m.Network, prompt, prefix, o, cache.ModulePlanner(m.Network, m.Fingerprint, store, d, refresh, nil))
				if err != nil {
					return nil, fmt.Errorf("sample %s, %s, depth %d: %w", s.ID, ModuleLayouts[li], d, err)
				}
				tick()
				text := m.AnswerText(g.Answer)
				p := &res.Points[li*len(depths)+di]
				p.N++
				if datasets.CheckBenchmarkAnswer(s.Suite, text, s.Answer) {
					p.Correct++
				}
				if text == wholeText {
					p.Agree++
				}
				p.RowsComputed += g.RowsComputed
				p.RowsFull += g.RowsFull
			}
		}
	}
	if res.N > 0 {
		res.WholeAccuracy = float64(res.WholeCorrect) / float64(res.N)
	}
	for i := range res.Points {
		if p := &res.Points[i]; p.N > 0 {
			p.Accuracy = float64(p.Correct) / float64(p.N)
			p.Agreement = float64(p.Agree) / float64(p.N)
		}
	}
	return res, nil
}
