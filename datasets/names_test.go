package datasets

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/model/tokenizer"
)

// TestNamesSingleTokens checks the property names.txt was generated for:
// under the bundled tokenizer every name is one token wherever the suites
// put it (after "* ", before " =", in a comma list, before "?" or "."), and
// every number of the arithmetic suite is one token after a space.
func TestNamesSingleTokens(t *testing.T) {
	tok := bundledTokenizer(t)
	count := func(s string) int { return len(tok.Encode(s)) }
	base := count("* a = a, a?") // " a" is one token
	for _, w := range names {
		if n := count(" " + w); n != 1 {
			t.Errorf("name %q is %d tokens", w, n)
			continue
		}
		s := fmt.Sprintf("* %s = %s, %s?", w, w, w)
		if n := count(s); n != base {
			t.Errorf("%q is %d tokens, want %d", s, n, base)
		}
	}
	for v := 1; v <= arithMaxValue+arithMaxOperand; v++ {
		if n := count(fmt.Sprintf(" %d", v)); n != 1 {
			t.Errorf("number %d is %d tokens", v, n)
		}
	}
}

// TestAnswersSingleTokens checks generated samples end to end: every
// space-separated field of an answer (the code or name of lookup and
// sequence; value, operator, operand, "=" and result of arithmetic; each
// letter of rule) is one token after "##"; span's comma-separated names are
// two tokens each (the name and its comma) but the last.
func TestAnswersSingleTokens(t *testing.T) {
	tok := bundledTokenizer(t)
	hash := len(tok.Encode("##"))
	for _, suite := range Suites() {
		for _, s := range Generate(suite, Eval, 7, 50, DefaultOptions()) {
			want := hash + len(strings.Fields(s.Answer))
			if suite == "span" {
				want = hash + 2*len(strings.Fields(s.Answer)) - 1
				if want-hash < 33 {
					t.Errorf("%s: span answer %q is %d tokens: it must span two blocks of 32", s.ID, s.Answer, want-hash)
				}
			}
			if n := len(tok.Encode(s.Target())); n != want {
				t.Errorf("%s: answer %q is %d tokens after ##, want %d", s.ID, s.Answer, n-hash, want-hash)
			}
		}
	}
}

// bundledTokenizer loads the tokenizer names.txt was generated from.
func bundledTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load("../models/llada-tiny")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
