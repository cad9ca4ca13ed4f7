package cache

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/internal/testmodel"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// guidedRequest is the guided tests' request: the diffusion fixture
// tiny-llada-moe, the test request 1 (its prefix pl tokens), generation options
// guided by tiny-llama (which shares its tokenizer), and the guide's own
// greedy generation of the answer.
func guidedRequest(t *testing.T) (m *load.Model, ids []int32, pl int, gen sample.GenOptions, ar *sample.Generation) {
	t.Helper()
	m, guide := testmodel.Shared(t, "tiny-llada-moe"), testmodel.Shared(t, "tiny-llama")
	ids, pl = request(t, m, 1)
	gen = sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}, Guide: guide.Network}
	ar, err := sample.Generate(context.Background(), guide.Network, ids, 0, sample.GenOptions{Regime: regime.Regime{GenLength: 16}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, ids, pl, gen, ar
}

// Every caching method under the guided decoder (NAME@guided), on the
// diffusion fixture tiny-llada-moe guided by tiny-llama (which shares its
// tokenizer): under the deterministic rule each answer is the guide's
// greedy answer whatever the cache does to the proposals, and the
// accounting adds up (one DLM forward a guided step, the guide's prefill
// and at least one forward a step, rows skipped but for none). Under the
// top-k relative rule, where the proposals decide the answer, each
// method's setting that computes every row gives none@guided's tokens
// and rows.
func TestMethodsUnderTheGuidedDecoder(t *testing.T) {
	m, ids, pl, gen, ar := guidedRequest(t)
	L := len(m.Blocks)
	loose := sample.Decoding{Kind: sample.DecodeGuided, T: 0.0001, K: 272}
	noneLoose, err := Run(context.Background(), m.Network, mk(t, "none", Options{Decoding: loose}), Request{Prompt: ids, PrefixLen: pl}, gen)
	if err != nil {
		t.Fatal(err)
	}
	if noneLoose.Guide.Accepted == 0 {
		t.Fatalf("guided:0.0001:272 accepts no proposal on the fixtures: the check below would not depend on them")
	}
	for _, name := range Names() {
		if name == "table" || name == "exact-block" {
			continue // the table's choices; block-causal models only
		}
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			o.Store, o.Table, o.Fingerprint, o.BiCache.Refresh = NewStore(m.Backend, 1<<30, FIFO), table(L, 1), m.Fingerprint, 4
			meth := mk(t, name+"@guided", o)
			if err := CheckModel(meth, m.Config); err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), m.Network, meth, Request{Prompt: ids, PrefixLen: pl}, gen)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Answer, ar.Answer) {
				t.Errorf("answer %v\nthe guide's greedy answer %v", res.Answer, ar.Answer)
			}
			s := res.Guide
			if s.Steps != res.NFE || s.Committed != res.Decoded || s.NFE < s.Steps+1 || (name == "none") != (res.RowsComputed == res.RowsFull) {
				t.Errorf("guide %+v, DLM NFE %d, decoded %d, rows %d of %d", s, res.NFE, res.Decoded, res.RowsComputed, res.RowsFull)
			}
			degenerate := archDegenerate[name]
			if degenerate == nil || name == "block" || name == "bicache+block" {
				return // no setting computes every row under guided steps (the dual cache's is a block start every step)
			}
			d, g := o, gen
			degenerate(&d, &g, m.Config)
			d.Decoding = loose
			got, err := Run(context.Background(), m.Network, mk(t, name, d), Request{Prompt: ids, PrefixLen: pl}, g)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Canvas, noneLoose.Canvas) || got.RowsComputed != noneLoose.RowsComputed || got.Guide.NFE != noneLoose.Guide.NFE {
				t.Errorf("%s computing every row: %v, %d rows, guide NFE %d\nnone@%s %v, %d rows, guide NFE %d", name, got.Answer, got.RowsComputed,
					got.Guide.NFE, loose, noneLoose.Answer, noneLoose.RowsComputed, noneLoose.Guide.NFE)
			}
		})
	}
}

// A table's setting decodes with the guided decoder only where the table
// names a guide (Options.GuideFingerprint); GuidedGrid adds guided
// settings to DefaultGrid, each of which builds with a guide.
func TestTableSettingsRefuseTheGuidedDecoder(t *testing.T) {
	_, err := FromSetting(lut.Setting{Method: "freecache", Decoder: "guided"}, DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "names no guide") {
		t.Errorf("guided setting: %v", err)
	}
	o := DefaultOptions()
	o.GuideFingerprint, o.Store = "aaaa", nopStore{}
	if m, err := FromSetting(lut.Setting{Method: "freecache", Decoder: "guided"}, o); err != nil || m.Name() != "freecache@guided" {
		t.Errorf("guided setting with a guide: %v", err)
	}
	plain, guided := DefaultGrid(), GuidedGrid()
	var added []string
	for _, s := range guided {
		if !slices.ContainsFunc(plain, func(p lut.Setting) bool { return p.String() == s.String() }) {
			added = append(added, s.String())
			if !s.Guided() {
				t.Errorf("GuidedGrid adds %s", s)
			}
		}
		if _, err := FromSetting(s, o); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if len(guided) != len(plain)+len(added) || !slices.Contains(added, "none@guided") || !slices.Contains(added, "freecache@guided") || !slices.Contains(added, "none@guided+threshold:0.9") {
		t.Errorf("GuidedGrid adds %v to DefaultGrid", added)
	}
}

// d2Cache's top k below the block's masked slots under the guided
// decoder, which commits left to right: every masked slot of the block is
// still scored (sample.Step.Whole), and the answer is the guide's greedy
// one.
func TestD2CacheTopKUnderTheGuidedDecoder(t *testing.T) {
	m, ids, pl, gen, ar := guidedRequest(t)
	o := DefaultOptions()
	o.D2.K = 2
	o.Decoding = sample.Decoding{Kind: sample.DecodeGuided}
	res, err := Run(context.Background(), m.Network, mk(t, "d2cache", o), Request{Prompt: ids, PrefixLen: pl}, gen)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Answer, ar.Answer) {
		t.Errorf("d2cache@guided, k 2: %v, the guide's greedy answer %v", res.Answer, ar.Answer)
	}
}
