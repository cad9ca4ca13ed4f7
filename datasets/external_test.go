package datasets

import (
	"reflect"
	"strings"
	"testing"
)

func TestExternalSamplesSolveToTheirAnswers(t *testing.T) {
	xs := External(40, 4, 3)
	if len(xs) != 160 {
		t.Fatalf("%d samples, want 160", len(xs))
	}
	systems := map[string]int{}
	suites := map[string]int{}
	for _, s := range xs {
		systems[s.System]++
		suites[s.Suite]++
		if s.Suite == "span" {
			if k := len(strings.Split(s.Answer, ", ")); k < spanMin || k > spanMax {
				t.Errorf("%s: a span of %d names, want %d–%d", s.ID, k, spanMin, spanMax)
			}
		}
		got, err := Solve(s.Suite, s.System, s.User)
		if err != nil || got != s.Answer {
			t.Errorf("%s: Solve = %q, %v; answer %q", s.ID, got, err, s.Answer)
		}
		// Never a generator's system message: the opening sentence is none of theirs.
		var seqIntros []string
		for _, st := range seqStyles {
			seqIntros = append(seqIntros, st.intro)
		}
		for _, intros := range [][]string{lookupIntros, arithIntros, ruleIntros, seqIntros} {
			for _, in := range intros {
				if strings.HasPrefix(s.System, in) {
					t.Errorf("%s opens like a generated sample: %q", s.ID, in)
				}
			}
		}
	}
	for _, suite := range ExternalSuites {
		if suites[suite] != 32 {
			t.Errorf("%d %s samples of 160, want 32 (every suite in turn, span included)", suites[suite], suite)
		}
	}
	if len(ExternalSuites) != len(Suites()) {
		t.Errorf("External draws from %v, the suites are %v", ExternalSuites, Suites())
	}
	if len(systems) != 40 {
		t.Errorf("%d distinct system messages, want 40 (4 questions each)", len(systems))
	}
	for sys, n := range systems {
		if n != 4 {
			t.Errorf("system message shared by %d questions: %.40q", n, sys)
		}
	}
	if a, b := External(3, 2, 3), External(3, 2, 3); !reflect.DeepEqual(a[5], b[5]) {
		t.Error("not deterministic")
	}
}

func TestHeldoutSharesNoSentenceWithExternal(t *testing.T) {
	ext := map[string]bool{}
	for _, in := range externalIntros {
		for _, s := range in {
			ext[s] = true
		}
	}
	for _, s := range externalProse {
		ext[s] = true
	}
	for suite, in := range heldoutIntros {
		if len(externalIntros[suite]) == 0 {
			t.Errorf("Heldout has intros for %s, External none", suite)
		}
		for _, s := range in {
			if ext[s] {
				t.Errorf("intro %q is External's too", s)
			}
		}
	}
	for _, s := range heldoutProse {
		if ext[s] {
			t.Errorf("filler %q is External's too", s)
		}
	}
	xs := Heldout(20, 4, 3)
	seen := map[string]bool{}
	for _, s := range External(200, 1, 3) {
		seen[s.System] = true
	}
	suites := map[string]int{}
	for _, s := range xs {
		suites[s.Suite]++
		if !strings.HasPrefix(s.ID, "heldout/") {
			t.Errorf("ID %q", s.ID)
		}
		if seen[s.System] {
			t.Errorf("%s: External produced the same system message", s.ID)
		}
		if got, err := Solve(s.Suite, s.System, s.User); err != nil || got != s.Answer {
			t.Errorf("%s: Solve = %q, %v; answer %q", s.ID, got, err, s.Answer)
		}
		opened := false
		for _, in := range heldoutIntros[s.Suite] {
			opened = opened || strings.HasPrefix(s.System, in)
		}
		if !opened {
			t.Errorf("%s does not open with one of Heldout's %s intros: %.60q", s.ID, s.Suite, s.System)
		}
	}
	for _, suite := range ExternalSuites {
		if suites[suite] != 16 {
			t.Errorf("%d %s samples of 80, want 16", suites[suite], suite)
		}
	}
}
