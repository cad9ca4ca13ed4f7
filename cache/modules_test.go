package cache

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

func TestSchemaCompose(t *testing.T) {
	s := &Schema{Modules: []Module{
		{Name: "a", Tokens: []int32{1, 2}, Start: 0},
		{Name: "b", Tokens: []int32{3, 4, 5}, Start: 2},
		{Name: "c", Tokens: []int32{6}, Start: 10},
	}}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		names      []string
		wantPrompt []int32
		wantPos    []int32
	}{
		{[]string{"a", "b", "c"}, []int32{1, 2, 3, 4, 5, 6, 9}, []int32{0, 1, 2, 3, 4, 10, 11}},
		{[]string{"c", "a"}, []int32{1, 2, 6, 9}, []int32{0, 1, 10, 11}}, // schema order, b's range a gap
		{nil, []int32{9}, []int32{11}},
	} {
		p, m, pos, err := s.Compose(tc.names, []int32{9})
		if err != nil {
			t.Fatalf("%v: %v", tc.names, err)
		}
		if !slices.Equal(p, tc.wantPrompt) || !slices.Equal(pos, tc.wantPos) || m != len(p)-1 {
			t.Errorf("%v: prompt %v prefix %d positions %v; want %v, %d, %v", tc.names, p, m, pos, tc.wantPrompt, len(tc.wantPrompt)-1, tc.wantPos)
		}
		if idx, err := s.match(p[:m]); err != nil || len(idx) != len(tc.names) {
			t.Errorf("%v: match %v, %v", tc.names, idx, err)
		}
	}
	for _, tc := range []struct {
		names []string
		want  string
	}{{[]string{"a", "a"}, "twice"}, {[]string{"z"}, "no module"}} {
		if _, _, _, err := s.Compose(tc.names, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.names, err, tc.want)
		}
	}
	if _, err := s.match([]int32{1, 2, 4}); err == nil {
		t.Error("a prefix that is no module sequence matched")
	}
	for _, bad := range []*Schema{
		{Modules: []Module{{Name: "a", Tokens: []int32{1}}, {Name: "a", Tokens: []int32{2}, Start: 1}}},
		{Modules: []Module{{Name: "a", Tokens: []int32{1, 2}}, {Name: "b", Tokens: []int32{2}, Start: 1}}},
		{Modules: []Module{{Name: "a"}}},
		{Modules: []Module{{Tokens: []int32{1}}}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("schema %+v passed", bad.Modules)
		}
	}
}

// Module reuse, checked three ways: at depth 0 it is computing the request
// whole at the same position ids (gaps included); the stored modules'
// layer-0 K/V (a projection of each token at its position) equal the rows
// of a forward over the whole composed prefix at its position ids; and a
// schema of one module covering the prefix gives bicache's answers (store
// source, R = 1) at every depth. A second request finds every module
// stored and computes fewer rows.
func TestModuleReuse(t *testing.T) {
	m := loadTiny(t)
	L := len(m.Blocks)
	ids, pl := request(t, m, 2)
	if pl < 12 {
		t.Fatalf("prefix of %d tokens", pl)
	}
	third := pl / 3
	names := []string{"head", "doc", "unused", "tail"}
	parts := [][]int32{ids[:third], ids[third : 2*third], {7, 8, 9}, ids[2*third : pl]}
	s, err := Layout(names, parts)
	if err != nil {
		t.Fatal(err)
	}
	o := sample.GenOptions{Regime: regime.Regime{GenLength: 16, Steps: 8, BlockLength: 8}}
	for _, imp := range [][]string{{"head", "doc", "tail"}, {"head", "tail"}} {
		prompt, prefix, pos, err := s.Compose(imp, ids[pl:])
		if err != nil {
			t.Fatal(err)
		}
		o.Positions = pos
		want, _ := generate(t, m, mk(t, "none", Options{}), prompt, prefix, o)
		store, err := NewModuleStore(m.Backend, s)
		if err != nil {
			t.Fatal(err)
		}
		var info Info
		g, err := sample.Generate(t.Context(), m.Network, prompt, prefix, o, ModulePlanner(m.Network, m.Fingerprint, store, 0, 1, &info))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g.Canvas, want.Canvas) {
			t.Errorf("%v depth 0: %v\nwhole: %v", imp, g.Canvas, want.Canvas)
		}
		c := &prefixCapture{b: m.Backend}
		if _, err := m.Forward(model.Input{Tokens: prompt[:prefix], Positions: pos[:prefix]}, c); err != nil {
			t.Fatal(err)
		}
		e, _, _, _, err := store.Get(m.Network, PrefixID{Fingerprint: m.Fingerprint, Tokens: prompt[:prefix]})
		if err != nil {
			t.Fatal(err)
		}
		if d := max(maxDiff(m.Backend, e.K[0], c.k[0]), maxDiff(m.Backend, e.V[0], c.v[0])); d > 1e-5 {
			t.Errorf("%v: layer-0 K/V of the modules differ from the whole prefix's by %g", imp, d)
		}
		store.Release(e)
		for _, d := range []int{1, L} {
			var info Info
			g, err := sample.Generate(t.Context(), m.Network, prompt, prefix, o, ModulePlanner(m.Network, m.Fingerprint, store, d, 1, &info))
			if err != nil {
				t.Fatalf("%v depth %d: %v", imp, d, err)
			}
			if info.Depth != d || info.HitTokens != prefix {
				t.Errorf("%v depth %d: info %+v (prefix %d)", imp, d, info, prefix)
			}
			if g.RowsComputed >= want.RowsComputed {
				t.Errorf("%v depth %d: %d rows computed, whole %d", imp, d, g.RowsComputed, want.RowsComputed)
			}
		}
		if st := store.Stats(); st.Entries != len(imp) {
			t.Errorf("%v: %d modules stored", imp, st.Entries)
		}
	}

	one, err := Layout([]string{"system"}, [][]int32{ids[:pl]})
	if err != nil {
		t.Fatal(err)
	}
	o.Positions = nil
	for _, d := range []int{1, L / 2, L} {
		store, _ := NewModuleStore(m.Backend, one)
		got, err := sample.Generate(t.Context(), m.Network, ids, pl, o, ModulePlanner(m.Network, m.Fingerprint, store, d, 1, nil))
		if err != nil {
			t.Fatal(err)
		}
		bi := mk(t, "bicache", Options{Store: NewStore(m.Backend, 1<<30, FIFO), Table: table(L, d), BiCache: BiCacheOptions{Refresh: 1}, DeepSource: SourceStore, Fingerprint: m.Fingerprint})
		want, _ := generate(t, m, bi, ids, pl, o)
		if !reflect.DeepEqual(got.Canvas, want.Canvas) {
			t.Errorf("one module, depth %d: %v\nbicache: %v", d, got.Canvas, want.Canvas)
		}
	}
}
