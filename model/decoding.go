package model

import (
	"fmt"
	"strconv"
	"strings"
)

// Decoding is the decoder as a choice of its own, composable with every
// caching method: the schedule's fixed count of commits per step, or
// Fast-dLLM's threshold (parallel) decoding. Its text form — what flags,
// method specs ("none@threshold:0.9") and tables carry — is "schedule" or
// "threshold:T". The zero value is "the method's own decoder".
type Decoding struct {
	Kind DecodingKind
	// T is the threshold decoder's confidence threshold, in (0, 1].
	T float64
}

// DecodingKind names a decoder.
type DecodingKind string

const (
	// DecodeDefault leaves the method's own decoder (the schedule for every
	// method but block, which decodes by threshold).
	DecodeDefault DecodingKind = ""
	// DecodeSchedule commits the schedule's count each step, the most
	// confident first (LLaDA's low-confidence remasking, or the method's
	// own ranking such as d2cache's certainty prior).
	DecodeSchedule DecodingKind = "schedule"
	// DecodeThreshold commits the most confident proposal and every other
	// one at or above T (Fast-dLLM's parallel decoding); a block ends when
	// it has no masks left, so it takes as few forwards as T allows.
	DecodeThreshold DecodingKind = "threshold"
)

// ParseDecoding parses "schedule", "threshold:T" (T in (0, 1]) or ""
// (the method's own).
func ParseDecoding(s string) (Decoding, error) {
	kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	switch DecodingKind(kind) {
	case DecodeDefault:
		if hasArg {
			break
		}
		return Decoding{}, nil
	case DecodeSchedule:
		if hasArg {
			return Decoding{}, fmt.Errorf("decoder %q: schedule takes no argument", s)
		}
		return Decoding{Kind: DecodeSchedule}, nil
	case DecodeThreshold:
		if !hasArg {
			return Decoding{}, fmt.Errorf("decoder %q: want threshold:T with T in (0, 1], e.g. threshold:0.9", s)
		}
		t, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(t > 0 && t <= 1) {
			return Decoding{}, fmt.Errorf("decoder %q: threshold %q is not in (0, 1]", s, arg)
		}
		return Decoding{Kind: DecodeThreshold, T: t}, nil
	}
	return Decoding{}, fmt.Errorf("decoder %q: want schedule or threshold:T (T in (0, 1], e.g. threshold:0.9)", s)
}

// String is the text form ParseDecoding reads ("" for the default).
func (d Decoding) String() string {
	if d.Kind == DecodeThreshold {
		return "threshold:" + strconv.FormatFloat(d.T, 'g', -1, 64)
	}
	return string(d.Kind)
}

// IsDefault reports whether d leaves the method's decoder.
func (d Decoding) IsDefault() bool { return d.Kind == DecodeDefault }

// Apply sets o's decoder to d: threshold:T installs Threshold{T};
// schedule takes a threshold decoder out (back to the schedule's count,
// keeping any other ranking decoder); the default changes nothing.
func (d Decoding) Apply(o GenOptions) GenOptions {
	switch d.Kind {
	case DecodeThreshold:
		o.Decoder = Threshold{T: d.T}
	case DecodeSchedule:
		if _, ok := o.Decoder.(Threshold); ok {
			o.Decoder = nil
		}
	}
	return o
}

// DecodingOf is the decoding o's decoder amounts to.
func DecodingOf(o GenOptions) Decoding {
	if t, ok := o.Decoder.(Threshold); ok {
		return Decoding{Kind: DecodeThreshold, T: t.T}
	}
	return Decoding{Kind: DecodeSchedule}
}
