package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// A conversation becomes one prompt as follows. The leading system (or
// developer) messages are the shared prefix: joined with a blank line they
// form one system turn, templated alone. Every later message — earlier user
// and assistant turns, then the final user turn — is rendered by the
// model's chat template after it, with the generation prompt, exactly as
// the template renders the whole conversation. So a multi-turn chat
// differs from a one-turn one only after the shared prefix, and the prefix
// store is shared between both.
//
// For a system + one user message this is tokenizer.EncodeChat. Where the
// templated prefix does not end on a token boundary of the prompt, the
// shared prefix is the longest run of leading tokens the two encodings
// share (never wrong: the store keys on the token ids).

// conversation is a chat request's messages: the system turn and the
// user and assistant turns after it.
type conversation struct {
	sys       string
	hasSystem bool // an explicit system message, even an empty one, is a system turn (as Hugging Face renders it)
	turns     []tokenizer.Message
}

// messages is the conversation as the chat template takes it.
func (c *conversation) messages() []tokenizer.Message {
	if !c.hasSystem {
		return c.turns
	}
	return append([]tokenizer.Message{{Role: "system", Content: c.sys}}, c.turns...)
}

func parseConversation(msgs []chatMessage) (*conversation, error) {
	if len(msgs) == 0 {
		return nil, badRequest("messages is required: want at least one user message", "messages")
	}
	var system []string
	c := &conversation{}
	for i, m := range msgs {
		text, err := m.text(i)
		if err != nil {
			return nil, err
		}
		switch m.Role {
		case "system", "developer":
			if len(c.turns) > 0 {
				return nil, badRequest(fmt.Sprintf("messages[%d]: a %s message must come before the conversation's first user message (the system messages are the shared prefix)", i, m.Role), fmt.Sprintf("messages[%d].role", i))
			}
			c.hasSystem = true
			if text != "" {
				system = append(system, text)
			}
		case "user", "assistant":
			if len(c.turns) == 0 && m.Role == "assistant" {
				return nil, badRequest(fmt.Sprintf("messages[%d]: the conversation must start with a user message after the system messages, got assistant", i), fmt.Sprintf("messages[%d].role", i))
			}
			c.turns = append(c.turns, tokenizer.Message{Role: m.Role, Content: text})
		case "":
			return nil, badRequest(fmt.Sprintf("messages[%d].role is required", i), fmt.Sprintf("messages[%d].role", i))
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role %q is not supported: want system, developer, user or assistant", i, m.Role), fmt.Sprintf("messages[%d].role", i))
		}
	}
	if len(c.turns) == 0 || c.turns[len(c.turns)-1].Role != "user" {
		return nil, badRequest("messages: the last message must be a user message", "messages")
	}
	c.sys = strings.Join(system, "\n\n")
	return c, nil
}

// encodeConversation returns the prompt ids and the shared-prefix length.
// With history, the shared prefix is the whole conversation before the
// final user turn (the earlier turns a block store can reuse), else the
// system turn.
func encodeConversation(ctx context.Context, tok *tokenizer.Tokenizer, msgs []chatMessage, history bool) (ids []int32, prefixLen int, conv *conversation, err error) {
	c, err := parseConversation(msgs)
	if err != nil {
		return nil, 0, nil, err
	}
	if len(c.turns) == 1 && (c.sys != "" || !c.hasSystem) {
		if ids, m, err := tok.EncodeChatContext(ctx, c.sys, c.turns[0].Content); err == nil {
			return ids, m, c, nil
		} else if errors.Is(err, tokenizer.ErrTemplateLimit) || ctx.Err() != nil {
			return nil, 0, nil, templateError(err)
		}
	}
	all := c.messages()
	pm := 0
	switch {
	case history && len(c.turns) > 1:
		pm = len(all) - 1
	case c.hasSystem:
		pm = 1
	}
	ids, m, err := tok.EncodeMessagesContext(ctx, all, pm)
	if err != nil {
		return nil, 0, nil, templateError(err)
	}
	return ids, m, c, nil
}

// answered is the conversation with the assistant's answer appended, as the
// next turn's request will render it before its own user message: the
// tokens a block store keeps for that turn to reuse.
func (c *conversation) answered(ctx context.Context, tok *tokenizer.Tokenizer, answer string) ([]int32, error) {
	return tok.EncodeConversation(ctx, append(c.messages(), tokenizer.Message{Role: "assistant", Content: answer}), false)
}

// encodeCompletion encodes a text completion: BOS, the system extra (the
// shared prefix), then the prompt, as raw text with no chat template.
func encodeCompletion(tok *tokenizer.Tokenizer, system, prompt string) ([]int32, int, error) {
	prefix := tok.BOS() + system
	return encodeWithPrefix(tok, prefix, prefix+prompt)
}

// encodeWithPrefix encodes full and returns how many of its leading tokens
// equal prefix's own encoding.
func encodeWithPrefix(tok *tokenizer.Tokenizer, prefix, full string) ([]int32, int, error) {
	if !strings.HasPrefix(full, prefix) {
		return nil, 0, internalError(fmt.Errorf("the chat template's output does not start with the templated system message"))
	}
	ids := tok.Encode(full)
	pre := tok.Encode(prefix)
	m := 0
	for m < len(pre) && m < len(ids) && pre[m] == ids[m] {
		m++
	}
	return ids, m, nil
}

// templateError is the answer to a request whose messages the chat
// template could not render: 400 (chat_template_limit) where they drove it
// past one of its limits, else 500.
func templateError(err error) *apiError {
	if errors.Is(err, tokenizer.ErrTemplateLimit) {
		return newAPIError(http.StatusBadRequest, "invalid_request_error", "chat_template_limit", "messages",
			"the model's chat template cannot render these messages within its limits: "+err.Error())
	}
	return internalError(err)
}

func internalError(err error) *apiError {
	return newAPIError(500, "server_error", "", "", err.Error())
}
