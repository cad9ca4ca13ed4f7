package sample

import "testing"

// Decoders round-trip through their text form; bad ones name what is
// wanted.
func TestParseDecodingRoundTripsAndRejectsBadInput(t *testing.T) {
	for _, s := range []string{"schedule", "threshold:0.9", "threshold:1", "threshold:0.75", "guided", "guided:0.5", "guided:1", "guided:0.25:2", "guided+threshold:0.9", "guided:0.5+threshold:0.8", "guided:0.25:2+threshold:1"} {
		d, err := ParseDecoding(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if d.String() != s {
			t.Errorf("%s reads back as %s", s, d)
		}
	}
	// The default top k is not written out; guided:TAU applies Guided{TAU, 0}.
	if d, err := ParseDecoding("guided:0.5:5"); err != nil || d.String() != "guided:0.5" || d.Apply(GenOptions{}).Decoder != (Guided{Tau: 0.5}) {
		t.Errorf("guided:0.5:5: %v %v", d, err)
	}
	if d := DecodingOf(GenOptions{Decoder: Guided{Tau: 0.25, TopK: 2}}); d.String() != "guided:0.25:2" || !d.Guided() {
		t.Errorf("DecodingOf(Guided) = %v", d)
	}
	if d, err := ParseDecoding("guided+threshold:0.9"); err != nil || d.Apply(GenOptions{}).Decoder != (Guided{Keep: 0.9}) || !d.Guided() {
		t.Errorf("guided+threshold:0.9: %v %v", d, err)
	}
	if d := DecodingOf(GenOptions{Decoder: Guided{Tau: 0.5, Keep: 0.8}}); d.String() != "guided:0.5+threshold:0.8" {
		t.Errorf("DecodingOf(Guided{Keep}) = %v", d)
	}
	if got := (Decoding{Kind: DecodeSchedule}).Apply(GenOptions{Decoder: Guided{}}); got.Decoder != nil {
		t.Errorf("schedule leaves %v", got.Decoder)
	}
	if d, err := ParseDecoding(""); err != nil || !d.IsDefault() {
		t.Errorf(`"": %v %v`, d, err)
	}
	for _, s := range []string{"threshold", "threshold:0", "threshold:1.5", "threshold:x", "schedule:2", "greedy", ":0.9",
		"guided:0", "guided:1.5", "guided:x", "guided:0.5:0", "guided:0.5:x", "guided:", "guided+threshold:0", "guided+threshold:", "guided+threshold:1.5", "threshold:0.9+threshold:0.9", "schedule+threshold:0.5", "guided+threshold:x"} {
		if _, err := ParseDecoding(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

// Apply installs the threshold decoder, and schedule takes it out but
// keeps another ranking decoder.
func TestDecodingApply(t *testing.T) {
	o := GenOptions{Decoder: Threshold{T: 0.9}}
	if got := (Decoding{Kind: DecodeSchedule}).Apply(o); got.Decoder != nil {
		t.Errorf("schedule kept %T", got.Decoder)
	}
	o.Decoder = CertaintyPrior{Sigma: 3}
	if got := (Decoding{Kind: DecodeSchedule}).Apply(o); got.Decoder != (CertaintyPrior{Sigma: 3}) {
		t.Errorf("schedule dropped the certainty prior: %T", got.Decoder)
	}
	if got := (Decoding{Kind: DecodeThreshold, T: 0.7}).Apply(o); got.Decoder != (Threshold{T: 0.7}) {
		t.Errorf("threshold: %v", got.Decoder)
	}
	if got := (Decoding{}).Apply(o); got.Decoder != o.Decoder {
		t.Errorf("default changed the decoder")
	}
	if d := DecodingOf(GenOptions{Decoder: Threshold{T: 0.8}}); d.String() != "threshold:0.8" {
		t.Errorf("DecodingOf: %s", d)
	}
}
