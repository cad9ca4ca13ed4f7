package datasets

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var sharedLookupRow = regexp.MustCompile(`(?m)^\* ([a-z]+) = ([a-z]+)$`)

// SharedLookup turns lookup samples into a shared-prefix workload: each
// sample's system message (its table) is asked perSystem questions, about
// different keys of the same table, the way many users query one document.
// The requests come system by system. Samples of other suites are kept as
// they are. Answers are recomputed with Solve, so they stay exact.
func SharedLookup(samples []Sample, perSystem int) ([]Sample, error) {
	if perSystem < 1 {
		return nil, fmt.Errorf("datasets: %d questions per system message, want at least 1", perSystem)
	}
	var out []Sample
	for _, s := range samples {
		if s.Suite != "lookup" || perSystem == 1 {
			out = append(out, s)
			continue
		}
		rows := sharedLookupRow.FindAllStringSubmatch(s.System, -1)
		var asked string
		for _, r := range rows {
			if strings.Contains(s.User, " "+r[1]+"?") || strings.Contains(s.User, " "+r[1]+".") {
				asked = r[1]
			}
		}
		if asked == "" {
			return nil, fmt.Errorf("datasets: lookup sample %s: cannot find the key its question asks for", s.ID)
		}
		out = append(out, s)
		for q, k := 1, 0; q < perSystem && k < len(rows); k++ {
			key := rows[k][1]
			if key == asked {
				continue
			}
			v := s
			v.User = strings.Replace(s.User, " "+asked, " "+key, 1)
			ans, err := Solve("lookup", v.System, v.User)
			if err != nil {
				return nil, fmt.Errorf("datasets: lookup sample %s, key %s: %w", s.ID, key, err)
			}
			v.Answer, v.ID = ans, fmt.Sprintf("%s/q%d", s.ID, q)
			out = append(out, v)
			q++
		}
	}
	return out, nil
}

// Conversations turns each lookup sample into a conversation of turns
// questions about its table (SharedLookup's questions), one sample per
// turn: turn k carries the k−1 earlier questions with their reference
// answers (as the assistant's "## answer" turns) and asks the k-th, so
// every method sees the same prompts. Samples of other suites are left
// out.
func Conversations(samples []Sample, turns int) ([]Sample, error) {
	if turns < 2 {
		return nil, fmt.Errorf("datasets: conversations of %d turns, want at least 2", turns)
	}
	var out []Sample
	for _, s := range samples {
		if s.Suite != "lookup" {
			continue
		}
		qs, err := SharedLookup([]Sample{s}, turns)
		if err != nil {
			return nil, err
		}
		if len(qs) < turns {
			return nil, fmt.Errorf("datasets: lookup sample %s has %d keys, want %d turns", s.ID, len(qs), turns)
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
		return nil, fmt.Errorf("datasets: no lookup samples to build conversations from")
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
