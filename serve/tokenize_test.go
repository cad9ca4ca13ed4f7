package serve

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// POST /tokenize gives a chat's token ids as /v1/chat/completions renders
// them (its usage's prompt_tokens agree) and a prompt's as
// /v1/completions encodes it; /detokenize gives the text back, and bad
// token ids are a 400 naming the field.
func TestTokenizeAndDetokenize(t *testing.T) {
	s, _ := blockServer(t, 64)
	var tk tokenizeResponse
	chat := chatBody("You are terse.", "What is two and two?", "")
	rec := post(t, s, "/tokenize", chat)
	if rec.Code != 200 {
		t.Fatalf("/tokenize: %d %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &tk); err != nil {
		t.Fatal(err)
	}
	if tk.Count != len(tk.Tokens) || tk.Count == 0 || tk.MaxModelLen == 0 || tk.BlockSize != 8 || tk.PrefixTokens == 0 || tk.PrefixTokens >= tk.Count {
		t.Errorf("chat: %+v", tk)
	}
	var gen struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(post(t, s, "/v1/chat/completions", chat).Body.Bytes(), &gen); err != nil || gen.Usage.PromptTokens != tk.Count {
		t.Errorf("the chat's prompt_tokens %d, /tokenize %d (%v)", gen.Usage.PromptTokens, tk.Count, err)
	}
	chatIDs := tk.Tokens

	rec = post(t, s, "/tokenize", `{"prompt": "hello world", "return_token_strs": true}`)
	if err := json.Unmarshal(rec.Body.Bytes(), &tk); err != nil || rec.Code != 200 {
		t.Fatalf("prompt: %d %s", rec.Code, rec.Body)
	}
	withBOS := slices.Clone(tk.Tokens)
	if len(tk.TokenStrs) != len(tk.Tokens) {
		t.Errorf("token_strs %q for %v", tk.TokenStrs, tk.Tokens)
	}
	rec = post(t, s, "/tokenize", `{"prompt": "hello world", "add_special_tokens": false}`)
	if err := json.Unmarshal(rec.Body.Bytes(), &tk); err != nil || len(tk.Tokens) != len(withBOS)-1 || !slices.Equal(tk.Tokens, withBOS[1:]) {
		t.Errorf("without special tokens %v, with %v (%v)", tk.Tokens, withBOS, err)
	}
	plain := tk.Tokens

	var dt struct {
		Prompt string `json:"prompt"`
	}
	b, _ := json.Marshal(map[string]any{"tokens": plain})
	rec = post(t, s, "/detokenize", string(b))
	if err := json.Unmarshal(rec.Body.Bytes(), &dt); err != nil || dt.Prompt != "hello world" {
		t.Errorf("/detokenize: %d %s", rec.Code, rec.Body)
	}
	b, _ = json.Marshal(map[string]any{"tokens": chatIDs})
	if rec = post(t, s, "/detokenize", string(b)); rec.Code != 200 {
		t.Errorf("/detokenize of a chat: %d %s", rec.Code, rec.Body)
	}
	if rec := post(t, s, "/reset_prefix_cache", ""); rec.Code != 404 || !strings.Contains(rec.Body.String(), "--reset-prefix-cache") {
		t.Errorf("/reset_prefix_cache not enabled: %d %s", rec.Code, rec.Body)
	}
	for _, c := range []struct{ path, body, param string }{
		{"/detokenize", `{"tokens": [1, -1]}`, "tokens"},
		{"/detokenize", `{"tokens": [99999999]}`, "tokens"},
		{"/detokenize", `{}`, "tokens"},
		{"/tokenize", `{}`, "prompt"},
		{"/tokenize", `{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}`, "messages"},
	} {
		rec := post(t, s, c.path, c.body)
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		json.Unmarshal(rec.Body.Bytes(), &e) //nolint:errcheck
		if rec.Code != 400 || e.Error.Param != c.param {
			t.Errorf("%s %s: %d %s", c.path, c.body, rec.Code, rec.Body)
		}
	}
}
