package serve

import (
	"fmt"
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

// encodeConversation returns the prompt ids and the shared-prefix length.
func encodeConversation(tok *tokenizer.Tokenizer, msgs []chatMessage) (ids []int32, prefixLen int, err error) {
	if len(msgs) == 0 {
		return nil, 0, badRequest("messages is required: want at least one user message", "messages")
	}
	var system []string
	hasSystem := false // an explicit system message, even an empty one, is a system turn (as Hugging Face renders it)
	var turns []tokenizer.Message
	for i, m := range msgs {
		text, err := m.text(i)
		if err != nil {
			return nil, 0, err
		}
		switch m.Role {
		case "system", "developer":
			if len(turns) > 0 {
				return nil, 0, badRequest(fmt.Sprintf("messages[%d]: a %s message must come before the conversation's first user message (the system messages are the shared prefix)", i, m.Role), fmt.Sprintf("messages[%d].role", i))
			}
			hasSystem = true
			if text != "" {
				system = append(system, text)
			}
		case "user", "assistant":
			if len(turns) == 0 && m.Role == "assistant" {
				return nil, 0, badRequest(fmt.Sprintf("messages[%d]: the conversation must start with a user message after the system messages, got assistant", i), fmt.Sprintf("messages[%d].role", i))
			}
			turns = append(turns, tokenizer.Message{Role: m.Role, Content: text})
		case "":
			return nil, 0, badRequest(fmt.Sprintf("messages[%d].role is required", i), fmt.Sprintf("messages[%d].role", i))
		default:
			return nil, 0, badRequest(fmt.Sprintf("messages[%d].role %q is not supported: want system, developer, user or assistant", i, m.Role), fmt.Sprintf("messages[%d].role", i))
		}
	}
	if len(turns) == 0 || turns[len(turns)-1].Role != "user" {
		return nil, 0, badRequest("messages: the last message must be a user message", "messages")
	}
	sys := strings.Join(system, "\n\n")
	if len(turns) == 1 && (sys != "" || !hasSystem) {
		if ids, m, err := tok.EncodeChat(sys, turns[0].Content); err == nil {
			return ids, m, nil
		}
	}
	var prefix string
	all := turns
	if hasSystem {
		head := []tokenizer.Message{{Role: "system", Content: sys}}
		if prefix, err = tok.ApplyChat(head, false); err != nil {
			return nil, 0, internalError(err)
		}
		all = append(head, turns...)
	} else {
		prefix = tok.BOS()
	}
	full, err := tok.ApplyChat(all, true)
	if err != nil {
		return nil, 0, internalError(err)
	}
	return encodeWithPrefix(tok, prefix, full)
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

func internalError(err error) *apiError {
	return newAPIError(500, "server_error", "", "", err.Error())
}
