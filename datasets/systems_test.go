package datasets

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBuiltinSystemPrompts(t *testing.T) {
	b := BuiltinSystemPrompts()
	var names []string
	for i, s := range b {
		names = append(names, s.Name)
		if s.Text == "" || s.Text != strings.TrimSpace(s.Text) {
			t.Errorf("%s: empty or untrimmed text", s.Name)
		}
		if i > 0 && len(s.Text) < len(b[i-1].Text) {
			t.Errorf("%s is shorter than %s", s.Name, b[i-1].Name)
		}
	}
	if want := []string{"assistant", "coder", "support", "tutor", "policy"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}
	if w := len(strings.Fields(b[0].Text)); w > 30 {
		t.Errorf("shortest builtin has %d words, want a few sentences", w)
	}
	// Real tokenizers give English at least one token a word, so 2,500 words
	// are well over 2,000 tokens.
	if w := len(strings.Fields(b[len(b)-1].Text)); w < 2500 {
		t.Errorf("longest builtin has %d words, want over 2,500", w)
	}
}

func TestLoadSystemPrompts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine := write("mine.txt", "\n  You are a pirate. Answer like one.\n\n")
	other := filepath.Join(dir, "sub")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	mine2 := filepath.Join(other, "mine.md")
	if err := os.WriteFile(mine2, []byte("Second."), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := write("empty.txt", " \n\t\n")
	binary := write("bin.txt", "\xff\xfe\x00")
	builtins := BuiltinSystemPrompts()
	for _, tc := range []struct {
		name string
		args []string
		want []SystemPrompt
		err  string
	}{
		{"builtin", []string{"builtin"}, builtins, ""},
		{"one builtin", []string{"builtin:tutor"}, []SystemPrompt{builtins[3]}, ""},
		{"file", []string{"@" + mine}, []SystemPrompt{{"mine", "You are a pirate. Answer like one."}}, ""},
		{"mixed, repeated names", []string{"@" + mine, "builtin:coder", "@" + mine2, "builtin:coder"},
			[]SystemPrompt{{"mine", "You are a pirate. Answer like one."}, builtins[1], {"mine#2", "Second."}, {"coder#2", builtins[1].Text}}, ""},
		{"none", nil, nil, "no system prompts given"},
		{"unknown builtin", []string{"builtin:lawyer"}, nil, `no builtin system prompt "lawyer" (have assistant, coder, support, tutor, policy)`},
		{"bare path", []string{mine}, nil, "want builtin, builtin:NAME or @FILE"},
		{"no file name", []string{"@"}, nil, "no file name after @"},
		{"missing", []string{"@" + filepath.Join(dir, "nope.txt")}, nil, "nope.txt"},
		{"empty", []string{"@" + empty}, nil, empty + ": file is empty"},
		{"binary", []string{"@" + binary}, nil, binary + ": not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadSystemPrompts(tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
