package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The parts of OpenAI's request contract that shape the returned text:
// max_tokens caps it, stop strings cut it, and the fields dlmcache cannot
// honour yet are refused by name rather than silently ignored.

// maxStop is OpenAI's limit on stop sequences.
const maxStop = 4

// stopStrings parses the stop field: absent or null, one string, or an
// array of up to four strings. Empty strings are refused (they would cut
// every answer to nothing).
func stopStrings(raw json.RawMessage) ([]string, *apiError) {
	c := bytes.TrimSpace(raw)
	if len(c) == 0 || bytes.Equal(c, []byte("null")) {
		return nil, nil
	}
	var one string
	var many []string
	switch {
	case json.Unmarshal(c, &one) == nil:
		many = []string{one}
	case json.Unmarshal(c, &many) == nil:
	default:
		return nil, badRequest("stop: want a string or an array of strings", "stop")
	}
	if len(many) > maxStop {
		return nil, badRequest(fmt.Sprintf("stop: at most %d sequences, got %d", maxStop, len(many)), "stop")
	}
	for _, s := range many {
		if s == "" {
			return nil, badRequest("stop: sequences must not be empty", "stop")
		}
	}
	return many, nil
}

// unsupported refuses the fields whose meaning dlmcache cannot honour, by
// name: tools and tool_choice (no tool calling), response_format other than
// plain text, and logprobs (a diffusion step's token probabilities are not
// an autoregressive model's). A field that asks for the default (tools [],
// tool_choice "none", response_format {"type": "text"}, logprobs false) is
// accepted.
func (g *genFields) unsupported() *apiError {
	set := func(raw json.RawMessage, defaults ...string) bool {
		c := string(bytes.TrimSpace(raw))
		if c == "" || c == "null" {
			return false
		}
		for _, d := range defaults {
			if compactJSON(c) == d {
				return false
			}
		}
		return true
	}
	for _, f := range []struct {
		name     string
		raw      json.RawMessage
		defaults []string
		why      string
	}{
		{"tools", g.Tools, []string{"[]"}, "tool calling is not supported"},
		{"tool_choice", g.ToolChoice, []string{`"none"`}, "tool calling is not supported"},
		{"functions", g.Functions, []string{"[]"}, "function calling is not supported"},
		{"function_call", g.FunctionCall, []string{`"none"`}, "function calling is not supported"},
		{"response_format", g.ResponseFormat, []string{`{"type":"text"}`}, "only plain-text answers are supported (response_format {\"type\": \"text\"})"},
		{"logprobs", g.Logprobs, []string{"false", "0"}, "log probabilities are not supported"},
		{"top_logprobs", g.TopLogprobs, []string{"0"}, "log probabilities are not supported"},
	} {
		if set(f.raw, f.defaults...) {
			return badRequest(fmt.Sprintf("%s: %s; remove the field", f.name, f.why), f.name)
		}
	}
	return nil
}

// compactJSON removes insignificant white space, so `{ "type": "text" }`
// compares equal to `{"type":"text"}`.
func compactJSON(s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

// cutAtStop returns text up to the earliest occurrence of any stop string,
// and whether one was found.
func cutAtStop(text string, stop []string) (string, bool) {
	cut := -1
	for _, s := range stop {
		if i := strings.Index(text, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut < 0 {
		return text, false
	}
	return text[:cut], true
}
