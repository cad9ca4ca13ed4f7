package regime

import (
	"encoding/json"
	"testing"
)

func TestText(t *testing.T) {
	r := Regime{GenLength: 128, Steps: 64, BlockLength: 32}
	if got := r.Text(); got != "gen length 128, 64 steps, blocks of 32" {
		t.Errorf("Text %q", got)
	}
	if got := r.Short(); got != "128/64/32" {
		t.Errorf("Short %q", got)
	}
}

func TestBlocksAndKnown(t *testing.T) {
	for _, tc := range []struct {
		r      Regime
		blocks int
		known  bool
	}{
		{Regime{GenLength: 128, Steps: 64, BlockLength: 32}, 4, true},
		{Regime{GenLength: 16, Steps: 8}, 1, false},
		{Regime{Steps: 8, BlockLength: 8}, 0, false},
	} {
		if got := tc.r.Blocks(); got != tc.blocks {
			t.Errorf("%s: Blocks %d, want %d", tc.r.Short(), got, tc.blocks)
		}
		if got := tc.r.Known(); got != tc.known {
			t.Errorf("%s: Known %t, want %t", tc.r.Short(), got, tc.known)
		}
	}
}

// TestJSONFlat: a struct embedding Regime writes its keys flat, in the
// embedding's place, block_length left out when 0, and reads them back.
func TestJSONFlat(t *testing.T) {
	type record struct {
		Model string `json:"model"`
		Regime
		Seed int `json:"seed"`
	}
	for _, tc := range []struct {
		r    record
		want string
	}{
		{record{"m", Regime{GenLength: 16, Steps: 8, BlockLength: 4}, 1}, `{"model":"m","gen_length":16,"steps":8,"block_length":4,"seed":1}`},
		{record{"m", Regime{GenLength: 16, Steps: 8}, 1}, `{"model":"m","gen_length":16,"steps":8,"seed":1}`},
	} {
		raw, err := json.Marshal(tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != tc.want {
			t.Errorf("wrote %s, want %s", raw, tc.want)
		}
		var back record
		if err := json.Unmarshal(raw, &back); err != nil || back != tc.r {
			t.Errorf("read back %+v (%v), want %+v", back, err, tc.r)
		}
	}
}
