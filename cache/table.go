package cache

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dlmcache/dlmcache/lut"
	"github.com/dlmcache/dlmcache/model"
	"github.com/dlmcache/dlmcache/model/sample"
)

// Chooser is a method that picks, per request, the method that serves it
// (the table method: a calibrated table's choice for the request's ratio
// bin and answer-length class). Run, serve and bench resolve it before
// anything else.
type Chooser interface {
	Method
	// Choose is the method serving a request with a prompt of promptLen
	// tokens, a shared prefix of prefixLen and generation options gen.
	Choose(promptLen, prefixLen int, gen sample.GenOptions) Method
}

// Choose is the method that serves a request under m — m's choice when m
// chooses, else m — and the generation options that method adapts gen
// to: the one place a request's method is resolved (Run, and serve for
// its jobs).
func Choose(m Method, promptLen, prefixLen int, gen sample.GenOptions) (Method, sample.GenOptions) {
	if c, ok := m.(Chooser); ok {
		m = c.Choose(promptLen, prefixLen, gen)
	}
	return m, m.Gen(gen)
}

// tableMethod serves each request with the method a v3 table chose for
// its bin and class; every chosen method shares the one prefix store, so
// requests share their system messages' K/V wherever the choice reuses
// them.
type tableMethod struct {
	base
	methods map[string]Method // by Setting.String
	none    Method
}

func newTableMethod(o Options) (Method, error) {
	if o.Table == nil {
		return nil, errors.New("needs a calibrated table: pass --lut table.json (from dlmcache calibrate)")
	}
	if !o.Table.Chooses() {
		return nil, fmt.Errorf("the table chooses no methods (format %s without choices): calibrate it with dlmcache calibrate", o.Table.Format)
	}
	m := &tableMethod{base: base{"table", o}, methods: map[string]Method{}}
	m.none, _ = newNone(o)
	for _, b := range o.Table.Bins {
		for _, c := range b.Choices {
			key := c.Setting.String()
			if _, ok := m.methods[key]; ok {
				continue
			}
			mo := o
			mo.Table, mo.Decoding = nil, sample.Decoding{}
			if g := o.Table.Guide; g != nil {
				mo.GuideFingerprint = g.Fingerprint
			}
			meth, err := FromSetting(c.Setting, mo)
			if err != nil {
				return nil, fmt.Errorf("bin [%g, %g), class %s: %w", b.Lo, b.Hi, c.Class, err)
			}
			m.methods[key] = meth
		}
	}
	return m, nil
}

func (m *tableMethod) Store() PrefixStore { return m.o.Store }
func (m *tableMethod) Table() *lut.Table  { return m.o.Table }
func (m *tableMethod) Source() string     { return "" } // each choice has its own

// Planner serves a request that was not resolved first with no caching.
func (m *tableMethod) Planner(*model.Network, string, *Info) sample.Planner { return nil }

func (m *tableMethod) Choose(promptLen, prefixLen int, gen sample.GenOptions) Method {
	r := float64(prefixLen) / float64(max(1, promptLen+gen.GenLength))
	c, _, ok := m.o.Table.Choose(r, gen.GenLength)
	if !ok {
		return m.none
	}
	return m.methods[c.Setting.String()]
}

// CheckModel refuses a table whose choices cannot serve a model of config
// c: a method the model does not support (exact-block on a bidirectional
// model, a whole-canvas method on a block-causal one), a depth beyond its
// layers, or a regime its schedule rules refuse. The error names the bin
// and class.
func (m *tableMethod) CheckModel(c *model.Config) error {
	t := m.o.Table
	if g := t.Regime; g.Known() {
		if _, err := sample.ScheduleFor(c, 0, sample.GenOptions{Regime: g}); err != nil {
			return fmt.Errorf("the table's regime (gen_length %d, steps %d, block_length %d): %w", g.GenLength, g.Steps, g.BlockLength, err)
		}
	}
	for _, b := range t.Bins {
		for _, ch := range b.Choices {
			for k, v := range ch.Setting.Knobs {
				if (k == "depth" || strings.HasSuffix(k, "-depth")) && (v < 0 || v > float64(c.NLayers)) {
					return fmt.Errorf("bin [%g, %g), class %s: %s %s=%g: the model has %d layers", b.Lo, b.Hi, ch.Class, ch.Setting.Method, k, v, c.NLayers)
				}
			}
			if err := CheckModel(m.methods[ch.Setting.String()], c); err != nil {
				return fmt.Errorf("bin [%g, %g), class %s: %s: %w", b.Lo, b.Hi, ch.Class, ch.Setting, err)
			}
		}
	}
	return nil
}

// Settings lists the distinct methods the table serves with.
func (m *tableMethod) Settings() map[string]Method { return m.methods }
