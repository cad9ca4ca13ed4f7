package serve

import (
	"bufio"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// sseEvents splits a text/event-stream body into its data payloads.
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// A streamed chat completion: its deltas join to the unstreamed answer,
// one delta per committed block at most, then the finish chunk, the usage
// chunk and [DONE].
func TestStreamChat(t *testing.T) {
	s := newTestServer(t, "bicache", 1<<30, nil)
	// 16 slots in blocks of 8: two blocks.
	full := decodeChat(t, post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", "")))
	rec := post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"stream":true,"stream_options":{"include_usage":true}`))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	ev := sseEvents(t, rec.Body.String())
	if len(ev) < 4 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Delta        struct{ Role, Content string } `json:"delta"`
			FinishReason *string                        `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	var text strings.Builder
	var finish string
	var u *usage
	deltas := 0
	for i, e := range ev[:len(ev)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %d %q: %v", i, e, err)
		}
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Errorf("event %d: object %q id %q", i, c.Object, c.ID)
		}
		if i == 0 && (len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant") {
			t.Errorf("first chunk %q has no assistant role", e)
		}
		if c.Usage != nil {
			u = c.Usage
			continue
		}
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
			continue
		}
		deltas++
		text.WriteString(c.Choices[0].Delta.Content)
	}
	if text.String() != full.Choices[0].Message.Content || finish != full.Choices[0].FinishReason {
		t.Errorf("streamed %q (finish %q), unstreamed %q (%q)", text.String(), finish, full.Choices[0].Message.Content, full.Choices[0].FinishReason)
	}
	if deltas > 3 { // the role chunk and one per block (two blocks)
		t.Errorf("%d delta chunks for two blocks", deltas)
	}
	if u == nil || *u != full.Usage {
		t.Errorf("usage %+v, unstreamed %+v", u, full.Usage)
	}
}

// The canvas extension: one event per step, its slots unmasking; the
// completions endpoint streams too.
func TestStreamCanvasAndCompletion(t *testing.T) {
	s := newTestServer(t, "none", 0, nil)
	rec := post(t, s, "/v1/chat/completions", chatBody("Be brief.", "Hello", `"stream":true,"dlmcache_stream_canvas":true`))
	masked := []int{}
	for _, e := range sseEvents(t, rec.Body.String()) {
		var c struct {
			Object string   `json:"object"`
			Step   int      `json:"step"`
			Slots  []string `json:"slots"`
		}
		if e == "[DONE]" || json.Unmarshal([]byte(e), &c) != nil || c.Object != "dlmcache.canvas" {
			continue
		}
		n := 0
		for _, sl := range c.Slots {
			if sl == "\u2591" {
				n++
			}
		}
		masked = append(masked, n)
	}
	// 16 slots, 8 steps, two per step: 14, 12, …, 0 still masked.
	if len(masked) != 8 || masked[0] != 14 || masked[7] != 0 {
		t.Errorf("masked slots per step %v", masked)
	}
	full := post(t, s, "/v1/completions", `{"prompt":"Once","system":"Stories: "}`)
	var fr completionResponse
	json.Unmarshal(full.Body.Bytes(), &fr)
	rec = post(t, s, "/v1/completions", `{"prompt":"Once","system":"Stories: ","stream":true}`)
	var text strings.Builder
	for _, e := range sseEvents(t, rec.Body.String()) {
		var c struct {
			Object  string                  `json:"object"`
			Choices []struct{ Text string } `json:"choices"`
		}
		if e != "[DONE]" && json.Unmarshal([]byte(e), &c) == nil && c.Object == "text_completion" && len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Text)
		}
	}
	if text.String() != fr.Choices[0].Text {
		t.Errorf("streamed completion %q, unstreamed %q", text.String(), fr.Choices[0].Text)
	}
}

// A stop string that a block boundary splits is never sent in part, nor a
// broken UTF-8 sequence.
func TestStreamHoldsBack(t *testing.T) {
	var sent []string
	k := newSSESink(httptest.NewRecorder(), func(_ string, _ int64, d string, _ bool, _ *string, _ *usage) any {
		sent = append(sent, d)
		return d
	}, "x", 0, false, false)
	k.text("abcde", false, 2) // a 3-byte stop string may still end in "de"
	if strings.Join(sent, "") != "abc" {
		t.Errorf("sent %q before the answer ended, want abc", sent)
	}
	k.text("abcdef\xe4\xb8", false, 0) // half of 中
	if strings.Join(sent, "") != "abcdef" {
		t.Errorf("sent %q, want the text without the broken rune", sent)
	}
	k.text("abcdef中g", true, 2)
	if strings.Join(sent, "") != "abcdef中g" {
		t.Errorf("sent %q at the end", sent)
	}
}

// A stream cut for its backlog ends with an error event naming the cause
// and [DONE], after the whole events sent before; --stream-buffer-bytes
// has a floor, an error naming the flag.
func TestStreamCutEndsWithErrorAndDone(t *testing.T) {
	rec := httptest.NewRecorder()
	chunk := func(id string, created int64, delta string, first bool, finish *string, u *usage) any {
		return map[string]any{"delta": delta}
	}
	k := newSSESink(rec, chunk, "x", 0, false, true)
	k.limit = 100
	var cut *cutError
	k.onCut = func(c *cutError) { cut = c }
	k.event(map[string]string{"small": "a"})
	k.event(map[string]string{"big": strings.Repeat("b", 200)}) // one event past the buffer
	k.event(map[string]string{"after": "c"})
	if c := k.close(); c == nil || cut == nil || c.cause != errSlowReader {
		t.Fatalf("cut %v (onCut %v), want slow_reader", c, cut)
	}
	ev := sseEvents(t, rec.Body.String())
	if len(ev) < 3 || ev[0] != `{"small":"a"}` || ev[len(ev)-1] != "[DONE]" || !strings.Contains(ev[len(ev)-2], `"code":"slow_reader"`) {
		t.Fatalf("events %q: want the first, an error event and [DONE]", ev)
	}
	for _, e := range ev {
		if strings.Contains(e, "bbb") || strings.Contains(e, "after") {
			t.Errorf("an event after the cut was sent: %q", e)
		}
	}

	if _, err := New(Config{Model: loadTiny(t), Method: noneMethod(t), Gen: testGen, StreamBufferBytes: 4 << 10}); err == nil || !strings.Contains(err.Error(), "--stream-buffer-bytes 4096") {
		t.Errorf("a 4 KiB stream buffer: %v, want an error naming the flag", err)
	}
}
