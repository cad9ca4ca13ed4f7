package datasets

import (
	"fmt"
	"slices"
)

// Shared turns samples into a shared-prefix workload: each sample's
// system message is asked perSystem questions of its suite's form, about
// different items of the same data block (keys of a lookup table,
// constants, input letters, names of a list), the way many users query one
// document. The requests come system by system, the sample's own question
// first; a data block with fewer items gives fewer. Answers are recomputed
// with Solve, so they stay exact. Samples of suites without a data block
// (public benchmarks, chats) are kept as they are.
func Shared(samples []Sample, perSystem int) ([]Sample, error) {
	if perSystem < 1 {
		return nil, fmt.Errorf("datasets: %d questions per system message, want at least 1", perSystem)
	}
	var out []Sample
	for _, s := range samples {
		st, ok := suiteByName(s.Suite)
		if !ok || perSystem == 1 {
			out = append(out, s)
			continue
		}
		users, err := st.others(s.System, s.User)
		if err != nil {
			return nil, fmt.Errorf("datasets: %s sample %s: %w", s.Suite, s.ID, err)
		}
		out = append(out, s)
		for q, user := range users[:min(len(users), perSystem-1)] {
			v := s
			v.User = user
			ans, err := Solve(s.Suite, v.System, v.User)
			if err != nil {
				return nil, fmt.Errorf("datasets: %s sample %s, question %q: %w", s.Suite, s.ID, user, err)
			}
			v.Answer, v.ID = ans, fmt.Sprintf("%s/q%d", s.ID, q+1)
			out = append(out, v)
		}
	}
	return out, nil
}

// Conversations turns each sample of a suite with a data block into a
// conversation of turns questions about its system message (Shared's
// questions), one sample per turn: turn k carries the k−1 earlier
// questions with their reference answers (as the assistant's "## answer"
// turns) and asks the k-th, so every method sees the same prompts. Samples
// of other suites, and those whose data block answers fewer than turns
// questions (a span list with few names after the count), are left out.
func Conversations(samples []Sample, turns int) ([]Sample, error) {
	if turns < 2 {
		return nil, fmt.Errorf("datasets: conversations of %d turns, want at least 2", turns)
	}
	var out []Sample
	for _, s := range samples {
		if _, ok := suiteByName(s.Suite); !ok {
			continue
		}
		qs, err := Shared([]Sample{s}, turns)
		if err != nil {
			return nil, err
		}
		if len(qs) < turns {
			continue
		}
		var hist []Turn
		for k, q := range qs[:turns] {
			q.History, q.Turn = slices.Clone(hist), k+1
			q.ID = fmt.Sprintf("%s/turn%d", s.ID, k+1)
			out = append(out, q)
			hist = append(hist, Turn{User: q.User, Assistant: q.AssistantTurn()})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("datasets: no task-suite sample answers %d questions to build conversations from", turns)
	}
	return out, nil
}

// ChatConversations turns chat conversations (prompts read with
// WildChatFilter.MinTurns, or GenerateWildChatStyleConversations) into a
// multi-turn workload of ChatSuite samples: conversation i gives one sample
// per turn k = 1…turns, under the given system message, carrying the k−1
// earlier exchanges with their recorded replies as history and asking the
// k-th user message. Conversations shorter than turns, or with an earlier
// turn the assistant did not answer, are left out; it fails when none is
// left.
func ChatConversations(prompts []Prompt, system string, turns int) ([]Sample, error) {
	if turns < 1 {
		return nil, fmt.Errorf("datasets: conversations of %d turns, want at least 1", turns)
	}
	var out []Sample
	short := 0
	for _, p := range prompts {
		ex := p.Exchanges
		if len(ex) < turns || slices.ContainsFunc(ex[:turns-1], func(t Turn) bool { return t.Assistant == "" }) {
			short++
			continue
		}
		for k := range turns {
			out = append(out, Sample{Suite: ChatSuite, System: system, User: ex[k].User, Reply: ex[k].Assistant,
				ID: fmt.Sprintf("%s/turn%d", p.ID, k+1), History: slices.Clone(ex[:k]), Turn: k + 1})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("datasets: none of %d conversations has %d answered turns", len(prompts), turns)
	}
	return out, nil
}
