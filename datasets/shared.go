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
			hist = append(hist, Turn{User: q.User, Assistant: q.Target()})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("datasets: no lookup samples to build conversations from")
	}
	return out, nil
}
