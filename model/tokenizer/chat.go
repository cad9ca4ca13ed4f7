package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// LLaDA's special tokens (see REFERENCE.md).
const (
	TokenBOS         = "<|startoftext|>"
	TokenEOS         = "<|endoftext|>"
	TokenEOT         = "<|eot_id|>"
	TokenMask        = "<|mdm_mask|>"
	TokenStartHeader = "<|start_header_id|>"
	TokenEndHeader   = "<|end_header_id|>"
)

// LLaDATemplate is LLaDA-8B-Instruct's chat template (the Llama-3 one), as
// shipped in its tokenizer_config.json and written by Save.
const LLaDATemplate = "{% set loop_messages = messages %}{% for message in loop_messages %}" +
	"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}" +
	"{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatConfig is what this package reads from tokenizer_config.json.
type chatConfig struct {
	template     string // "" when none is shipped
	templateFile string // the file it came from, for errors
	bos, eos     string
	pad          string
	extra        map[string]json.RawMessage // the whole file, for Save

	once     sync.Once
	compiled *exec.Template
	err      error
}

// parseConfig reads tokenizer_config.json's chat_template (a string, or a
// list of {name, template} from which "default" is taken), bos_token,
// eos_token and pad_token (strings or {"content": ...} objects).
func (t *Tokenizer) parseConfig(data []byte, path string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	t.cfg.extra = m
	if raw, ok := m["chat_template"]; ok && !isNull(raw) {
		var s string
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		switch {
		case json.Unmarshal(raw, &s) == nil:
			t.cfg.template = s
		case json.Unmarshal(raw, &named) == nil:
			for _, n := range named {
				if n.Name == "default" {
					t.cfg.template = n.Template
				}
			}
			if t.cfg.template == "" {
				return fmt.Errorf("%s: chat_template is a list without a \"default\" entry", path)
			}
		default:
			return fmt.Errorf("%s: chat_template: want a string or a list of {name, template}", path)
		}
		t.cfg.templateFile = path
		if _, err := t.compiledTemplate(); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"bos_token", &t.cfg.bos}, {"eos_token", &t.cfg.eos}, {"pad_token", &t.cfg.pad}} {
		raw, ok := m[f.name]
		if !ok || isNull(raw) {
			continue
		}
		var s string
		var obj struct {
			Content string `json:"content"`
		}
		switch {
		case json.Unmarshal(raw, &s) == nil:
			*f.dst = s
		case json.Unmarshal(raw, &obj) == nil:
			*f.dst = obj.Content
		default:
			return fmt.Errorf("%s: %s: want a string or {\"content\": ...}", path, f.name)
		}
	}
	return nil
}

// ChatTemplate is the Jinja chat template from tokenizer_config.json, or ""
// when none was shipped (ApplyChat then uses LLaDA's format).
func (t *Tokenizer) ChatTemplate() string { return t.cfg.template }

// BOS is the BOS token's text: tokenizer_config.json's bos_token, else
// LLaDA's "<|startoftext|>".
func (t *Tokenizer) BOS() string {
	if t.cfg.bos != "" {
		return t.cfg.bos
	}
	return TokenBOS
}

// EOS is the EOS token's text: tokenizer_config.json's eos_token, else
// LLaDA's "<|endoftext|>".
func (t *Tokenizer) EOS() string {
	if t.cfg.eos != "" {
		return t.cfg.eos
	}
	return TokenEOS
}

// ApplyChat renders messages as the model's prompt text: with the shipped
// Jinja template when there is one (rendered as Hugging Face does, with
// trim_blocks and lstrip_blocks), else with LLaDA's format:
//
//	BOS <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|> ...
//	[<|start_header_id|>assistant<|end_header_id|>\n\n]
//
// where each content is trimmed of surrounding whitespace, as the
// template's `| trim` does. The render is held to the template limits
// (MaxTemplateSteps, …); ApplyChatContext also stops at ctx's end.
func (t *Tokenizer) ApplyChat(messages []Message, addGenerationPrompt bool) (string, error) {
	return t.ApplyChatContext(context.Background(), messages, addGenerationPrompt)
}

// ApplyChatContext is ApplyChat under ctx: a render still running at ctx's
// end stops with ctx's cause.
func (t *Tokenizer) ApplyChatContext(ctx context.Context, messages []Message, addGenerationPrompt bool) (string, error) {
	return t.renderChat(ctx, messages, addGenerationPrompt, false)
}

// renderChat renders messages; with escape, the special tokens in each
// message's content are marked (EscapeSpecials) so that EncodeEscaped
// encodes them as text.
func (t *Tokenizer) renderChat(ctx context.Context, messages []Message, addGenerationPrompt, escape bool) (string, error) {
	if escape {
		esc := make([]Message, len(messages))
		for i, m := range messages {
			esc[i] = Message{Role: m.Role, Content: t.EscapeSpecials(m.Content)}
		}
		messages = esc
	}
	if t.cfg.template == "" {
		return t.defaultChat(messages, addGenerationPrompt), nil
	}
	tpl, err := t.compiledTemplate()
	if err != nil {
		return "", err
	}
	msgs := make([]map[string]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	st := &renderState{ctx: ctx}
	data := exec.NewContext(map[string]any{
		"messages":              msgs,
		"bos_token":             t.BOS(),
		"eos_token":             t.EOS(),
		"pad_token":             t.cfg.pad,
		"add_generation_prompt": addGenerationPrompt,
		"raise_exception":       raiseException,
		renderKey:               st,
	})
	var out strings.Builder
	err = tpl.Execute(&limitedWriter{w: &out, st: st}, data)
	if st.err != nil {
		err = st.err // the limit or the context's end, unwrapped from the engine's values
	}
	if err != nil {
		return "", fmt.Errorf("%s: chat_template: %w", t.templateName(), err)
	}
	return out.String(), nil
}

// templateName is the file the chat template came from.
func (t *Tokenizer) templateName() string {
	if t.cfg.templateFile != "" {
		return t.cfg.templateFile
	}
	return "tokenizer_config.json"
}

func raiseException(_ *exec.Evaluator, params *exec.VarArgs) (string, error) {
	var parts []string
	for _, a := range params.Args {
		parts = append(parts, a.String())
	}
	return "", errors.New("chat template raised: " + strings.Join(parts, " "))
}

// compiledTemplate parses the chat template once (parseConfig does it at
// load, so a syntax error is a load error).
func (t *Tokenizer) compiledTemplate() (*exec.Template, error) {
	t.cfg.once.Do(func() {
		cfg := config.New()
		cfg.TrimBlocks = true
		cfg.LeftStripBlocks = true
		loader, err := loaders.NewMemoryLoader(map[string]string{"/chat_template": t.cfg.template})
		if err != nil {
			t.cfg.err = err
			return
		}
		t.cfg.compiled, err = exec.NewTemplate("/chat_template", cfg, loader, limitedEnvironment)
		if err != nil {
			if u := errors.Unwrap(err); u != nil {
				err = u // the parser's error, without the template's whole source
			}
			t.cfg.err = fmt.Errorf("%s: chat_template: %v", t.templateName(), err)
		}
	})
	return t.cfg.compiled, t.cfg.err
}

func (t *Tokenizer) defaultChat(messages []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	for i, m := range messages {
		if i == 0 {
			b.WriteString(t.BOS())
		}
		b.WriteString(TokenStartHeader)
		b.WriteString(m.Role)
		b.WriteString(TokenEndHeader + "\n\n")
		b.WriteString(strings.TrimSpace(m.Content))
		b.WriteString(TokenEOT)
	}
	if addGenerationPrompt {
		b.WriteString(TokenStartHeader + "assistant" + TokenEndHeader + "\n\n")
	}
	return b.String()
}

// EncodeChat encodes a system + user request with the generation prompt and
// returns the length of its shared prefix: the templated system message
// (BOS, system header, content, end of turn), or only BOS when system is
// empty (nothing with a chat template that has no BOS token, as ChatML's).
// ids[:prefixLen] equals Encode of the prefix text alone. The messages'
// contents are text: a special token's text in them (<|eot_id|>, a mask
// token) is encoded as text, so no message can forge a turn; only the
// template's own markers are special tokens.
//
// The prefix text is found by rendering the system message alone and
// keeping it whole where it starts the full prompt (ChatML templates: Qwen,
// Dream), else what it shares with the full prompt up to its last <|eot_id|>:
// LLaDA-8B-Instruct's shipped template appends the assistant header even
// without add_generation_prompt, so the system-only rendering is not itself
// a prefix of the prompt. An error says so when no clean split exists (no
// shared end of turn, or the prefix's last token merges with what follows).
//
//	ids: [n]; prefixLen ≤ n
func (t *Tokenizer) EncodeChat(system, user string) (ids []int32, prefixLen int, err error) {
	return t.EncodeChatContext(context.Background(), system, user)
}

// EncodeChatContext is EncodeChat with the template rendered under ctx.
func (t *Tokenizer) EncodeChatContext(ctx context.Context, system, user string) (ids []int32, prefixLen int, err error) {
	var msgs []Message
	if system != "" {
		msgs = append(msgs, Message{Role: "system", Content: system})
	}
	msgs = append(msgs, Message{Role: "user", Content: user})
	full, err := t.renderChat(ctx, msgs, true, true)
	if err != nil {
		return nil, 0, err
	}
	prefix := t.BOS()
	if system != "" {
		sys, err := t.renderChat(ctx, msgs[:1], false, true)
		if err != nil {
			return nil, 0, err
		}
		if strings.HasPrefix(full, sys) {
			prefix = sys // the system turn alone is the prompt's start (ChatML: Qwen, Dream)
		} else {
			n := 0
			for n < len(sys) && n < len(full) && sys[n] == full[n] {
				n++
			}
			end := strings.LastIndex(full[:n], TokenEOT)
			if end < 0 {
				return nil, 0, fmt.Errorf("tokenizer: the prompt and the templated system message share no %s to end the prefix at", TokenEOT)
			}
			prefix = full[:end+len(TokenEOT)]
		}
	} else if t.cfg.bos == "" && t.cfg.template != "" && !strings.HasPrefix(full, prefix) {
		prefix = "" // a template without a BOS token (ChatML): no shared prefix
	}
	if !strings.HasPrefix(full, prefix) {
		return nil, 0, fmt.Errorf("tokenizer: chat template output does not start with %q", abbrevString(prefix))
	}
	ids = t.EncodeEscaped(full)
	pre := t.EncodeEscaped(prefix)
	if len(pre) > len(ids) || !slices.Equal(ids[:len(pre)], pre) {
		return nil, 0, fmt.Errorf("tokenizer: the shared prefix %q does not end on a token boundary of the prompt", abbrevString(prefix))
	}
	return ids, len(pre), nil
}

func abbrevString(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// EncodeMessages renders messages with the chat template (and the
// generation prompt) and encodes them; prefixLen is how many leading
// tokens equal the encoding of the first prefixMessages messages rendered
// alone (0: the BOS text) — the shared prefix a prefix store keys on.
// As in EncodeChat, the messages' contents are text: a special token's
// text in them is encoded as text, never as the token (OpenAI's API does
// the same); only the template's own markers are special tokens. For
// a system message and one user message EncodeChat gives the same split.
func (t *Tokenizer) EncodeMessages(messages []Message, prefixMessages int) (ids []int32, prefixLen int, err error) {
	return t.EncodeMessagesContext(context.Background(), messages, prefixMessages)
}

// EncodeMessagesContext is EncodeMessages with the template rendered
// under ctx.
func (t *Tokenizer) EncodeMessagesContext(ctx context.Context, messages []Message, prefixMessages int) (ids []int32, prefixLen int, err error) {
	if prefixMessages < 0 || prefixMessages >= len(messages) {
		return nil, 0, fmt.Errorf("tokenizer: %d prefix messages of %d: the prefix must leave the last message out", prefixMessages, len(messages))
	}
	prefix := t.BOS()
	if prefixMessages > 0 {
		if prefix, err = t.renderChat(ctx, messages[:prefixMessages], false, true); err != nil {
			return nil, 0, err
		}
	}
	full, err := t.renderChat(ctx, messages, true, true)
	if err != nil {
		return nil, 0, err
	}
	if !strings.HasPrefix(full, prefix) {
		return nil, 0, fmt.Errorf("tokenizer: the chat template's output does not start with the templated prefix messages")
	}
	ids = t.EncodeEscaped(full)
	pre := t.EncodeEscaped(prefix)
	for prefixLen < len(pre) && prefixLen < len(ids) && pre[prefixLen] == ids[prefixLen] {
		prefixLen++
	}
	return ids, prefixLen, nil
}

// EncodeConversation renders messages with the chat template and encodes
// them, the contents as text (as EncodeMessages).
func (t *Tokenizer) EncodeConversation(ctx context.Context, messages []Message, addGenerationPrompt bool) ([]int32, error) {
	text, err := t.renderChat(ctx, messages, addGenerationPrompt, true)
	if err != nil {
		return nil, err
	}
	return t.EncodeEscaped(text), nil
}
