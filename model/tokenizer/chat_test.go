package tokenizer

import (
	"reflect"
	"strings"
	"testing"
)

func TestChatJinjaMatchesDefault(t *testing.T) {
	jinja := mustLoad(t, "llama3") // ships LLaDA's template
	if jinja.ChatTemplate() == "" {
		t.Fatal("llama3 fixture has no chat template")
	}
	plain := mustLoad(t, "gpt2") // none: LLaDA's format
	if plain.ChatTemplate() != "" {
		t.Fatal("gpt2 fixture has a chat template")
	}
	for _, c := range []struct {
		msgs []Message
		gen  bool
	}{
		{[]Message{{"system", "You are helpful."}, {"user", "What is 2+2?"}}, true},
		{[]Message{{"system", "  padded system \n"}, {"user", "\n user with {{ braces }} and {% tags %} 'quotes' \"dq\"\n"}}, true},
		{[]Message{{"user", "only user"}}, false},
		{[]Message{{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u2"}}, true},
		{nil, true},
	} {
		a, err := jinja.ApplyChat(c.msgs, c.gen)
		if err != nil {
			t.Fatal(err)
		}
		b, err := plain.ApplyChat(c.msgs, c.gen)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("Jinja and default differ:\n%q\n%q", a, b)
		}
	}
	got, _ := plain.ApplyChat([]Message{{"system", "S"}, {"user", "U"}}, true)
	want := "<|startoftext|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Errorf("default chat:\n%q\nwant\n%q", got, want)
	}
}

func TestLLaDATemplateConstant(t *testing.T) {
	// The constant written by Save renders like the fixture's template.
	tk := mustLoad(t, "llama3")
	if tk.ChatTemplate() != LLaDATemplate {
		t.Errorf("fixture template differs from LLaDATemplate:\n%q\n%q", tk.ChatTemplate(), LLaDATemplate)
	}
}

func TestChatTemplateError(t *testing.T) {
	tk := mustLoad(t, "gpt2")
	tk.cfg.template = "{% if messages %}{{ raise_exception('no messages allowed') }}{% endif %}"
	if _, err := tk.ApplyChat([]Message{{"user", "x"}}, true); err == nil || !strings.Contains(err.Error(), "no messages allowed") {
		t.Errorf("raise_exception: %v", err)
	}
	tk2 := mustLoad(t, "gpt2")
	tk2.cfg.template = "{% for %}"
	if _, err := tk2.ApplyChat(nil, true); err == nil || !strings.Contains(err.Error(), "chat_template") {
		t.Errorf("bad template: %v", err)
	}
}

func TestEncodeChat(t *testing.T) {
	for _, dir := range []string{"gpt2", "llama3"} {
		tk := mustLoad(t, dir)
		bos, _ := tk.TokenID(TokenBOS)
		eot, _ := tk.TokenID(TokenEOT)
		for _, c := range []struct{ system, user string }{
			{"You are helpful.", "What is 2+2?"},
			{"Ends with space ", " starts with space"},
			{"hello", "hello"},
			{"", "no system"},
		} {
			ids, n, err := tk.EncodeChat(c.system, c.user)
			if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			var prefix string
			if c.system != "" {
				prefix, _ = tk.ApplyChat([]Message{{"system", c.system}}, false)
			} else {
				prefix = TokenBOS
			}
			pre := tk.Encode(prefix)
			if n != len(pre) || !reflect.DeepEqual(ids[:n], pre) {
				t.Errorf("%s %q: prefix %v, want %v", dir, c.system, ids[:n], pre)
			}
			full, _ := tk.ApplyChat([]Message{{"system", c.system}, {"user", c.user}}, true)
			if c.system == "" {
				full, _ = tk.ApplyChat([]Message{{"user", c.user}}, true)
			}
			if !reflect.DeepEqual(ids, tk.Encode(full)) {
				t.Errorf("%s: ids differ from Encode(ApplyChat)", dir)
			}
			if ids[0] != bos {
				t.Errorf("%s: first id %d, want BOS %d", dir, ids[0], bos)
			}
			if c.system == "" && n != 1 {
				t.Errorf("%s: no system, prefixLen %d, want 1", dir, n)
			}
			if c.system != "" && ids[n-1] != eot {
				t.Errorf("%s: prefix ends with %q, want <|eot_id|>", dir, tk.Token(ids[n-1]))
			}
		}
	}
}

// lladaShipped is the chat_template of LLaDA-8B-Instruct's
// tokenizer_config.json: unlike LLaDATemplate it appends the assistant
// header whether or not add_generation_prompt is set.
const lladaShipped = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"

func TestShippedLLaDATemplate(t *testing.T) {
	shipped := mustLoad(t, "llama3")
	shipped.cfg.template = lladaShipped
	plain := mustLoad(t, "llama3")
	plain.cfg.template = ""
	msgs := []Message{{"system", "You are helpful."}, {"user", "Hi"}}
	a, err := shipped.ApplyChat(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := plain.ApplyChat(msgs, true); a != b {
		t.Errorf("shipped template and default differ:\n%q\n%q", a, b)
	}
	for _, system := range []string{"You are helpful.", ""} {
		ids, n, err := shipped.EncodeChat(system, "Hi")
		if err != nil {
			t.Fatal(err)
		}
		want, wn, err := plain.EncodeChat(system, "Hi")
		if err != nil {
			t.Fatal(err)
		}
		if n != wn || !reflect.DeepEqual(ids, want) {
			t.Errorf("system %q: shipped template split %d %v, default %d %v", system, n, ids, wn, want)
		}
	}
}

func TestEncodeChatNoCleanSplit(t *testing.T) {
	tk := mustLoad(t, "gpt2")
	// The system turn rendered alone ends with what the prompt goes on
	// with (here the assistant's cue) and there is no end-of-turn token
	// to cut it at: no clean split.
	tk.cfg.template = "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
	if _, _, err := tk.EncodeChat("sys", "user"); err == nil || !strings.Contains(err.Error(), "<|eot_id|>") {
		t.Errorf("template without end of turn: %v", err)
	}
	// Where the system turn alone starts the prompt, it is the prefix
	// (ChatML's case), end-of-turn token or not.
	tk = mustLoad(t, "gpt2")
	tk.cfg.template = "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
	ids, n, err := tk.EncodeChat("sys", "user")
	if want := tk.Encode(tk.BOS() + "system: sys\n"); err != nil || n != len(want) || !reflect.DeepEqual(ids[:n], want) {
		t.Errorf("system turn as the prefix: %v %d %v, want prefix %v", ids, n, err, want)
	}
	ids, n, err = tk.EncodeChat("", "user")
	if err != nil || n != 1 || len(ids) < 2 {
		t.Errorf("no system: %v %d %v", ids, n, err)
	}
}
