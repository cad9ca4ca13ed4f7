package datasets

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Every suite's system message is asked perSystem different questions of
// its own form, each answered by Solve; a public benchmark's sample is kept
// as it is.
func TestShared(t *testing.T) {
	var in []Sample
	for _, suite := range Suites() {
		in = append(in, Generate(suite, Eval, 1, 3, DefaultOptions())...)
	}
	bench := Sample{Suite: "gsm8k", User: "q", Answer: "1", ID: "gsm8k/1"}
	out, err := Shared(append(in, bench), 4)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]bool{}
	at := 0
	for _, src := range in {
		st, _ := suiteByName(src.Suite)
		others, err := st.others(src.System, src.User)
		if err != nil {
			t.Fatal(err)
		}
		// Four questions, fewer where the data block holds fewer items
		// (a span list with few names after the count).
		n := 1 + min(3, len(others))
		if n < 4 && src.Suite != "span" {
			t.Errorf("%s: %d questions of a system message", src.ID, n)
		}
		for q, s := range out[at : at+n] {
			if s.System != src.System || s.Suite != src.Suite {
				t.Errorf("%s q%d: system message or suite changed", src.ID, q)
			}
			if q == 0 && (s.User != src.User || s.Answer != src.Answer) {
				t.Errorf("%s: the sample's own question does not come first", src.ID)
			}
			if want, err := Solve(s.Suite, s.System, s.User); err != nil || want != s.Answer {
				t.Errorf("%s q%d: answer %q, Solve %q (%v)", src.ID, q, s.Answer, want, err)
			}
			if users[s.User+s.System] {
				t.Errorf("%s q%d repeats a question: %q", src.ID, q, s.User)
			}
			users[s.User+s.System] = true
		}
		at += n
	}
	if at != len(out)-1 {
		t.Fatalf("%d samples, want %d", len(out), at+1)
	}
	if last := out[len(out)-1]; last.ID != bench.ID || last.User != bench.User || last.Answer != bench.Answer {
		t.Error("a public benchmark's sample is not kept as it is")
	}
	if _, err := Shared(in, 0); err == nil {
		t.Error("0 per system: no error")
	}
}

// The other questions keep each suite's form and only ask about items
// that have an answer: a subtraction stays positive, a list name has a
// neighbour in the question's direction, a span has its count of names.
func TestSharedQuestionsStayAnswerable(t *testing.T) {
	for _, tc := range []struct{ suite, system, user string }{
		{"arithmetic", "Constants:\nlet B = 2\nlet C = 9\nlet D = 5", "Subtract 3 from C."},
		{"sequence", "Queue: ann, bob, cid.", "Which guest comes right after bob?"},
		{"sequence", "Queue: ann, bob, cid.", "Which guest comes right before bob?"},
		{"span", "Queue: ann, bob, cid, dan, eve.", "List the 2 guests that come right after ann, in order."},
		{"rule", "Code:\n* a -> B\n* c -> D\n* e -> F", "Encode: a a c"},
	} {
		st, _ := suiteByName(tc.suite)
		users, err := st.others(tc.system, tc.user)
		if err != nil {
			t.Fatalf("%s: %v", tc.suite, err)
		}
		want := map[string][]string{
			"arithmetic": {"Subtract 3 from D."},
			"sequence":   {"Which guest comes right after ann?"},
			"span":       {"List the 2 guests that come right after bob, in order.", "List the 2 guests that come right after cid, in order."},
			"rule":       {"Encode: c c e", "Encode: e e a"},
		}[tc.suite]
		if tc.suite == "sequence" && strings.Contains(tc.user, "before") {
			want = []string{"Which guest comes right before cid?"}
		}
		if !slices.Equal(users, want) {
			t.Errorf("%s %q: %q, want %q", tc.suite, tc.user, users, want)
		}
	}
}

func TestConversationsCarryEarlierTurnsUnderOneSystem(t *testing.T) {
	in := append(Generate("lookup", Eval, 1, 2, DefaultOptions()), Generate("rule", Eval, 1, 1, DefaultOptions())...)
	bench := Sample{Suite: "gsm8k", User: "q", Answer: "1", ID: "gsm8k/1"}
	// A span list with one start that has two names after it: one question.
	short := Sample{Suite: "span", System: "Queue: ann, bob, cid.", User: "List the 2 guests that come right after ann, in order.", Answer: "bob, cid", ID: "span/1"}
	out, err := Conversations(append(in, bench, short), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3*3 {
		t.Fatalf("%d samples, want 9 (three conversations of 3 turns; the benchmark sample and the short span left out)", len(out))
	}
	for i, s := range out {
		k := i % 3
		if s.Turn != k+1 || len(s.History) != k || s.System != in[i/3].System || s.Suite != in[i/3].Suite {
			t.Errorf("sample %d: turn %d, %d earlier turns, same system %v", i, s.Turn, len(s.History), s.System == in[i/3].System)
		}
		for j, h := range s.History {
			if prev := out[i-k+j]; h.User != prev.User || h.Assistant != prev.Target() {
				t.Errorf("sample %d turn %d: history %+v, want the earlier question and its answer", i, j, h)
			}
		}
		if want, err := Solve(s.Suite, s.System, s.User); err != nil || want != s.Answer {
			t.Errorf("sample %d: answer %q, Solve %q (%v)", i, s.Answer, want, err)
		}
	}
	if _, err := Conversations(in, 1); err == nil {
		t.Error("1 turn: no error")
	}
	if _, err := Conversations([]Sample{bench, short}, 3); err == nil {
		t.Error("no task-suite sample: no error")
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
