package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/dlmcache/dlmcache/internal/atomicfile"
	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/regime"
)

// Record is one row of similarity.parquet: one (request, layer, step).
type Record struct {
	RequestID    string  `parquet:"request_id,dict" json:"request_id"`
	Source       string  `parquet:"source,dict" json:"source"`
	PrefixTokens int32   `parquet:"prefix_tokens" json:"prefix_tokens"`
	TotalTokens  int32   `parquet:"total_tokens" json:"total_tokens"`
	Ratio        float64 `parquet:"ratio" json:"ratio"`
	Layer        int32   `parquet:"layer" json:"layer"`
	Step         int32   `parquet:"step" json:"step"`
	SimK         float64 `parquet:"sim_k" json:"sim_k"`
	SimV         float64 `parquet:"sim_v" json:"sim_v"`
	SimKV        float64 `parquet:"sim_kv" json:"sim_kv"`
	// SimKVRowMin is the smallest per-row K⊕V cosine over the prefix's
	// rows (NaN when read from a file written before it existed).
	SimKVRowMin float64 `parquet:"sim_kv_row_min" json:"sim_kv_row_min"`
}

// UnmarshalJSON decodes a record; one without sim_kv_row_min (a partial
// file written before the statistic existed) gets NaN there, not 0.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record // without this method
	p := plain{SimKVRowMin: math.NaN()}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = Record(p)
	return nil
}

// Similarity names the statistic a request's safe depth is computed from.
type Similarity string

const (
	// SimPrefix is the design's S(l, t): the cosine of the whole prefix's
	// K⊕V, cached against reference.
	SimPrefix Similarity = "kv"
	// SimRowMin is the worst prefix row's K⊕V cosine: a layer is safe only
	// if no prefix row moves more than τ allows.
	SimRowMin Similarity = "kv-row-min"
)

// Check accepts a known statistic ("" is SimPrefix).
func (s Similarity) Check() error {
	switch s {
	case "", SimPrefix, SimRowMin:
		return nil
	}
	return fmt.Errorf("similarity %q: want %s or %s", s, SimPrefix, SimRowMin)
}

// Of returns r's value of the statistic.
func (s Similarity) Of(r Record) float64 {
	if s == SimRowMin {
		return r.SimKVRowMin
	}
	return r.SimKV
}

// Available reports an error if s is unknown or some record lacks it (a
// file written before it was recorded).
func (s Similarity) Available(recs []Record) error {
	if err := s.Check(); err != nil {
		return err
	}
	for _, r := range recs {
		if math.IsNaN(s.Of(r)) {
			return fmt.Errorf("request %s has no %s similarity: its file predates that statistic; rerun dlmcache profile", r.RequestID, s)
		}
	}
	return nil
}

// RunInfo is a profiling run's parameters. It is stored in the parquet
// file's key/value metadata under MetaKey, and as run.json.
type RunInfo struct {
	Model lut.ModelID `json:"model"`
	regime.Regime
	AllSteps   bool       `json:"all_steps"`
	Tau        float64    `json:"tau"`
	Similarity Similarity `json:"similarity,omitempty"` // the statistic of the table the run writes ("" is kv)
	Ratios     string     `json:"ratios"`
	Edges      []float64  `json:"edges"`
	PerRatio   int        `json:"per_ratio"`
	Seed       int64      `json:"seed"`
	Shard      string     `json:"shard,omitempty"`
	Data       []string   `json:"data,omitempty"`
	Systems    []string   `json:"system_prompts,omitempty"`
	MaxTokens  int        `json:"max_tokens,omitempty"`
	Requests   int        `json:"requests"`
	Unfilled   []string   `json:"unfilled_bins,omitempty"`
	Seconds    float64    `json:"seconds,omitempty"`
	Version    string     `json:"dlmcache_version,omitempty"`
}

// MetaKey is the parquet key/value metadata key that holds RunInfo as JSON.
const MetaKey = "dlmcache.profile.run"

// sameRun reports why two runs' records cannot be pooled into one table.
func (a RunInfo) sameRun(b RunInfo) error {
	switch {
	case a.Model.Fingerprint != b.Model.Fingerprint || a.Model.NLayers != b.Model.NLayers:
		return fmt.Errorf("model %s (%s) vs %s (%s)", a.Model.Name, a.Model.Fingerprint, b.Model.Name, b.Model.Fingerprint)
	case a.Regime != b.Regime:
		return fmt.Errorf("generation settings %s vs %s (gen length/steps/block)", a.Regime.Short(), b.Regime.Short())
	case fmt.Sprint(a.Edges) != fmt.Sprint(b.Edges):
		return fmt.Errorf("ratio bins %s vs %s", a.Ratios, b.Ratios)
	case a.AllSteps != b.AllSteps:
		return fmt.Errorf("all_steps %t vs %t (--all-steps: every step's similarities or the first step's only)", a.AllSteps, b.AllSteps)
	case !slices.Equal(a.Data, b.Data) || !slices.Equal(a.Systems, b.Systems):
		return fmt.Errorf("sources: data %q, system prompts %q vs data %q, system prompts %q (--data, --system)", a.Data, a.Systems, b.Data, b.Systems)
	case a.MaxTokens != b.MaxTokens:
		return fmt.Errorf("max_tokens %d vs %d (--max-tokens)", a.MaxTokens, b.MaxTokens)
	}
	return nil
}

// sameResume reports why an interrupted run cannot be continued by a
// command with settings b: anything that changes what its records mean
// (sameRun) or which requests they are.
func (a RunInfo) sameResume(b RunInfo) error {
	if err := a.sameRun(b); err != nil {
		return err
	}
	switch {
	case a.Seed != b.Seed || a.PerRatio != b.PerRatio:
		return fmt.Errorf("sampling: seed %d, %d per ratio vs seed %d, %d per ratio (--seed, --per-ratio)", a.Seed, a.PerRatio, b.Seed, b.PerRatio)
	case a.Shard != b.Shard:
		return fmt.Errorf("shard %q vs %q (--shard)", a.Shard, b.Shard)
	}
	return nil
}

// WriteParquet writes records and run info to path atomically.
func WriteParquet(path string, recs []Record, info RunInfo) error {
	meta, err := json.Marshal(info)
	if err != nil {
		return err
	}
	err = atomicfile.Write(path, 0o644, func(f io.Writer) error {
		w := parquet.NewGenericWriter[Record](f, parquet.KeyValueMetadata(MetaKey, string(meta)), parquet.Compression(&parquet.Zstd))
		if _, err := w.Write(recs); err != nil {
			return err
		}
		return w.Close()
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

var requiredColumns = []string{"request_id", "prefix_tokens", "total_tokens", "ratio", "layer", "step", "sim_k", "sim_v", "sim_kv"}

// ReadParquet reads one similarity file, checking its schema and metadata.
func ReadParquet(path string) ([]Record, RunInfo, error) {
	var info RunInfo
	f, err := os.Open(path)
	if err != nil {
		return nil, info, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, info, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, info, fmt.Errorf("%s: not a readable parquet file: %w", path, err)
	}
	for _, c := range requiredColumns {
		if _, ok := pf.Schema().Lookup(c); !ok {
			return nil, info, fmt.Errorf("%s: not a similarity file: column %q is missing", path, c)
		}
	}
	raw, ok := pf.Lookup(MetaKey)
	if !ok {
		return nil, info, fmt.Errorf("%s: no %q metadata: not written by dlmcache profile", path, MetaKey)
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return nil, info, fmt.Errorf("%s: metadata %q: %w", path, MetaKey, err)
	}
	r := parquet.NewGenericReader[Record](f)
	defer r.Close()
	recs := make([]Record, r.NumRows())
	n, err := r.Read(recs)
	if err != nil && n != len(recs) {
		return nil, info, fmt.Errorf("%s: %w", path, err)
	}
	recs = recs[:n]
	if _, ok := pf.Schema().Lookup("sim_kv_row_min"); !ok {
		for i := range recs {
			recs[i].SimKVRowMin = math.NaN()
		}
	}
	return recs, info, nil
}

// ReadAll reads and pools several similarity files (shards of one run, or a
// resumed run's parts), refusing files from different models or settings and
// dropping duplicate requests.
func ReadAll(paths []string) ([]Record, RunInfo, error) {
	if len(paths) == 0 {
		return nil, RunInfo{}, errors.New("no similarity files given")
	}
	var all []Record
	var first RunInfo
	seen := map[string]string{}
	for i, p := range paths {
		recs, info, err := ReadParquet(p)
		if err != nil {
			return nil, first, err
		}
		if i == 0 {
			first = info
		} else if err := first.sameRun(info); err != nil {
			return nil, first, fmt.Errorf("%s and %s come from different runs: %w", paths[0], p, err)
		}
		for _, r := range recs {
			// A request recorded by an earlier file (overlapping shards,
			// a resumed run) counts once.
			if where, ok := seen[r.RequestID]; ok && where != p {
				continue
			}
			seen[r.RequestID] = p
			all = append(all, r)
		}
	}
	if len(all) == 0 {
		return nil, first, fmt.Errorf("%s: no records", paths[0])
	}
	first.Requests = len(seen)
	return all, first, nil
}

// RequestDepth is one request's safe depth at τ.
type RequestDepth struct {
	ID     string
	Source string
	Ratio  float64
	Depth  int
}

// Depths computes every request's safe depth at τ from its step-1
// similarities (the statistic sim), in request-id order.
func Depths(recs []Record, tau float64, sim Similarity) []RequestDepth {
	type acc struct {
		src   string
		ratio float64
		sims  map[int32]float64
	}
	by := map[string]*acc{}
	for _, r := range recs {
		if r.Step != 1 {
			continue
		}
		a := by[r.RequestID]
		if a == nil {
			a = &acc{src: r.Source, ratio: r.Ratio, sims: map[int32]float64{}}
			by[r.RequestID] = a
		}
		a.sims[r.Layer] = sim.Of(r)
	}
	ids := make([]string, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]RequestDepth, 0, len(ids))
	for _, id := range ids {
		a := by[id]
		s := make([]float64, 0, len(a.sims))
		for l := int32(1); ; l++ {
			v, ok := a.sims[l]
			if !ok {
				break
			}
			s = append(s, v)
		}
		out = append(out, RequestDepth{ID: id, Source: a.src, Ratio: a.ratio, Depth: SafeDepth(s, tau)})
	}
	return out
}

// BuildTable makes the ratio→depth table at τ from similarity records and
// the statistic sim.
func BuildTable(recs []Record, info RunInfo, tau float64, sim Similarity) (*lut.Table, error) {
	if err := lut.CheckTau(tau); err != nil {
		return nil, err
	}
	if err := sim.Available(recs); err != nil {
		return nil, err
	}
	if sim == "" {
		sim = SimPrefix
	}
	ds := Depths(recs, tau, sim)
	samples := make([]lut.Sample, len(ds))
	for i, d := range ds {
		samples[i] = lut.Sample{Ratio: d.Ratio, Depth: d.Depth}
	}
	t, err := lut.Build(info.Model, tau, info.Edges, samples)
	if err != nil {
		return nil, err
	}
	t.GenLength, t.Steps, t.BlockLength, t.Similarity = info.GenLength, info.Steps, info.BlockLength, string(sim)
	t.Source = map[string]any{"requests": len(ds), "per_ratio": info.PerRatio, "ratios": info.Ratios, "all_steps": info.AllSteps}
	if info.Shard != "" {
		t.Source["shard"] = info.Shard
	}
	return t, nil
}
