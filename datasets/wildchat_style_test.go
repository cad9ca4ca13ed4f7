package datasets

import (
	"reflect"
	"strings"
	"testing"
)

func TestGenerateWildChatStyle(t *testing.T) {
	a := GenerateWildChatStyle(42, 400)
	if !reflect.DeepEqual(a, GenerateWildChatStyle(42, 400)) {
		t.Fatal("same seed gave different prompts")
	}
	if !reflect.DeepEqual(a[:50], GenerateWildChatStyle(42, 50)) {
		t.Error("prompt i depends on n")
	}
	b := GenerateWildChatStyle(43, 400)
	same := 0
	texts := map[string]bool{}
	minW, maxW := 1<<30, 0
	var code, multiPara, question, list int
	for i, p := range a {
		if p.Text == b[i].Text {
			same++
		}
		texts[p.Text] = true
		if p.ID == "" || p.Language != "English" || p.Source != "generated" || strings.TrimSpace(p.Text) != p.Text || p.Text == "" {
			t.Errorf("prompt %d: %+v", i, p)
		}
		if strings.Contains(p.Text, "{topic") {
			t.Errorf("prompt %d has an unfilled template: %q", i, p.Text)
		}
		w := len(strings.Fields(p.Text))
		minW, maxW = min(minW, w), max(maxW, w)
		switch {
		case strings.Contains(p.Text, "```"):
			code++
		case strings.Contains(p.Text, "\n1. "):
			list++
		case strings.Count(p.Text, "\n\n") >= 2:
			multiPara++
		case strings.Contains(p.Text, "?"):
			question++
		}
	}
	if same > 20 {
		t.Errorf("seeds 42 and 43 share %d of 400 prompts", same)
	}
	if len(texts) < 350 {
		t.Errorf("only %d distinct prompts of 400", len(texts))
	}
	if minW > 10 || maxW < 500 {
		t.Errorf("lengths %d..%d words, want from under 10 to over 500", minW, maxW)
	}
	for name, n := range map[string]int{"code": code, "list": list, "multi-paragraph": multiPara, "question": question} {
		if n < 10 {
			t.Errorf("only %d %s prompts of 400", n, name)
		}
	}
}

func TestWildChatSplitStyle(t *testing.T) {
	got := wildchatSplitStyle("# header\n[topics]\nA\n\n  B \n[snippets]\ngo\nx := 1\n\n---\nc\n  y;\n")
	want := map[string][]string{"topics": {"A", "B"}, "snippets": {"go\nx := 1", "c\n  y;"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("material without most sections did not panic")
		}
	}()
	wildchatParseStyle("[topics]\nA\nB\n")
}
