package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/dlmcache/dlmcache/regime"
)

// The request and response bodies follow OpenAI's chat and (legacy) text
// completions API. max_tokens (or max_completion_tokens) caps the returned
// text and its usage, stop strings cut it; sampling knobs a diffusion
// sampler has no use for (top_p, presence_penalty…) are accepted and
// ignored, as unknown fields are; fields whose values would change the
// answer's meaning (n > 1, tools, tool_choice, response_format, logprobs)
// are refused with a 400 that names the field. stream: true streams
// (stream.go).

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model    string      `json:"model"`
	Messages messageList `json:"messages"`
	// Modules is a dlmcache extra: the prompt modules (serve --modules)
	// whose texts open the system message, reused across requests.
	Modules []string `json:"modules"`
	genFields
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	// System is a dlmcache extra: the shared prefix put before the prompt.
	System string `json:"system"`
	// Modules is refused here: modules extend a chat's system message.
	Modules json.RawMessage `json:"modules"`
	genFields
}

// genFields are the generation fields both endpoints share. Pointers tell
// "absent" from zero.
type genFields struct {
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	Seed                *int64          `json:"seed"`
	N                   *int            `json:"n"`
	Stream              *bool           `json:"stream"`
	User                string          `json:"user"`
	Stop                json.RawMessage `json:"stop"`
	StreamOptions       *streamOptions  `json:"stream_options"`

	// StreamCanvas is a dlmcache extension of stream: an event with the
	// answer canvas after every denoising step (stream.go).
	StreamCanvas bool `json:"dlmcache_stream_canvas"`

	// Refused until supported (contract.go).
	Tools          json.RawMessage `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	Functions      json.RawMessage `json:"functions"`
	FunctionCall   json.RawMessage `json:"function_call"`
	ResponseFormat json.RawMessage `json:"response_format"`
	Logprobs       json.RawMessage `json:"logprobs"`
	TopLogprobs    json.RawMessage `json:"top_logprobs"`

	// dlmcache extras.
	GenLength   *int   `json:"gen_length"`
	Steps       *int   `json:"steps"`
	BlockLength *int   `json:"block_length"`
	CacheSalt   string `json:"cache_salt"`
}

// chatMessage is one turn. Content is a string, null, or an array of
// {"type": "text", "text": …} parts (OpenAI's content parts; other part
// types are refused).
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name"`
}

// messageList decodes messages one by one, so that a wrong-typed field is
// reported with its message's index (messages[2].role), which
// encoding/json's own error leaves out.
type messageList []chatMessage

func (l *messageList) UnmarshalJSON(b []byte) error {
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return err // not an array: encoding/json names "messages"
	}
	if raws == nil {
		*l = nil
		return nil
	}
	out := make(messageList, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			field := fmt.Sprintf("messages[%d]", i)
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) {
				if ute.Field != "" {
					field += "." + ute.Field
				}
				return badRequest(fmt.Sprintf("%s: want %s, got %s", field, jsonKind(ute.Type.Kind().String()), ute.Value), field)
			}
			return badRequest(fmt.Sprintf("%s: %v", field, err), field)
		}
	}
	*l = out
	return nil
}

// text returns the message's content as one string. Content is required
// (an empty string is content; a missing or null one is a 400).
func (m chatMessage) text(i int) (string, error) {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || bytes.Equal(c, []byte("null")) {
		return "", badRequest(fmt.Sprintf("messages[%d].content is required", i), fmt.Sprintf("messages[%d].content", i))
	}
	switch c[0] {
	case '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return "", badRequest(fmt.Sprintf("messages[%d].content: %v", i, err), fmt.Sprintf("messages[%d].content", i))
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return "", badRequest(fmt.Sprintf("messages[%d].content: want a string or an array of text parts: %v", i, err), fmt.Sprintf("messages[%d].content", i))
		}
		var b strings.Builder
		for j, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return "", badRequest(fmt.Sprintf("messages[%d].content[%d]: only text parts are supported, got type %q", i, j, p.Type), fmt.Sprintf("messages[%d].content", i))
			}
			b.WriteString(*p.Text)
		}
		return b.String(), nil
	}
	return "", badRequest(fmt.Sprintf("messages[%d].content: want a string or an array of text parts, got %s", i, abbrev(string(c))), fmt.Sprintf("messages[%d].content", i))
}

// promptText returns a completion request's prompt: a string, or an array
// holding exactly one string.
func (r *completionRequest) promptText() (string, error) {
	c := bytes.TrimSpace(r.Prompt)
	if len(c) == 0 || bytes.Equal(c, []byte("null")) {
		return "", badRequest("prompt is required", "prompt")
	}
	var s string
	if err := json.Unmarshal(c, &s); err == nil {
		return s, nil
	}
	var ss []string
	if err := json.Unmarshal(c, &ss); err == nil {
		if len(ss) != 1 {
			return "", badRequest(fmt.Sprintf("prompt: batches of prompts are not supported (got %d); send one request each", len(ss)), "prompt")
		}
		return ss[0], nil
	}
	return "", badRequest("prompt: want a string (token-id prompts are not supported)", "prompt")
}

// usage is OpenAI's token accounting.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails.CachedTokens is OpenAI's count of prompt tokens
	// served from the prompt cache: here those whose K/V came from the
	// prefix store at every layer (exact-block, prefix-all); a method that
	// takes only the shallow layers' from the store (bicache) computes
	// every prefix row in the deeper ones, and reports 0.
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Stats is the dlmcache object added to every completion response: what the
// caching method did for this request.
type Stats struct {
	Method       string  `json:"method"`        // the method that served it (with a calibrated table: its choice, NAME@DECODER)
	Depth        int     `json:"depth"`         // layers whose prefix K/V came from the store
	Ratio        float64 `json:"ratio"`         // shared-prefix tokens / canvas tokens
	Clamped      bool    `json:"clamped"`       // ratio outside the table's profiled bins
	PrefixTokens int     `json:"prefix_tokens"` // shared-prefix length m
	PrefixHit    bool    `json:"prefix_hit"`    // the prefix was already in the store
	// PrefixHitTokens is the shared prefix's tokens found in the store (a
	// block store's longest stored chain of its full blocks; the whole
	// prefix on a whole-prefix store's hit).
	PrefixHitTokens int     `json:"prefix_hit_tokens"`
	NFE             int     `json:"nfe"`           // forward evaluations
	RowsFraction    float64 `json:"rows_fraction"` // layer-rows computed / a full forward's
	regime.Regime           // gen_length, steps, block_length
	Seconds         float64 `json:"seconds"`        // generation wall time
	QueueSeconds    float64 `json:"queue_seconds"`  // time waiting for a generation slot
	TokensPerSec    float64 `json:"tokens_per_sec"` // gen_length / seconds
	// Guide is what the guided decoder's guide did (guided methods only).
	Guide *GuideStats `json:"guide,omitempty"`
}

// GuideStats is a guided generation's guide in the response's dlmcache
// object: NFE above is the diffusion model's forwards (one a guided
// step), these the guide's.
type GuideStats struct {
	Model     string `json:"model"`
	NFE       int    `json:"nfe"`       // the guide's forwards: its prefill and one per verified chunk
	Steps     int    `json:"steps"`     // guided steps (one diffusion forward each)
	Committed int    `json:"committed"` // answer tokens the steps committed
	Accepted  int    `json:"accepted"`  // proposals accepted (committed less the guide's own tokens)
	// Kept is those of Accepted the guide rejected and the diffusion
	// model was confident of (guided+threshold:T; 0 otherwise).
	Kept      int     `json:"kept"`
	AcceptLen float64 `json:"accept_len"` // committed / steps: tokens a step committed on average
	// StepTokens is the tokens each guided step committed, in order.
	StepTokens []int `json:"step_tokens"`
	// PrefixTokens is the shared prefix the guide looked up in its store
	// (the prefix less the prompt's last token; 0 without a store),
	// PrefixHitTokens those found stored: their K/V came from the store
	// at every layer.
	PrefixTokens    int     `json:"prefix_tokens"`
	PrefixHitTokens int     `json:"prefix_hit_tokens"`
	DLMSeconds      float64 `json:"dlm_seconds"`   // time in the diffusion model's forwards
	GuideSeconds    float64 `json:"guide_seconds"` // time in the guide's forwards
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     any             `json:"logprobs"`
}

type responseMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             usage        `json:"usage"`
	Dlmcache          Stats        `json:"dlmcache"`
}

type completionChoice struct {
	Index        int    `json:"index"`
	Text         string `json:"text"`
	FinishReason string `json:"finish_reason"`
	Logprobs     any    `json:"logprobs"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             usage              `json:"usage"`
	Dlmcache          Stats              `json:"dlmcache"`
}

// apiError is an error with an HTTP status, written in OpenAI's shape:
//
//	{"error": {"message": …, "type": …, "param": …, "code": …}}
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`

	// cancelled, when the request was cancelled, is why
	// (dlmcache_requests_cancelled_total's reason).
	cancelled string
}

func (e *apiError) Error() string { return e.Message }

func newAPIError(status int, typ, code, param, msg string) *apiError {
	e := &apiError{Status: status, Message: msg, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

func badRequest(msg, param string) *apiError {
	return newAPIError(http.StatusBadRequest, "invalid_request_error", "", param, msg)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// decodeBody reads one JSON object from r into v, turning every failure
// into a 4xx: 413 past the body limit, 400 for malformed JSON, a wrong
// type (naming the field) or trailing data. Unknown fields are ignored.
func decodeBody(r io.Reader, v any) *apiError {
	dec := json.NewDecoder(r)
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			if mbe := (*http.MaxBytesError)(nil); errors.As(terr, &mbe) {
				err = terr
			} else {
				return badRequest("request body: unexpected data after the JSON object", "")
			}
		}
	}
	if err == nil {
		return nil
	}
	var (
		mbe *http.MaxBytesError
		ute *json.UnmarshalTypeError
		se  *json.SyntaxError
		ae  *apiError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return newAPIError(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "",
			fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
	case errors.As(err, &ute):
		field := strings.TrimPrefix(ute.Field, "genFields.")
		if field == "" {
			return badRequest(fmt.Sprintf("request body: want a JSON object, got %s", ute.Value), "")
		}
		return badRequest(fmt.Sprintf("%s: want %s, got %s", field, jsonKind(ute.Type.Kind().String()), ute.Value), field)
	case errors.As(err, &se):
		return badRequest(fmt.Sprintf("request body is not valid JSON: %v (at byte %d)", se, se.Offset), "")
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty: want a JSON object", "")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body is not valid JSON: unexpected end of input", "")
	}
	return badRequest("request body: "+err.Error(), "")
}

func jsonKind(k string) string {
	switch k {
	case "int", "int64", "int32", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return k
}

func abbrev(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
