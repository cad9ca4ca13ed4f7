package cache

import (
	"fmt"
	"slices"
	"sync"

	"github.com/spf13/pflag"

	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/backend"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Module is a reusable piece of a prompt — a document, tool descriptions,
// examples — with a reserved range of position ids, as Prompt Cache's
// schema declares one: its K/V are computed once, alone, at positions
// Start..Start+len(Tokens)-1, and every request importing it reuses them.
type Module struct {
	Name   string
	Tokens []int32
	Start  int32
}

// Schema is an ordered set of modules with ascending, disjoint reserved
// ranges. A request imports some of them, in schema order, and adds its own
// text after them; a module it does not import leaves a gap in the
// position ids (Prompt Cache's discontinuous positions), so every module
// keeps its positions whichever others come with it.
type Schema struct {
	Modules []Module
}

// Layout lays modules out one after another from position 0, in order.
func Layout(names []string, tokens [][]int32) (*Schema, error) {
	if len(names) != len(tokens) {
		return nil, fmt.Errorf("modules: %d names for %d token lists", len(names), len(tokens))
	}
	s := &Schema{}
	var at int32
	for i := range names {
		s.Modules = append(s.Modules, Module{Name: names[i], Tokens: tokens[i], Start: at})
		at += int32(len(tokens[i]))
	}
	return s, s.Check()
}

// Check validates the schema: named, non-empty modules with unique names
// and ascending, disjoint ranges.
func (s *Schema) Check() error {
	seen := map[string]bool{}
	var end int32
	for i, m := range s.Modules {
		switch {
		case m.Name == "":
			return fmt.Errorf("modules: module %d has no name", i)
		case seen[m.Name]:
			return fmt.Errorf("modules: module %q declared twice", m.Name)
		case len(m.Tokens) == 0:
			return fmt.Errorf("modules: module %q is empty", m.Name)
		case m.Start < end:
			return fmt.Errorf("modules: module %q starts at position %d, inside the range before it (which ends at %d)", m.Name, m.Start, end)
		}
		seen[m.Name] = true
		end = m.Start + int32(len(m.Tokens))
	}
	return nil
}

// End is the position after the last reserved range: a request's own text
// starts there.
func (s *Schema) End() int32 {
	if len(s.Modules) == 0 {
		return 0
	}
	m := s.Modules[len(s.Modules)-1]
	return m.Start + int32(len(m.Tokens))
}

// Compose is the prompt of a request importing the named modules (in
// schema order, each once) followed by rest: its tokens, the prefix length
// (the modules' tokens: the shared prefix the store serves) and its
// position ids (each module at its range, rest from End).
func (s *Schema) Compose(names []string, rest []int32) (prompt []int32, prefixLen int, pos []int32, err error) {
	want := map[string]bool{}
	for _, n := range names {
		if want[n] {
			return nil, 0, nil, fmt.Errorf("modules: %q imported twice", n)
		}
		want[n] = true
	}
	for _, m := range s.Modules {
		if !want[m.Name] {
			continue
		}
		delete(want, m.Name)
		prompt = append(prompt, m.Tokens...)
		for i := range int32(len(m.Tokens)) {
			pos = append(pos, m.Start+i)
		}
	}
	for n := range want {
		return nil, 0, nil, fmt.Errorf("modules: the schema declares no module %q", n)
	}
	prefixLen = len(prompt)
	prompt = append(prompt, rest...)
	for i := range int32(len(rest)) {
		pos = append(pos, s.End()+i)
	}
	return prompt, prefixLen, pos, nil
}

// match returns the modules whose tokens, in schema order, make up prefix
// (a module is taken where its tokens come next).
func (s *Schema) match(prefix []int32) ([]int, error) {
	var idx []int
	at := 0
	for i, m := range s.Modules {
		if at < len(prefix) && len(prefix)-at >= len(m.Tokens) && slices.Equal(prefix[at:at+len(m.Tokens)], m.Tokens) {
			idx = append(idx, i)
			at += len(m.Tokens)
		}
	}
	if at != len(prefix) {
		return nil, fmt.Errorf("modules: the prefix is not a sequence of the schema's modules (tokens %d.. match none)", at)
	}
	return idx, nil
}

// ModuleStore serves prefixes made of a schema's modules: each module's
// per-layer K, V and input hidden state are computed once, over the module
// alone at its reserved positions, and an entry is the concatenation of
// the imported modules'. So in the layers a table reuses, a module never
// attends to the other modules or to the request — the approximation
// Prompt Cache makes for autoregressive models, which a diffusion model's
// bidirectional attention makes stronger; docs/results.md measures what it
// costs by depth. Modules stay stored for the store's life (the schema
// bounds them); computing one holds the store's lock, so concurrent
// requests never compute a module twice.
type ModuleStore struct {
	b      backend.Backend
	schema *Schema

	mu      sync.Mutex
	entries map[moduleKey]*Entry
	stats   Stats
}

type moduleKey struct {
	i       int
	fp, slt string
}

// NewModuleStore returns an empty store for the schema's modules.
func NewModuleStore(b backend.Backend, s *Schema) (*ModuleStore, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	return &ModuleStore{b: b, schema: s, entries: map[moduleKey]*Entry{}}, nil
}

// Get implements PrefixStore: id.Tokens must be a sequence of the schema's
// modules (Schema.Compose's prefix).
func (s *ModuleStore) Get(lm *model.Network, id PrefixID) (*Entry, int, int, float64, error) {
	idx, err := s.schema.match(id.Tokens)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Queries++
	s.stats.QueryTokens += int64(len(id.Tokens))
	var parts []*Entry
	hit, rows := 0, 0
	var flops float64
	for _, i := range idx {
		m := s.schema.Modules[i]
		k := moduleKey{i, id.Fingerprint, id.Salt}
		e := s.entries[k]
		if e == nil {
			pos := make([]int32, len(m.Tokens))
			for j := range pos {
				pos[j] = m.Start + int32(j)
			}
			var out *model.Output
			var err error
			if e, out, err = computeEntry(lm, model.Input{Tokens: m.Tokens, Positions: pos}); err != nil {
				return nil, 0, 0, 0, fmt.Errorf("module %q: %w", m.Name, err)
			}
			s.entries[k] = e
			s.stats.Bytes += e.Bytes
			rows += out.RowsComputed
			flops += out.FLOPs
		} else {
			hit += len(m.Tokens)
		}
		parts = append(parts, e)
	}
	s.stats.HitTokens += int64(hit)
	if hit == len(id.Tokens) {
		s.stats.Hits++
	}
	return concatEntries(s.b, parts), hit, rows, flops, nil
}

// Release implements PrefixStore: frees the request's assembled entry (the
// modules stay stored).
func (s *ModuleStore) Release(e *Entry) {
	freeLayers(s.b, e.K, e.V, e.H)
}

// Stats implements PrefixStore.
func (s *ModuleStore) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Entries = len(s.entries)
	return st
}

// ModulePlanner (for the model whose fingerprint is given) reuses, in layers 0..depth-1, the modules' K/V from store
// for a request's prefix (Schema.Compose's), and computes the prefix rows
// of the deeper layers every refresh steps, as bicache does (refresh 1:
// every step, so only the module reuse differs from computing the request
// whole). The request must be generated at Compose's position ids.
func ModulePlanner(lm *model.Network, fingerprint string, store *ModuleStore, depth, refresh int, info *Info) sample.Planner {
	if info == nil {
		info = &Info{}
	}
	deep := &deepRefresh{lm: lm, b: lm.Backend, L: len(lm.Blocks), period: max(refresh, 1), info: info}
	return &shallow{lm: lm, b: lm.Backend, L: len(lm.Blocks), store: store, src: SourceStore,
		id: PrefixID{Fingerprint: fingerprint}, info: info, inner: deep,
		depth: func(float64) (int, bool) { return depth, false }}
}

// ModuleOptions are the module method's settings (its refresh period is
// BiCacheOptions.Refresh; its store, Options.Store, a *ModuleStore).
type ModuleOptions struct {
	// Depth is the layers in which imported modules' K/V are reused.
	Depth int
}

// moduleSpec registers the module method. It needs a schema's module
// store, which no flag gives: serve builds it from --modules, so it is not
// offered by name, and its flag is serve's alone (AddFlags with the name).
var moduleSpec = Spec{Name: "modules", Summary: "Prompt Cache's modules: imported modules' K/V, each computed once alone at its reserved positions, reused in layers 1..depth; the deeper layers as bicache's",
	New: newModuleMethod, Needs: "a module schema (serve --modules)", Flags: moduleFlags}

// moduleFlags declares --module-depth (serve --modules).
func moduleFlags(fl *pflag.FlagSet, o *Options) {
	fl.IntVar(&o.Modules.Depth, "module-depth", 1, "layers in which imported modules' K/V are reused (1 is exact; 2 held on the bundled model, 3 and deeper did not: docs/results.md 0.6)")
}

// moduleMethod serves prompts composed of a schema's modules.
type moduleMethod struct {
	base
	store          *ModuleStore
	depth, refresh int
}

// newModuleMethod is the Method of prompt-module requests: ModulePlanner
// over o.Store (a *ModuleStore) at depth o.Modules.Depth and refresh
// period o.BiCache.Refresh, for the model of o.Fingerprint. Its requests
// must carry Schema.Compose's position ids (Request.Positions). The
// modules are the operator's own declared text, so the salt is ignored:
// every request importing a module shares its K/V.
func newModuleMethod(o Options) (Method, error) {
	store, ok := o.Store.(*ModuleStore)
	if !ok || store == nil {
		return nil, fmt.Errorf("modules: no module store")
	}
	depth, refresh := o.Modules.Depth, o.BiCache.Refresh
	if depth < 0 || refresh < 1 {
		return nil, fmt.Errorf("modules: depth %d, refresh %d: want depth ≥ 0 and refresh ≥ 1", depth, refresh)
	}
	return &moduleMethod{base: base{"modules", o}, store: store, depth: depth, refresh: refresh}, nil
}

// NewModuleMethod is the registered "modules" method on options o with
// store, depth and refresh set in them.
func NewModuleMethod(store *ModuleStore, depth, refresh int, o Options) (Method, error) {
	if store != nil {
		o.Store = store
	}
	o.Modules.Depth, o.BiCache.Refresh = depth, refresh
	return newModuleMethod(o)
}

func (m *moduleMethod) Planner(lm *model.Network, _ string, info *Info) sample.Planner {
	return ModulePlanner(lm, m.o.Fingerprint, m.store, m.depth, m.refresh, info)
}

func (m *moduleMethod) Store() PrefixStore { return m.store }
