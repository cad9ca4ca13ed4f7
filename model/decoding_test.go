package model

import "testing"

// Decoders round-trip through their text form; bad ones name what is
// wanted.
func TestParseDecodingRoundTripsAndRejectsBadInput(t *testing.T) {
	for _, s := range []string{"schedule", "threshold:0.9", "threshold:1", "threshold:0.75"} {
		d, err := ParseDecoding(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if d.String() != s {
			t.Errorf("%s reads back as %s", s, d)
		}
	}
	if d, err := ParseDecoding(""); err != nil || !d.IsDefault() {
		t.Errorf(`"": %v %v`, d, err)
	}
	for _, s := range []string{"threshold", "threshold:0", "threshold:1.5", "threshold:x", "schedule:2", "greedy", ":0.9"} {
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
