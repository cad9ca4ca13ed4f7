package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/model/load"
	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// Prompt modules (Prompt Cache's schema, for a diffusion model): the
// operator declares reusable pieces of system message — documents, tool
// descriptions, examples — each with a reserved range of position ids. A
// chat request imports some of them by name ("modules": ["a", "b"], a
// dlmcache extra); its system message is then the imported modules' texts,
// in the schema's order, followed by the request's own system messages.
// Each module's shallow-layer K/V are computed once, over the module alone
// at its reserved positions, and reused by every request importing it; the
// request's own text sits at positions after the last reserved range, and
// a module it does not import leaves a gap. The chat template's head (the
// text before the system message's content) is a module of its own at
// position 0, imported by every such request.

// headModule names the chat template's head in the schema; a declared
// module may not take the name.
const headModule = "chat-template-head"

// ModuleSpec declares one module in the file serve --modules reads.
type ModuleSpec struct {
	// Name is what requests import it by.
	Name string `json:"name"`
	// Text is the module's text, inserted verbatim into the system message
	// (end it with a blank line to separate it from what follows).
	Text string `json:"text"`
	// Start is the first position id of its reserved range; absent, the
	// module follows the previous one's range.
	Start *int32 `json:"start,omitempty"`
}

// ModuleFile is the JSON file serve --modules reads:
//
//	{"modules": [{"name": "handbook", "text": "…\n\n"}, {"name": "faq", "text": "…\n\n", "start": 2048}]}
type ModuleFile struct {
	Modules []ModuleSpec `json:"modules"`
}

// Modules is a server's module schema and the method that serves requests
// importing modules.
type Modules struct {
	schema *cache.Schema
	method cache.Method
	head   string            // the chat template's text before the system content
	text   map[string]string // module name → text
}

// ModuleInfo describes one declared module (GET /v1/modules).
type ModuleInfo struct {
	Name   string `json:"name"`
	Start  int32  `json:"start"`
	Tokens int    `json:"tokens"`
}

// LoadModules reads a ModuleFile and builds its schema for m (see
// NewModules).
func LoadModules(path string, m *load.Model, depth, refresh int) (*Modules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	var f ModuleFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("modules: %s: %w (want {\"modules\": [{\"name\": …, \"text\": …, \"start\": …}]})", path, err)
	}
	mods, err := NewModules(f.Modules, m, depth, refresh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mods, nil
}

// NewModules tokenizes the declared modules with m's tokenizer (each alone)
// and lays them out after the chat template's head; requests importing
// them reuse their K/V in layers 0..depth-1, the deeper layers refreshed
// every refresh steps. The reserved ranges must ascend without overlap and
// end within the model's context.
func NewModules(specs []ModuleSpec, m *load.Model, depth, refresh int) (*Modules, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("modules: no module declared")
	}
	if depth < 0 || depth > len(m.Blocks) {
		return nil, fmt.Errorf("modules: depth %d: want 0…%d (the model's layers)", depth, len(m.Blocks))
	}
	tok := m.Tokenizer
	const sentinel = "dlmcache-module-sentinel"
	text, err := tok.ApplyChat([]tokenizer.Message{{Role: "system", Content: sentinel}}, false)
	if err != nil {
		return nil, fmt.Errorf("modules: the chat template: %w", err)
	}
	at := strings.Index(text, sentinel)
	if at < 0 {
		return nil, fmt.Errorf("modules: the chat template does not render the system message verbatim")
	}
	mods := &Modules{head: text[:at], text: map[string]string{}}
	schema := &cache.Schema{}
	headToks := tok.Encode(mods.head)
	schema.Modules = append(schema.Modules, cache.Module{Name: headModule, Tokens: headToks})
	next := int32(len(headToks))
	for i, sp := range specs {
		switch {
		case sp.Name == headModule:
			return nil, fmt.Errorf("modules: module %d: the name %q is reserved", i, headModule)
		case sp.Text == "":
			return nil, fmt.Errorf("modules: module %d (%q) has no text", i, sp.Name)
		}
		start := next
		if sp.Start != nil {
			start = *sp.Start
		}
		toks := tok.Encode(sp.Text)
		schema.Modules = append(schema.Modules, cache.Module{Name: sp.Name, Tokens: toks, Start: start})
		mods.text[sp.Name] = sp.Text
		next = start + int32(len(toks))
	}
	if err := schema.Check(); err != nil {
		return nil, err
	}
	if max := m.Config.MaxSequenceLength; max > 0 && int(schema.End()) >= max {
		return nil, fmt.Errorf("modules: the reserved ranges end at position %d, past the model's context of %d", schema.End(), max)
	}
	store, err := cache.NewModuleStore(m.Backend, schema)
	if err != nil {
		return nil, err
	}
	if mods.method, err = cache.NewModuleMethod(store, depth, refresh, cache.Options{Fingerprint: m.Fingerprint}); err != nil {
		return nil, err
	}
	mods.schema = schema
	return mods, nil
}

// Method is the method that serves module requests (nil for a nil
// schema).
func (ms *Modules) Method() cache.Method {
	if ms == nil {
		return nil
	}
	return ms.method
}

// Infos lists the declared modules (the chat template's head left out).
func (ms *Modules) Infos() []ModuleInfo {
	var out []ModuleInfo
	for _, m := range ms.schema.Modules[1:] {
		out = append(out, ModuleInfo{Name: m.Name, Start: m.Start, Tokens: len(m.Tokens)})
	}
	return out
}

// encode composes a chat request importing names: its prompt ids,
// shared-prefix length (the modules) and position ids.
func (ms *Modules) encode(ctx context.Context, tok *tokenizer.Tokenizer, names []string, msgs []chatMessage) (ids []int32, prefixLen int, pos []int32, err error) {
	c, err := parseConversation(msgs)
	if err != nil {
		return nil, 0, nil, err
	}
	var texts []string
	for _, m := range ms.schema.Modules[1:] {
		if slices.Contains(names, m.Name) {
			texts = append(texts, ms.text[m.Name])
		}
	}
	for i, n := range names {
		if _, ok := ms.text[n]; !ok {
			return nil, 0, nil, badRequest(fmt.Sprintf("modules[%d]: the server declares no module %q (GET /v1/modules lists them)", i, n), "modules")
		}
		if slices.Index(names, n) != i {
			return nil, 0, nil, badRequest(fmt.Sprintf("modules[%d]: %q imported twice", i, n), "modules")
		}
	}
	modText := strings.Join(texts, "")
	// The request's text is text: its special tokens' text is encoded as
	// text (the modules, the operator's, as they are).
	c.sys, c.hasSystem = modText+tok.EscapeSpecials(c.sys), true
	for i := range c.turns {
		c.turns[i].Content = tok.EscapeSpecials(c.turns[i].Content)
	}
	full, err := tok.ApplyChatContext(ctx, c.messages(), true)
	if err != nil {
		return nil, 0, nil, templateError(err)
	}
	// The modules' tokens are fixed; the rest is the template's text after
	// them. A template that trims the system message's end (when the
	// request has no system text of its own) drops a module's closing
	// blank line: the module keeps it.
	at := len(ms.head) + len(strings.TrimRightFunc(modText, unicode.IsSpace))
	if !strings.HasPrefix(full, ms.head+modText[:at-len(ms.head)]) {
		return nil, 0, nil, internalError(fmt.Errorf("the chat template's output does not start with the imported modules"))
	}
	for want := ms.head + modText; at < len(full) && at < len(want) && full[at] == want[at]; at++ {
	}
	rest := tok.EncodeEscaped(full[at:])
	ids, prefixLen, pos, err = ms.schema.Compose(append([]string{headModule}, names...), rest)
	if err != nil {
		return nil, 0, nil, badRequest(err.Error(), "modules")
	}
	return ids, prefixLen, pos, nil
}
