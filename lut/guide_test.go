package lut

import (
	"strings"
	"testing"
)

// A table whose choices decode guided must name its guide (Parse), is
// served only with that guide (CheckGuide), and String prints it.
func TestTableGuide(t *testing.T) {
	g := ModelID{Name: "ar", NLayers: 2, Fingerprint: "aaaa", Arch: "llama"}
	tab := func(guide *ModelID, decoder string) *Table {
		return &Table{Format: Format, Model: ModelID{Name: "m", NLayers: 2, Fingerprint: "ffff"}, Tau: 1, Classes: []Class{{Name: "all"}}, Guide: guide,
			Bins: []Bin{{Lo: 0, Hi: 1, Choices: []*Choice{{Class: "all", Setting: Setting{Method: "freecache", Decoder: decoder}}}}}}
	}
	if err := tab(nil, "guided:0.5").checkChoices(); err == nil || !strings.Contains(err.Error(), "names no guide") {
		t.Errorf("a guided choice without a guide: %v", err)
	}
	if err := tab(&g, "guided").checkChoices(); err != nil {
		t.Errorf("a guided choice with its guide: %v", err)
	}
	other := g
	other.Fingerprint = "bbbb"
	for _, tc := range []struct {
		t      *Table
		loaded *ModelID
		want   string // "" accepted
	}{
		{tab(&g, "guided"), &g, ""},
		{tab(&g, "guided"), nil, "give --guide ar"},
		{tab(&g, "guided"), &other, "fingerprint aaaa), but the guide loaded is ar (2 layers, fingerprint bbbb)"},
		{tab(&g, "threshold:0.9"), nil, ""}, // calibrated with a guide, none of its choices guided
		{tab(&g, "threshold:0.9"), &other, "but the guide loaded is"},
		{tab(nil, "threshold:0.9"), &g, ""},
	} {
		err := tc.t.CheckGuide(tc.loaded)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("guide %+v, loaded %+v: %v, want %q", tc.t.Guide, tc.loaded, err, tc.want)
		}
	}
	if s := tab(&g, "guided").String(); !strings.Contains(s, "guide ar (llama, 2 layers, fingerprint aaaa)") {
		t.Errorf("String:\n%s", s)
	}
}
