package cache

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
	"github.com/dlmcache/dlmcache/regime"
)

// Knob is one setting a method owns, by the name tables and calibration
// use (lut.Setting's knobs): how it sets Options.
type Knob struct {
	Name  string
	Usage string
	Set   func(o *Options, v float64) error
}

// intKnob is a knob that takes a whole number at least lo.
func intKnob(name, usage string, lo int, set func(o *Options, v int)) Knob {
	return Knob{Name: name, Usage: usage, Set: func(o *Options, v float64) error {
		if v != math.Trunc(v) || v < float64(lo) {
			return fmt.Errorf("knob %s: %g is not a whole number ≥ %d", name, v, lo)
		}
		set(o, int(v))
		return nil
	}}
}

// floatKnob is a knob that takes a number in [lo, hi].
func floatKnob(name, usage string, lo, hi float64, set func(o *Options, v float64)) Knob {
	return Knob{Name: name, Usage: usage, Set: func(o *Options, v float64) error {
		if !(v >= lo && v <= hi) {
			return fmt.Errorf("knob %s: %g is outside [%g, %g]", name, v, lo, hi)
		}
		set(o, v)
		return nil
	}}
}

// DepthTable is a table that serves depth d at every ratio, for every deep
// source (0: no reuse): what a bicache setting's depth knob installs. Its
// layer count is d's (the planner clamps to the model's).
func DepthTable(id lut.ModelID, d int) *lut.Table {
	id.NLayers = max(id.NLayers, d, 1)
	cal := map[string]*lut.BinCalibration{}
	for _, s := range []DeepSource{SourceStore, SourceRequest, SourceRecompute} {
		cal[string(s)] = &lut.BinCalibration{Depth: d}
	}
	return &lut.Table{Format: lut.Format, Model: id, Tau: 1, Calibration: &lut.Calibration{Method: "bicache"},
		Bins: []lut.Bin{{Lo: 0, Hi: 1, Calibrated: cal}}}
}

// FromSetting builds the method a table's setting names on options o (the
// store, fingerprint and salt; knobs the setting leaves out keep o's).
func FromSetting(s lut.Setting, o Options) (Method, error) {
	spec, err := Lookup(s.Method)
	if err != nil {
		return nil, err
	}
	if o.Decoding, err = sample.ParseDecoding(s.Decoder); err != nil {
		return nil, fmt.Errorf("setting %s: %w", s, err)
	}
	if o.Decoding.Guided() && o.GuideFingerprint == "" {
		return nil, fmt.Errorf("setting %s: the table names no guide, so its settings cannot decode with %s (calibrate --guide records one)", s, o.Decoding)
	}
	if s.Source != "" {
		if o.DeepSource, err = ParseDeepSource(s.Source); err != nil {
			return nil, fmt.Errorf("setting %s: %w", s, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Knobs)) {
		i := slices.IndexFunc(spec.Knobs, func(kn Knob) bool { return kn.Name == k })
		if i < 0 {
			return nil, fmt.Errorf("setting %s: method %s has no knob %q (it has %v)", s, s.Method, k, KnobNames(spec))
		}
		if err := spec.Knobs[i].Set(&o, s.Knobs[k]); err != nil {
			return nil, fmt.Errorf("setting %s: %w", s, err)
		}
	}
	return New(s.Method, o)
}

// KnobNames lists a method's knobs.
func KnobNames(s Spec) []string {
	var out []string
	for _, k := range s.Knobs {
		out = append(out, k.Name)
	}
	return out
}

// ParseSetting reads a setting as lut.Setting.String writes it:
// "NAME[@DECODER] [knob=v …] [source=S]", checking the method, decoder,
// knob names and values.
func ParseSetting(s string) (lut.Setting, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return lut.Setting{}, errors.New("empty setting")
	}
	name, dec, err := ParseSpec(fields[0])
	if err != nil {
		return lut.Setting{}, err
	}
	if dec.IsDefault() {
		dec = ownDecoding(name)
	}
	st := lut.Setting{Method: name, Decoder: dec.String()}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return lut.Setting{}, fmt.Errorf("setting %q: %q is not knob=value", s, f)
		}
		if k == "source" {
			if _, err := ParseDeepSource(v); err != nil || v == "" {
				return lut.Setting{}, fmt.Errorf("setting %q: deep source %q: want store, request or recompute", s, v)
			}
			st.Source = v
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return lut.Setting{}, fmt.Errorf("setting %q: knob %s: %q is not a number", s, k, v)
		}
		if st.Knobs == nil {
			st.Knobs = map[string]float64{}
		}
		st.Knobs[k] = x
	}
	o := DefaultOptions()
	// Only checked: a guided setting's guide is the caller's to give.
	o.Store, o.GuideFingerprint = nopStore{}, "unchecked"
	if _, err := FromSetting(st, o); err != nil {
		return lut.Setting{}, err
	}
	return st, nil
}

// ownDecoding is the decoder a registered method generates with on its
// default options when no decoder is named (block's threshold rule, the
// schedule for most); the schedule for a method that cannot be built
// without what only a caller has (table, modules).
func ownDecoding(name string) sample.Decoding {
	o := DefaultOptions()
	o.Store, o.Table = nopStore{}, DepthTable(lut.ModelID{}, 0)
	m, err := New(name, o)
	if err != nil {
		return sample.Decoding{Kind: sample.DecodeSchedule}
	}
	return Decoding(m, sample.GenOptions{Regime: regime.Regime{GenLength: 32, Steps: 32}})
}

// DefaultGrid is the method space calibration searches by default: no
// cache under the schedule and under threshold decoding at 0.7, 0.8 and
// 0.9, and each method's declared grid under its own decoder and under
// threshold decoding at 0.9.
func DefaultGrid() []lut.Setting {
	return defaultGrid(false)
}

// GuidedGrid is DefaultGrid with the guided decoder beside the others:
// none under guided, guided:0.9 (the top-k relative rule) and
// guided+threshold:0.9 (the DLM's proposals at least 0.9 confident kept
// where the guide rejects them: the guided setting that keeps the DLM's
// answers where the guide is the weaker model), and each
// primitive cache method (no composition or variant) under guided at its
// first declared grid point, or at its defaults where it declares none
// (guidedNoGrid). FlashDLM pairs FreeCache with it; under the
// deterministic rule the answer is the guide's whatever the cache, so one
// point a method measures what it saves. It is calibrate --guide's.
func GuidedGrid() []lut.Setting {
	return defaultGrid(true)
}

// guidedNoGrid are the primitive methods with no declared grid that the
// guided grid runs at their defaults (not exact-block, a block-causal
// model's, which guided decoding does not take, nor serve's modules).
var guidedNoGrid = []string{"prefix-all", "dllm-cache", "freecache"}

func defaultGrid(guided bool) []lut.Setting {
	var out []lut.Setting
	decoders := []string{"threshold:0.9", "threshold:0.8", "threshold:0.7"}
	if guided {
		decoders = append(decoders, "guided", "guided:0.9", "guided+threshold:0.9")
	}
	for _, d := range decoders {
		out = append(out, lut.Setting{Method: "none", Decoder: d})
	}
	for _, s := range registry {
		primitive := s.Base == "" && s.Calibration == "" && s.Name != "none" && s.Name != "table"
		for i, g := range s.Grid {
			ds := g.Decoders
			if guided && i == 0 && primitive && !slices.Contains(ds, "guided") {
				ds = append(slices.Clone(ds), "guided")
			}
			for _, d := range ds {
				out = append(out, lut.Setting{Method: s.Name, Decoder: d, Knobs: maps.Clone(g.Knobs), Source: g.Source})
			}
		}
		if guided && slices.Contains(guidedNoGrid, s.Name) {
			out = append(out, lut.Setting{Method: s.Name, Decoder: "guided"})
		}
	}
	return out
}

// GridPoint is one point of a method's declared calibration grid: knob
// values, a deep source, and the decoders to try them under.
type GridPoint struct {
	Knobs    map[string]float64
	Source   string
	Decoders []string
}

// nopStore stands in for a store when a setting is only checked.
type nopStore struct{}

func (nopStore) Get(*model.Network, PrefixID) (*Entry, int, int, float64, error) {
	return nil, 0, 0, 0, errors.New("no store")
}
func (nopStore) Release(*Entry) {}
func (nopStore) Stats() Stats   { return Stats{} }
