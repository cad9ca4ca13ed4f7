package sample

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/regime"
)

// guidedPair is the DLM fixture and the causal fixture that share its
// tokenizer (vocabulary and chat template): tiny-llada-moe and tiny-llama.
func guidedPair(t *testing.T) (dlm, guide *load.Model) {
	t.Helper()
	dlm, _, _ = loadFixture(t, "tiny-llada-moe")
	guide, _, _ = loadFixture(t, "tiny-llama")
	return dlm, guide
}

var guidedPrompts = [][]int32{
	{256, 72, 105, 33, 32, 87, 104, 97, 116},
	{256, 50, 43, 50, 63},
	{256, 84, 104, 101, 32, 99, 97, 116, 32, 115, 97, 116, 32, 111, 110},
}

// TestGuidedIsTheGuidesGreedyAnswer: under the deterministic rule every
// committed token is the guide's argmax after the committed prefix (an
// accepted proposal equals it, a rejection commits it), so the answer is
// the guide's own greedy decoding whatever the DLM proposes, in one block
// or several, and the guide's forwards are its prefill plus at least one
// a step.
func TestGuidedIsTheGuidesGreedyAnswer(t *testing.T) {
	dlm, guide := guidedPair(t)
	for _, p := range guidedPrompts {
		for _, bl := range []int{0, 8} {
			ar, err := Generate(context.Background(), guide.Network, p, 0, GenOptions{Regime: regime.Regime{GenLength: 24}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			g, err := Generate(context.Background(), dlm.Network, p, 0, GenOptions{Regime: regime.Regime{GenLength: 24, Steps: 24, BlockLength: bl},
				Decoder: Guided{}, Guide: guide.Network}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g.Answer, ar.Answer) || g.Decoded != ar.Decoded {
				t.Errorf("prompt %v block %d: guided %v (%d decoded)\nguide's greedy %v (%d)", p, bl, g.Answer, g.Decoded, ar.Answer, ar.Decoded)
			}
			s := g.Guide
			if s.Steps != g.NFE || s.Committed != g.Decoded || s.NFE < s.Steps+1 || s.Accepted > s.Committed || s.AcceptLen() < 1 {
				t.Errorf("prompt %v block %d: stats %+v, DLM NFE %d, decoded %d", p, bl, s, g.NFE, g.Decoded)
			}
		}
	}
}

// oracleForward is a DLM forward whose proposal for every slot is want's
// token there (its logit 10, the others 0), except at the slots in wrong,
// where it proposes token 0 (assumed not the guide's choice).
func oracleForward(e int, want []int32, wrong map[int]bool, calls *int) model.Forwarder {
	return func(in model.Input, _ model.Plan) (*model.Output, error) {
		*calls++
		out := &model.Output{Logits: make([]float32, len(in.LogitRows)*e)}
		for i, r := range in.LogitRows {
			tok := want[r]
			if wrong[int(r)] {
				tok = 0
			}
			out.Logits[i*e+int(tok)] = 10
		}
		return out, nil
	}
}

// guidedLongAnswer is the guided pair, the first guided prompt and the
// guide's greedy generation of g slots from it; it skips a test when the
// guide stops before g.
func guidedLongAnswer(t *testing.T, g int) (dlm, guide *load.Model, p []int32, ar *Generation) {
	t.Helper()
	dlm, guide = guidedPair(t)
	p = guidedPrompts[0]
	ar, err := (&sampler{Network: guide.Network}).generateAR(context.Background(), p, GenOptions{Regime: regime.Regime{GenLength: g}}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if ar.Decoded < g {
		t.Skipf("the guide stops after %d tokens; the test wants %d", ar.Decoded, g)
	}
	return dlm, guide, p, ar
}

// TestGuidedPerfectDraftsCommitManyPerStep: a DLM that proposes the
// guide's own greedy answer (a perfect draft) is accepted in full: one
// block of 80 slots is committed in one step with three guide chunks (32,
// 32, 16 proposals) after the prefill; with a wrong proposal every 10th
// slot each step commits the run before it and the guide's token there,
// the answer is still the guide's and a step commits 10 tokens. Both check
// that the guide's cache is cut back exactly: a stale row would change
// the guide's later predictions.
func TestGuidedPerfectDraftsCommitManyPerStep(t *testing.T) {
	const G = 80
	dlm, guide, p, ar := guidedLongAnswer(t, G)
	e := dlm.Config.Embeddings()
	for _, tc := range []struct {
		name      string
		every     int
		steps     int
		guideNFE  int
		acceptLen float64
	}{
		{"perfect", 0, 1, 1 + 3, G},
		{"every 10th wrong", 10, 8, 1 + 8, 10},
	} {
		wrong := map[int]bool{}
		if tc.every > 0 {
			for i := tc.every - 1; i < G; i += tc.every {
				wrong[len(p)+i] = true
			}
		}
		calls := 0
		g, err := Generate(context.Background(), dlm.Network, p, 0, GenOptions{Regime: regime.Regime{GenLength: G, Steps: G}, Decoder: Guided{},
			Guide: guide.Network, Forward: oracleForward(e, ar.Canvas, wrong, &calls)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g.Answer, ar.Answer) {
			t.Errorf("%s: answer %v\nguide's %v", tc.name, g.Answer, ar.Answer)
		}
		s := g.Guide
		if g.NFE != tc.steps || calls != tc.steps || s.NFE != tc.guideNFE || s.AcceptLen() != tc.acceptLen || s.AcceptLen() <= 1 {
			t.Errorf("%s: DLM NFE %d (%d calls), guide NFE %d, %.2f tokens a step; want %d, %d, %g",
				tc.name, g.NFE, calls, s.NFE, s.AcceptLen(), tc.steps, tc.guideNFE, tc.acceptLen)
		}
		if want := G - len(wrong); s.Accepted != want {
			t.Errorf("%s: %d proposals accepted, want %d", tc.name, s.Accepted, want)
		}
	}
}

// TestGuidedKeepsConfidentProposals: under guided+threshold:T a proposal
// the guide rejects is committed when the DLM's confidence in it is at
// least T, and the run goes on through it; below T the guide's rule
// alone decides (the answer is the guide's greedy one). The DLM proposes
// the guide's greedy answer but token 0 at every 10th slot, with logit 10
// (confidence near 1) or 0.5 (near 1/vocab) there.
func TestGuidedKeepsConfidentProposals(t *testing.T) {
	const G = 80
	dlm, guide, p, ar := guidedLongAnswer(t, G)
	e := dlm.Config.Embeddings()
	wrong := map[int]bool{}
	for i := 9; i < G; i += 10 {
		wrong[len(p)+i] = true
	}
	for _, tc := range []struct {
		name       string
		wrongLogit float32
		keep       bool
	}{
		{"confident wrong proposals", 10, true},
		{"unsure wrong proposals", 0.5, false},
	} {
		calls := 0
		fwd := func(in model.Input, _ model.Plan) (*model.Output, error) {
			calls++
			out := &model.Output{Logits: make([]float32, len(in.LogitRows)*e)}
			for i, r := range in.LogitRows {
				if wrong[int(r)] {
					out.Logits[i*e] = tc.wrongLogit
				} else {
					out.Logits[i*e+int(ar.Canvas[r])] = 10
				}
			}
			return out, nil
		}
		g, err := Generate(context.Background(), dlm.Network, p, 0, GenOptions{Regime: regime.Regime{GenLength: G, Steps: G}, Decoder: Guided{Keep: 0.5},
			Guide: guide.Network, Forward: fwd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := g.Guide
		if !tc.keep {
			if !slices.Equal(g.Answer, ar.Answer) || s.Kept != 0 || g.NFE != 8 || s.Accepted != G-len(wrong) {
				t.Errorf("%s: answer %v (guide's %v), %d kept, DLM NFE %d, %d accepted; want the guide's answer, 0 kept, 8 forwards",
					tc.name, g.Answer, ar.Answer, s.Kept, g.NFE, s.Accepted)
			}
			continue
		}
		want := slices.Clone(ar.Answer)
		for i := range want {
			if wrong[len(p)+i] {
				want[i] = 0
			}
		}
		// Every proposal is committed in one step, the guide checking
		// them in three chunks after its prefill.
		if !slices.Equal(g.Answer, want) || g.NFE != 1 || calls != 1 || s.NFE != 1+3 || s.Accepted != G || s.Kept < len(wrong) || s.Kept > G {
			t.Errorf("%s: answer %v\nwant %v; DLM NFE %d (%d calls), guide NFE %d, %d accepted, %d kept (≥ %d)",
				tc.name, g.Answer, want, g.NFE, calls, s.NFE, s.Accepted, s.Kept, len(wrong))
		}
	}
}

// TestGuidedRule: the top-k relative rule accepts a proposal among the
// guide's top k whose probability is at least τ times the top one's.
func TestGuidedRule(t *testing.T) {
	// probabilities ∝ exp(l): token 2 top, 1 at e^-0.5 ≈ 0.61 of it, 0 at e^-2 ≈ 0.14, 3 at e^-3
	l := []float32{1, 2.5, 3, 0}
	for _, tc := range []struct {
		d     Guided
		draft int32
		want  bool
	}{
		{Guided{}, 2, true}, {Guided{}, 1, false},
		{Guided{Tau: 0.5}, 1, true}, {Guided{Tau: 0.7}, 1, false},
		{Guided{Tau: 0.1}, 0, true}, {Guided{Tau: 0.1, TopK: 2}, 0, false},
		{Guided{Tau: 0.01}, 3, true}, {Guided{Tau: 0.01, TopK: 3}, 3, false},
		{Guided{Tau: 1}, 2, true},
	} {
		if got := tc.d.accepts(l, tc.draft, argmaxBut(l, -1)); got != tc.want {
			t.Errorf("%+v draft %d: accepted %v, want %v (p ratio %.3f)", tc.d, tc.draft, got, tc.want,
				math.Exp(float64(l[tc.draft]-l[2])))
		}
	}
}

// TestGuidedRefusals: guided decoding without a guide, with a DLM as the
// guide, of another vocabulary, or on an autoregressive model is refused
// with the reason.
func TestGuidedRefusals(t *testing.T) {
	dlm, guide := guidedPair(t)
	f32, _, _ := loadFixture(t, "tiny-f32")
	p := guidedPrompts[1]
	for _, tc := range []struct {
		m     *load.Model
		guide *model.Network
		want  string
	}{
		{dlm, nil, "needs a guide"},
		{dlm, f32.Network, "not an autoregressive model"},
		{f32, guide.Network, "vocabulary has 272 tokens, the model's 300"},
		{guide, guide.Network, "diffusion sampler's"},
	} {
		_, err := Generate(context.Background(), tc.m.Network, p, 0, GenOptions{Regime: regime.Regime{GenLength: 8, Steps: 8}, Decoder: Guided{}, Guide: tc.guide}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("guide %v: error %v, want %q", tc.guide != nil, err, tc.want)
		}
	}
}

// guidedGolden is testdata/guided_golden.json (tools/golden/make_guided_golden.py).
type guidedGolden struct {
	DLM, Guide string
	Chunk      int
	Cases      []struct {
		Name        string
		PromptIDs   []int32 `json:"prompt_ids"`
		GenLength   int     `json:"gen_length"`
		BlockLength int     `json:"block_length"`
		Rule        string
		Tau         float64
		TopK        int `json:"top_k"`
		Keep        float64
		OracleIDs   []int32 `json:"oracle_ids"`
		AnswerIDs   []int32 `json:"answer_ids"`
		NFE         int
		GuideNFE    int `json:"guide_nfe"`
		Decoded     int
		Trace       []struct {
			Committed []int32
			Accepted  int
			Kept      int
		}
	}
}

// TestGuidedGolden: the guided decoder reproduces an independent PyTorch
// implementation of FlashDLM's guided diffusion (written from the paper
// and its public code) on tiny-llada-moe guided by tiny-llama token for
// token — the answer, the tokens each step committed and how many of
// them were accepted proposals, the DLM's and the guide's NFE — under the
// deterministic rule and the top-k relative one, in one block and in
// several, and with fixed drafts (an "oracle" DLM) whose steps verify
// several chunks of the guide; and guided+threshold:T (Guided.Keep, the
// drafts kept on the DLM's confidence counted too), which the reference
// implements beside FlashDLM's rules; on every CPU backend.
func TestGuidedGolden(t *testing.T) {
	var gg guidedGolden
	b, err := os.ReadFile(filepath.Join(testdata, "guided_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &gg); err != nil {
		t.Fatal(err)
	}
	if gg.DLM != "tiny-llada-moe" || gg.Guide != "tiny-llama" || gg.Chunk != GuideChunk || len(gg.Cases) < 10 {
		t.Fatalf("golden: %s guided by %s, chunk %d, %d cases", gg.DLM, gg.Guide, gg.Chunk, len(gg.Cases))
	}
	for lib, be := range goldenBackends(t) {
		dlm, _, _ := loadFixtureOn(t, "tiny-llada-moe", be)
		guide, _, _ := loadFixtureOn(t, "tiny-llama", be)
		checkGuidedGolden(t, lib, dlm, guide, &gg)
	}
}

func checkGuidedGolden(t *testing.T, lib string, dlm, guide *load.Model, gg *guidedGolden) {
	e := dlm.Config.Embeddings()
	for _, c := range gg.Cases {
		c.Name = lib + "/" + c.Name
		o := GenOptions{Regime: regime.Regime{GenLength: c.GenLength, Steps: c.GenLength, BlockLength: c.BlockLength}, Guide: guide.Network, Decoder: Guided{}}
		if c.Rule == "topk_relative" {
			o.Decoder = Guided{Tau: c.Tau, TopK: c.TopK}
		}
		if c.Keep > 0 {
			d := o.Decoder.(Guided)
			d.Keep = c.Keep
			o.Decoder = d
		}
		calls := 0
		if c.OracleIDs != nil {
			o.Forward = oracleForward(e, slices.Concat(c.PromptIDs, c.OracleIDs), nil, &calls)
		}
		var steps [][]int32
		o.OnStep = func(s *Step, committed []int32) {
			var toks []int32
			for _, p := range committed {
				toks = append(toks, s.Canvas[p])
			}
			steps = append(steps, toks)
		}
		g, err := Generate(context.Background(), dlm.Network, c.PromptIDs, 0, o, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		accepted, kept := 0, 0
		for i, st := range c.Trace {
			accepted += st.Accepted
			kept += st.Kept
			if i < len(steps) && !slices.Equal(steps[i], st.Committed) {
				t.Errorf("%s: step %d committed %v, reference %v", c.Name, i, steps[i], st.Committed)
			}
		}
		if !slices.Equal(g.Answer, c.AnswerIDs) || g.Decoded != c.Decoded {
			t.Errorf("%s: answer %v (%d decoded)\nreference %v (%d)", c.Name, g.Answer, g.Decoded, c.AnswerIDs, c.Decoded)
		}
		s := g.Guide
		if g.NFE != c.NFE || s.Steps != len(c.Trace) || s.NFE != c.GuideNFE || s.Accepted != accepted || s.Kept != kept || s.Committed != c.Decoded {
			t.Errorf("%s: DLM NFE %d, %d steps, guide NFE %d, %d accepted (%d kept), %d committed; reference %d, %d, %d, %d (%d), %d",
				c.Name, g.NFE, s.Steps, s.NFE, s.Accepted, s.Kept, s.Committed, c.NFE, len(c.Trace), c.GuideNFE, accepted, kept, c.Decoded)
		}
		t.Logf("%-38s DLM NFE %3d, guide NFE %3d, %.2f tokens a step (%d of %d accepted proposals)",
			c.Name, g.NFE, s.NFE, s.AcceptLen(), s.Accepted, s.Committed)
	}
}
