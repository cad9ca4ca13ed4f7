package sample

import (
	"fmt"
	"strconv"
	"strings"
)

// Decoding is the decoder as a choice of its own, composable with every
// caching method: the schedule's fixed count of commits per step,
// Fast-dLLM's threshold (parallel) decoding, or FlashDLM's guided
// decoding (an autoregressive guide checks the proposals; guided.go). Its
// text form — what flags, method specs ("none@threshold:0.9",
// "freecache@guided") and tables carry — is "schedule", "threshold:T",
// "guided" or "guided:TAU[:K]". The zero value is "the method's own
// decoder".
type Decoding struct {
	Kind DecodingKind
	// T is the threshold decoder's confidence threshold, in (0, 1], or
	// the guided decoder's τ (0: the deterministic rule).
	T float64
	// K is the guided:TAU rule's top k (0: DefaultGuideTopK).
	K int
	// Keep is guided+threshold:T's T (Guided.Keep): the DLM's proposals
	// at least this confident are kept where the guide rejects them (0:
	// FlashDLM's rule, the guide alone decides).
	Keep float64
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
	// DecodeGuided is FlashDLM's guided decoding: the guide (an
	// autoregressive LM of the same vocabulary, GenOptions.Guide) commits
	// the longest left-to-right run of the block's proposals it accepts
	// (its argmax; with guided:TAU among its top K with probability ≥ τ ×
	// its top one's), then its own token at the first rejection.
	DecodeGuided DecodingKind = "guided"
)

// decodingWant is what ParseDecoding accepts, for its errors.
const decodingWant = "schedule, threshold:T (T in (0, 1], e.g. threshold:0.9), guided or guided:TAU[:K] (τ in (0, 1], e.g. guided:0.5), either followed by +threshold:T (e.g. guided+threshold:0.9)"

// keepSuffix joins guided's keep threshold to its text form.
const keepSuffix = "+threshold:"

// ParseDecoding parses "schedule", "threshold:T" (T in (0, 1]), "guided",
// "guided:TAU" or "guided:TAU:K" (τ in (0, 1], K ≥ 1), each guided form
// optionally followed by "+threshold:T" (Decoding.Keep), or "" (the
// method's own).
func ParseDecoding(s string) (Decoding, error) {
	body, keepArg, hasKeep := strings.Cut(strings.TrimSpace(s), keepSuffix)
	if hasKeep {
		d, err := ParseDecoding(body)
		if err != nil {
			return Decoding{}, err
		}
		if d.Kind != DecodeGuided {
			return Decoding{}, fmt.Errorf("decoder %q: +threshold:T follows a guided decoder only (guided+threshold:0.9: the DLM's proposals at least T confident are kept where the guide rejects them)", s)
		}
		t, err := strconv.ParseFloat(keepArg, 64)
		if err != nil || !(t > 0 && t <= 1) {
			return Decoding{}, fmt.Errorf("decoder %q: the keep threshold %q is not in (0, 1]", s, keepArg)
		}
		d.Keep = t
		return d, nil
	}
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
	case DecodeGuided:
		if !hasArg {
			return Decoding{Kind: DecodeGuided}, nil
		}
		ts, ks, hasK := strings.Cut(arg, ":")
		t, err := strconv.ParseFloat(ts, 64)
		if err != nil || !(t > 0 && t <= 1) {
			return Decoding{}, fmt.Errorf("decoder %q: guided's τ %q is not in (0, 1] (guided:TAU accepts a proposal among the guide's top k with probability ≥ τ × its top one's)", s, ts)
		}
		d := Decoding{Kind: DecodeGuided, T: t}
		if hasK {
			k, err := strconv.Atoi(ks)
			if err != nil || k < 1 {
				return Decoding{}, fmt.Errorf("decoder %q: guided's top k %q is not a positive integer", s, ks)
			}
			if k != DefaultGuideTopK {
				d.K = k
			}
		}
		return d, nil
	}
	return Decoding{}, fmt.Errorf("decoder %q: want %s", s, decodingWant)
}

// String is the text form ParseDecoding reads ("" for the default).
func (d Decoding) String() string {
	switch d.Kind {
	case DecodeThreshold:
		return "threshold:" + strconv.FormatFloat(d.T, 'g', -1, 64)
	case DecodeGuided:
		s := "guided"
		if d.T != 0 {
			s += ":" + strconv.FormatFloat(d.T, 'g', -1, 64)
			if d.K != 0 {
				s += ":" + strconv.Itoa(d.K)
			}
		}
		if d.Keep != 0 {
			s += keepSuffix + strconv.FormatFloat(d.Keep, 'g', -1, 64)
		}
		return s
	}
	return string(d.Kind)
}

// Guided reports whether d is the guided decoder (which needs a guide).
func (d Decoding) Guided() bool { return d.Kind == DecodeGuided }

// IsDefault reports whether d leaves the method's decoder.
func (d Decoding) IsDefault() bool { return d.Kind == DecodeDefault }

// Apply sets o's decoder to d: threshold:T installs Threshold{T},
// guided Guided{τ, K} (the guide is o.Guide's); schedule takes a
// threshold or guided decoder out (back to the schedule's count, keeping
// any other ranking decoder); the default changes nothing.
func (d Decoding) Apply(o GenOptions) GenOptions {
	switch d.Kind {
	case DecodeThreshold:
		o.Decoder = Threshold{T: d.T}
	case DecodeGuided:
		o.Decoder = Guided{Tau: d.T, TopK: d.K, Keep: d.Keep}
	case DecodeSchedule:
		switch o.Decoder.(type) {
		case Threshold, Guided:
			o.Decoder = nil
		}
	}
	return o
}

// DecodingOf is the decoding o's decoder amounts to.
func DecodingOf(o GenOptions) Decoding {
	switch d := o.Decoder.(type) {
	case Threshold:
		return Decoding{Kind: DecodeThreshold, T: d.T}
	case Guided:
		return Decoding{Kind: DecodeGuided, T: d.Tau, K: d.TopK, Keep: d.Keep}
	}
	return Decoding{Kind: DecodeSchedule}
}
