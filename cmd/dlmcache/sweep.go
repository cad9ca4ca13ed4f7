package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// sweepResult is what sweep tau and sweep refresh write: one point per
// parameter value, averaged over the suites.
type sweepResult struct {
	Param    string       `json:"param"`
	Points   []sweepPoint `json:"points"`
	Baseline *sweepPoint  `json:"baseline,omitempty"` // the method none, for reference
	Refresh  any          `json:"deep_layers,omitempty"`
}

type sweepPoint struct {
	X            float64 `json:"x"`
	Accuracy     float64 `json:"accuracy"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	RowsFraction float64 `json:"rows_fraction"`
	MeanDepth    float64 `json:"mean_depth"`
	// FLOPsFraction is the matrix products' FLOPs over computing every
	// row; Refreshes the deep-layer refreshes per request.
	FLOPsFraction float64 `json:"flops_fraction"`
	Refreshes     float64 `json:"deep_refreshes_per_request"`
}

// parseFloats accepts "a,b,c" or "lo:hi:step".
func parseFloats(s string) ([]float64, error) {
	if parts := strings.Split(s, ":"); len(parts) == 3 {
		var v [3]float64
		for i, p := range parts {
			x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
			v[i] = x
		}
		if v[2] <= 0 || v[1] < v[0] {
			return nil, fmt.Errorf("%q: want lo:hi:step with lo ≤ hi and step > 0", s)
		}
		var out []float64
		for i := 0; ; i++ {
			x := v[0] + float64(i)*v[2]
			if x > v[1]+1e-9 {
				break
			}
			out = append(out, x)
		}
		return out, nil
	}
	var out []float64
	for _, p := range strings.Split(s, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// writeJSON writes v as indented JSON to dir/name and says so on f.ErrOut.
func writeJSON(f *factory, dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, name)
	if err := writeFileAtomic(p, append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintln(f.ErrOut, "wrote", p)
	return nil
}
