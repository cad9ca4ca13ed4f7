package datasets

import (
	"embed"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// systemsFS holds the builtin system messages, one a file. They were
// written for this project:
//
//	assistant  1 sentence pair, a generic assistant            (~20 words)
//	coder      a programming assistant's rules                  (~130 words)
//	support    a bike shop's support bot: facts and rules       (~320 words)
//	tutor      a school tutor's teaching principles             (~540 words)
//	policy     a public library's assistant handbook, 12 sections (~3,000 words,
//	           over 2,000 tokens for real models' tokenizers)
//
//go:embed systems/*.txt
var systemsFS embed.FS

// SystemPrompt is a system message that requests share as their prefix.
type SystemPrompt struct {
	// Name is the builtin's name, or the base name of the file it was
	// read from without its extension.
	Name string
	Text string
}

// BuiltinSystemPrompts returns the system messages bundled with dlmcache,
// shortest first.
func BuiltinSystemPrompts() []SystemPrompt {
	ents, err := systemsFS.ReadDir("systems")
	if err != nil {
		panic("datasets: embedded systems: " + err.Error())
	}
	var out []SystemPrompt
	for _, e := range ents {
		b, err := systemsFS.ReadFile(path.Join("systems", e.Name()))
		if err != nil {
			panic("datasets: embedded systems: " + err.Error())
		}
		out = append(out, SystemPrompt{Name: strings.TrimSuffix(e.Name(), ".txt"), Text: strings.TrimSpace(string(b))})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Text) < len(out[j].Text) })
	return out
}

// LoadSystemPrompts returns the system messages that args name, in order:
// "builtin" for all builtins, "builtin:NAME" for one, and "@FILE" for the
// whole text of FILE (one message per file, surrounding white space
// trimmed). Names that repeat get a "#2", "#3"… suffix.
func LoadSystemPrompts(args []string) ([]SystemPrompt, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("datasets: no system prompts given (want builtin, builtin:NAME or @FILE)")
	}
	var out []SystemPrompt
	for _, a := range args {
		switch {
		case a == "builtin":
			out = append(out, BuiltinSystemPrompts()...)
		case strings.HasPrefix(a, "builtin:"):
			name := strings.TrimPrefix(a, "builtin:")
			var found bool
			var names []string
			for _, s := range BuiltinSystemPrompts() {
				names = append(names, s.Name)
				if s.Name == name {
					out, found = append(out, s), true
				}
			}
			if !found {
				return nil, fmt.Errorf("datasets: no builtin system prompt %q (have %s)", name, strings.Join(names, ", "))
			}
		case strings.HasPrefix(a, "@"):
			file := a[1:]
			if file == "" {
				return nil, fmt.Errorf("datasets: system prompt %q: no file name after @", a)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("datasets: system prompt: %w", err)
			}
			if !utf8.Valid(b) {
				return nil, fmt.Errorf("datasets: system prompt %s: not UTF-8 text", file)
			}
			text := strings.TrimSpace(string(b))
			if text == "" {
				return nil, fmt.Errorf("datasets: system prompt %s: file is empty", file)
			}
			base := filepath.Base(file)
			out = append(out, SystemPrompt{Name: strings.TrimSuffix(base, filepath.Ext(base)), Text: text})
		default:
			return nil, fmt.Errorf("datasets: system prompt argument %q: want builtin, builtin:NAME or @FILE", a)
		}
	}
	seen := map[string]int{}
	for i := range out {
		seen[out[i].Name]++
		if k := seen[out[i].Name]; k > 1 {
			out[i].Name = fmt.Sprintf("%s#%d", out[i].Name, k)
		}
	}
	return out, nil
}
