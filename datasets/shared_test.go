package datasets

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

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

func TestConversationsCarryEarlierTurnsUnderOneSystem(t *testing.T) {
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

// Chat conversations: one sample per turn under the given system message,
// each carrying the earlier exchanges with their recorded replies; the
// conversations too short, or with an unanswered earlier turn, are left out.
func TestChatConversations(t *testing.T) {
	ps := []Prompt{
		{ID: "a", Exchanges: []Turn{{"u1", "r1"}, {"u2", "r2"}, {"u3", ""}}},
		{ID: "short", Exchanges: []Turn{{"v1", "s1"}, {"v2", "s2"}}},
		{ID: "unanswered", Exchanges: []Turn{{"w1", ""}, {"w2", "x2"}, {"w3", "x3"}}},
	}
	out, err := ChatConversations(ps, "sys", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("%d samples, want 3 (one conversation of 3 turns)", len(out))
	}
	for k, s := range out {
		if s.Suite != ChatSuite || s.Scored() || s.System != "sys" || s.Turn != k+1 || s.ID != fmt.Sprintf("a/turn%d", k+1) ||
			s.User != ps[0].Exchanges[k].User || !slices.Equal(s.History, ps[0].Exchanges[:k]) {
			t.Errorf("turn %d: %+v", k+1, s)
		}
	}
	if out[0].AssistantTurn() != "r1" {
		t.Errorf("turn 1 carries %q to the next turn, want the recorded reply", out[0].AssistantTurn())
	}
	if _, err := ChatConversations(ps[1:], "sys", 3); err == nil || !strings.Contains(err.Error(), "3 answered turns") {
		t.Errorf("no usable conversation: %v", err)
	}
}

// Generated conversations: deterministic, the first message is the
// single-turn generator's, and LoadConversations keeps those within the
// character bound.
func TestLoadConversationsBuiltin(t *testing.T) {
	a, b := GenerateWildChatStyleConversations(3, 5, 4), GenerateWildChatStyleConversations(3, 5, 4)
	single := GenerateWildChatStyle(3, 5)
	for i := range a {
		if len(a[i].Exchanges) != 4 || !slices.Equal(a[i].Exchanges, b[i].Exchanges) || a[i].Exchanges[0].User != single[i].Text {
			t.Fatalf("conversation %d: %+v", i, a[i].Exchanges)
		}
		for _, e := range a[i].Exchanges {
			if e.User == "" || e.Assistant == "" {
				t.Fatalf("conversation %d has an empty message: %+v", i, e)
			}
		}
	}
	ps, err := LoadConversations([]string{"builtin"}, WildChatFilter{MinTurns: 3, MaxConversationChars: 2500}, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 8 {
		t.Fatalf("%d conversations, want 8", len(ps))
	}
	for _, p := range ps {
		if n := conversationChars(p.Exchanges); n > 2500 || len(p.Exchanges) != 3 {
			t.Errorf("%s: %d characters, %d exchanges", p.ID, n, len(p.Exchanges))
		}
	}
	if _, err := LoadConversations([]string{"builtin"}, WildChatFilter{MinTurns: 3, MaxConversationChars: 10}, 1, 2); err == nil {
		t.Error("a bound nothing fits: no error")
	}
	if _, err := LoadConversations(nil, WildChatFilter{MinTurns: 3}, 1, 2); err == nil {
		t.Error("no data: no error")
	}
}
