package lut

import (
	"encoding/json"
	"strings"
	"testing"
)

// A v3 choice records its changed-answer bound and both ends of its speed
// intervals, and String prints them; a table written before them (a
// sequential probability ratio test, a lower end alone) still reads and
// prints, with its own test stated and no bound made up.
func TestChoiceBoundAndIntervals(t *testing.T) {
	bound := 0.0187
	tab := &Table{Format: Format, Model: ModelID{Name: "m", NLayers: 2, Fingerprint: "ffff"}, Tau: 1, Classes: []Class{{Name: "all"}},
		Calibration: &Calibration{Method: "search", Confidence: 0.95, ChangeRisk: 0.02, ChangeTest: ChangeTestClopperPearson, Cap: 160, MinGain: 0.1, Requests: 160},
		Bins: []Bin{{Lo: 0, Hi: 1, Choices: []*Choice{{Class: "all", Setting: Setting{Method: "none", Decoder: "threshold:0.9"}, Samples: 160,
			Agreement: 1, SpeedUp: 14.2, SpeedUpLow: 13.1, SpeedUpHigh: 15.4, ChangeBound: &bound, Over: "none@schedule", GainLow: 13.1, GainHigh: 15.4}}}}}
	b, err := json.Marshal(tab)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Bins[0].Choices[0]
	if c.ChangeBound == nil || *c.ChangeBound != bound || c.SpeedUpHigh != 15.4 || c.GainHigh != 15.4 || got.Calibration.Cap != 160 {
		t.Errorf("read back %+v (calibration %+v)", c, got.Calibration)
	}
	s := got.String()
	for _, want := range []string{"changed answers below 2% at 95% confidence", "up to 160 requests a bin and class", "1.87%", "[13.10×, 15.40×]", "none@schedule ([13.10×, 15.40×])"} {
		if !strings.Contains(s, want) {
			t.Errorf("String lacks %q:\n%s", want, s)
		}
	}

	// An earlier table: the SPRT's fields, no upper ends, no bound.
	old := strings.NewReplacer(`"change_test":"clopper-pearson",`, `"change_ok":0.01,"power":0.8,`, `"speedup_high":15.4,`, "", `"gain_high":15.4,`, "",
		`"change_bound":0.0187,`, "", `"cap":160,`, "").Replace(string(b))
	if strings.Contains(old, "speedup_high") || strings.Contains(old, "change_bound") || !strings.Contains(old, "change_ok") {
		t.Fatalf("the earlier table was not made: %s", old)
	}
	got, err = Parse([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Bins[0].Choices[0]; c.ChangeBound != nil || c.SpeedUpHigh != 0 {
		t.Errorf("an earlier table read a bound or an upper end: %+v", c)
	}
	s = got.String()
	for _, want := range []string{"sequential test; 1% changed passes with probability 80%", "≥ 13.10×", "none@schedule (≥ 13.10×)"} {
		if !strings.Contains(s, want) {
			t.Errorf("an earlier table's String lacks %q:\n%s", want, s)
		}
	}
}
