package datasets

import "testing"

func TestSharedLookup(t *testing.T) {
	in := append(Generate("lookup", Eval, 1, 3, DefaultOptions()), Generate("rule", Eval, 1, 1, DefaultOptions())...)
	out, err := SharedLookup(in, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3*4+1 {
		t.Fatalf("%d samples, want 13", len(out))
	}
	users := map[string]bool{}
	for i, s := range out[:12] {
		if s.System != in[i/4].System {
			t.Errorf("sample %d: system message changed", i)
		}
		if want, err := Solve("lookup", s.System, s.User); err != nil || want != s.Answer {
			t.Errorf("sample %d: answer %q, Solve %q (%v)", i, s.Answer, want, err)
		}
		if users[s.User+s.System] {
			t.Errorf("sample %d repeats a question", i)
		}
		users[s.User+s.System] = true
	}
	if out[12].Suite != "rule" {
		t.Error("other suites are not kept")
	}
	if _, err := SharedLookup(in, 0); err == nil {
		t.Error("0 per system: no error")
	}
}

func TestConversations(t *testing.T) {
	in := append(Generate("lookup", Eval, 1, 2, DefaultOptions()), Generate("rule", Eval, 1, 1, DefaultOptions())...)
	out, err := Conversations(in, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2*3 {
		t.Fatalf("%d samples, want 6 (two conversations of 3 turns; rule left out)", len(out))
	}
	for i, s := range out {
		k := i % 3
		if s.Turn != k+1 || len(s.History) != k || s.System != in[i/3].System {
			t.Errorf("sample %d: turn %d, %d earlier turns, same system %v", i, s.Turn, len(s.History), s.System == in[i/3].System)
		}
		for j, h := range s.History {
			if prev := out[i-k+j]; h.User != prev.User || h.Assistant != prev.Target() {
				t.Errorf("sample %d turn %d: history %+v, want the earlier question and its answer", i, j, h)
			}
		}
		if want, err := Solve("lookup", s.System, s.User); err != nil || want != s.Answer {
			t.Errorf("sample %d: answer %q, Solve %q (%v)", i, s.Answer, want, err)
		}
	}
	if _, err := Conversations(in, 1); err == nil {
		t.Error("1 turn: no error")
	}
}
