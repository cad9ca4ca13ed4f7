package docscheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// workPeriod matches the ways a diary names the stretch of work that
// produced something: numbered sessions or waves, "this/previous/next
// session", the model or engine "before", and headings that are dates.
var workPeriod = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bsessions?\s+\d+`),
	regexp.MustCompile(`(?i)\b(this|that|previous|next|last|first|same|later|earlier|a later|each)\s+session\b`),
	regexp.MustCompile(`(?i)\bsession's\b`),
	regexp.MustCompile(`(?i)\bwaves?\s+\d+`),
	regexp.MustCompile(`(?i)\bprevious (bundled )?model\b`),
	// A figure or a build named by the change that came after it: "before
	// the recycled-buffer change", "an earlier kernel's run", "this commit".
	regexp.MustCompile(`(?i)\b(before|after|since|until) the [\w-]+(?: [\w-]+){0,2} (change|rewrite|refactor|fix|commit|patch)\b`),
	regexp.MustCompile(`(?i)\b(an?|the) (earlier|older|former|previous) (build|engine|binary|kernel|trainer|model)('s|s)?\b`),
	regexp.MustCompile(`(?i)\bthis (change|commit|patch)\b`),
	regexp.MustCompile(`^#+\s*(\(|\[)?\d{4}-\d{2}-\d{2}`),
	regexp.MustCompile(`(?i)\bissues?\s*#?\d+`),
	// The tracker's item as the page's brief: "the issue's two workloads",
	// "the ratios the issue asks for" (a known issue with a library is
	// ordinary prose).
	regexp.MustCompile(`(?i)\bthe issue's\b`),
	regexp.MustCompile(`(?i)\b(the|this|that) issue (asks|asked|wants|wanted|calls|called|requires|required|names|named|lists|listed|sets|set|targets|targeted)\b`),
	regexp.MustCompile(`(?i)\b(PR|pull request|ticket)\s+#?\d+`),
	regexp.MustCompile(`^#+\s.*(^|[\s(\[])#\d+\b`),
	// A tracker number anywhere in prose: "(#12)", "see #12", "fixes
	// #12". A heading's "#" is followed by a space and a shell comment's
	// "# 1." too, so neither is one.
	regexp.MustCompile(`(^|[\s(\[,;])#\d+\b`),
}

// commitChapter matches a commit hash used as a chapter in prose: the
// stretch of work from, since or until a commit, or a build named by its
// branch and commit. Group 2 is the hash (checked by isHash, so a number
// is not one). A figure's provenance in parentheses ("(commit 3f07c37)")
// is not a chapter.
var commitChapter = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(from|since|until|as of|up to|after|before|at|in)\s+commit\s+([0-9a-f]{7,40})\b`),
	regexp.MustCompile(`(?i)\b(main|master|HEAD)\s+(?:at\s+)?([0-9a-f]{7,40})\b`),
	// A build compared with another by its commit: "before 40c911e",
	// "against commit b3693fd", "3f07c37 vs 8a1477f".
	regexp.MustCompile(`(?i)\b(before|after|against|versus|vs\.?|than)\s+(?:commit\s+)?([0-9a-f]{7,40})\b`),
}

// hexWord matches a word of 7–40 hex digits: a commit hash when isHash
// says so. A longer digest (SHA-256's 64) has no word boundary within it
// and "0x1f2e3d4c" none after its "x", so neither matches.
var hexWord = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)

// commitsCompared returns the first two distinct commit hashes a line
// names, "" when it names fewer: one line that names two commits compares
// them (a figure "at 8a8bf3d, before the packs of 40c911e").
func commitsCompared(line string) string {
	var first string
	for _, h := range hexWord.FindAllString(line, -1) {
		if !isHash(h) {
			continue
		}
		if first == "" {
			first = h
		} else if h != first {
			return first + " and " + h
		}
	}
	return ""
}

// rowLabel returns a table row's first cell, its label, or "" when the
// line is not a table row.
func rowLabel(line string) string {
	t := strings.TrimSpace(line)
	if !strings.HasPrefix(t, "|") {
		return ""
	}
	cells := strings.SplitN(t[1:], "|", 2)
	return strings.TrimSpace(cells[0])
}

// dateWord matches an ISO date.
var dateWord = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`)

// labelNamesPeriod returns what a table row's label names of a work
// period — a commit hash or a date — or "": rows labelled by the build
// or the day they were measured are chapters of the history.
func labelNamesPeriod(line string) string {
	label := rowLabel(line)
	if label == "" {
		return ""
	}
	for _, h := range hexWord.FindAllString(label, -1) {
		if isHash(h) {
			return "commit " + h
		}
	}
	if d := dateWord.FindString(label); d != "" {
		return "date " + d
	}
	return ""
}

// tableCellHash matches a table cell that begins with a hex word: a
// table header with such a cell lays out its columns by commit.
var tableCellHash = regexp.MustCompile(`\|\s*([0-9a-f]{7,40})\b`)

// isHash reports whether a hex word reads as a commit hash: a letter and
// a digit both, so neither a number nor a word like "deadbeef" is one.
func isHash(s string) bool {
	return strings.ContainsAny(s, "abcdef") && strings.ContainsAny(s, "0123456789")
}

// headingHash matches a heading that names a commit (a chapter of the
// project's history); CHANGELOG.md's release headings name the last commit
// they cover by its convention and are exempt.
var headingHash = regexp.MustCompile(`^#+\s.*?\b([0-9a-f]{7,40})\b`)

// namesCommit reports whether a heading line names a commit hash (hex with
// a letter and a digit, so a number is not one).
func namesCommit(line string) string {
	m := headingHash.FindStringSubmatch(line)
	if m == nil || !isHash(m[1]) {
		return ""
	}
	return m[1]
}

// commitAsChapter returns the text of the first commitChapter match whose
// hash reads as one, or "".
func commitAsChapter(line string) string {
	for _, re := range commitChapter {
		for _, m := range re.FindAllStringSubmatch(line, -1) {
			if isHash(m[2]) {
				return m[0]
			}
		}
	}
	return ""
}

// headerNamesCommit returns the hash a table's header row names as a
// column, or "".
func headerNamesCommit(line string) string {
	for _, m := range tableCellHash.FindAllStringSubmatch(line, -1) {
		if isHash(m[1]) {
			return m[1]
		}
	}
	return ""
}

// repoRoot is two directories up from this package.
const repoRoot = "../.."

// docFiles lists the prose the check covers.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "DEVELOPERS.md"}
	cards, err := filepath.Glob(filepath.Join(repoRoot, "models", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cards {
		rel, _ := filepath.Rel(repoRoot, c)
		files = append(files, rel)
	}
	err = filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(repoRoot, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// findWorkPeriods returns "line: text" for each line of the file that
// names a work period.
func findWorkPeriods(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hits []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	changelog := filepath.Base(path) == "CHANGELOG.md"
	inTable := false
	prev := "" // the previous line when it and this one are prose
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		row := strings.HasPrefix(strings.TrimSpace(line), "|")
		header := row && !inTable
		inTable = row
		if !isProse(line) {
			prev = ""
		}
		wrapped := ""
		if !changelog {
			wrapped = acrossBreak(prev, line)
		}
		if isProse(line) {
			prev = line
		}
		if wrapped != "" {
			hits = append(hits, wrapped+" (lines "+strconv.Itoa(n-1)+"–"+strconv.Itoa(n)+")")
			continue
		}
		if changelog {
			// Its release headings and entries name the commits they cover.
		} else if h := namesCommit(line); h != "" {
			hits = append(hits, "heading naming commit "+h+" (line "+strconv.Itoa(n)+")")
			continue
		} else if m := commitAsChapter(line); m != "" {
			hits = append(hits, m+" (line "+strconv.Itoa(n)+")")
			continue
		} else if h := headerNamesCommit(line); header && h != "" {
			hits = append(hits, "table column naming commit "+h+" (line "+strconv.Itoa(n)+")")
			continue
		} else if l := labelNamesPeriod(line); l != "" {
			hits = append(hits, "table row labelled by "+l+" (line "+strconv.Itoa(n)+")")
			continue
		} else if c := commitsCompared(line); c != "" {
			hits = append(hits, "commits "+c+" compared (line "+strconv.Itoa(n)+")")
			continue
		}
		for _, re := range workPeriod {
			if m := re.FindString(line); m != "" {
				hits = append(hits, strings.TrimSpace(m)+" (line "+strconv.Itoa(n)+")")
				break
			}
		}
	}
	return hits, sc.Err()
}

// isProse reports whether a line can continue a wrapped sentence: not
// blank, not a table row, not a heading.
func isProse(line string) bool {
	t := strings.TrimSpace(line)
	return t != "" && !strings.HasPrefix(t, "|") && !strings.HasPrefix(t, "#")
}

// acrossBreak returns what a pattern matches only where prev and line
// join (a sentence wrapped between "at commit" and its hash, or between
// "issue" and its number), or "": a match within either line alone is
// that line's own hit.
func acrossBreak(prev, line string) string {
	if prev == "" {
		return ""
	}
	joined := prev + " " + line
	brk := len(prev) // the joining space
	spans := func(loc []int) bool { return loc[0] < brk && loc[1] > brk+1 }
	for _, re := range commitChapter {
		for _, loc := range re.FindAllStringSubmatchIndex(joined, -1) {
			if spans(loc) && isHash(joined[loc[4]:loc[5]]) {
				return strings.TrimSpace(joined[loc[0]:loc[1]])
			}
		}
	}
	for _, re := range workPeriod {
		if strings.HasPrefix(re.String(), "^") {
			continue // a heading's pattern: one line
		}
		for _, loc := range re.FindAllStringIndex(joined, -1) {
			if spans(loc) {
				return strings.TrimSpace(joined[loc[0]:loc[1]])
			}
		}
	}
	a, b := commitsCompared(prev), commitsCompared(line)
	if a == "" && b == "" {
		if h := commitsCompared(joined); h != "" {
			return "commits " + h + " compared"
		}
	}
	return ""
}

// The docs describe the system as it is: no "session N", "wave N",
// "issue N", "(#N)", "the issue's", "previous model", "before the X
// change", "an earlier kernel", date- or
// commit-named chapter (a heading, a table's columns or row labels, work
// "from" or "at commit X", a build "main X" or "before X", two commits
// compared in one sentence, also where a line break splits it) anywhere
// in README.md,
// CHANGELOG.md, DEVELOPERS.md, docs/ or a bundled model's card (the history
// lives in git).
func TestDocsNameNoWorkPeriods(t *testing.T) {
	for _, rel := range docFiles(t) {
		hits, err := findWorkPeriods(filepath.Join(repoRoot, rel))
		if os.IsNotExist(err) {
			t.Errorf("%s is missing", rel)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			t.Errorf("%s names a work period: %s", rel, h)
		}
	}
}

// The check itself catches each form it is meant to (and leaves ordinary
// prose alone), so a regexp that stops matching cannot pass silently.
func TestWorkPeriodPatternsCatchDiaryForms(t *testing.T) {
	dir := t.TempDir()
	diary := []string{
		"## 2026-11-25 (session 22): attention",
		"measured in session 21's code",
		"as this session showed",
		"Sessions 15–16: span learned",
		"the wave 3 helpers",
		"## (Previous model) 1. The task suites",
		"kept for the record on the previous bundled model",
		"### Quantized rows and the engine's ratios (issue 33), Zen 3",
		"the issue 41 workloads",
		"## Served block cache at 3f07c37",
		"the step before the recycled-buffer change",
		"Q8_0 1.06 (an earlier kernel's run: 0.92)",
		"as this commit measured it",
		"since the attention rewrite the step takes 4.8 s",
	}
	clean := []string{
		"The registry for this sessional test maps names",
		"Each request keeps its own session with the batcher.",
		"a model trained on 16 slots, step 13,000",
		"## 2048 rows and 1000000 steps",
		"a known issue with old OpenBLAS builds",
		"A number measured at an older commit says which.",
		"copied side by side before the score product",
		"the next block's rows at the previous block's offset",
		"a change to the table's cells is a new table",
	}
	for i, line := range diary {
		p := filepath.Join(dir, "d"+strconv.Itoa(i)+".md")
		os.WriteFile(p, []byte("intro\n"+line+"\n"), 0o644)
		if hits, _ := findWorkPeriods(p); len(hits) != 1 {
			t.Errorf("%q: %d hits, want 1", line, len(hits))
		}
	}
	for i, line := range clean {
		p := filepath.Join(dir, "c"+strconv.Itoa(i)+".md")
		os.WriteFile(p, []byte(line+"\n"), 0o644)
		if hits, _ := findWorkPeriods(p); len(hits) != 0 {
			t.Errorf("%q: flagged %v", line, hits)
		}
	}
}

// Issue numbers and commit hashes used as chapters: the tracker's item as
// the page's brief or a number in prose, a stretch of work from, at or
// until a commit, a build named by branch and commit or compared with
// another commit, a table whose columns or rows are commits (or rows
// dates). A figure's provenance ("(commit 3f07c37; PyTorch 2.1)"), an
// upstream file's commit in a table's body, hex that is no commit (0x1f,
// a SHA-256 digest), a shell session and CHANGELOG.md's release lines are
// not.
func TestIssuesAndCommitsAsChapters(t *testing.T) {
	cases := []struct {
		name      string
		doc       string // the file's text; its name is CHANGELOG.md when changelog
		hits      int
		changelog bool
	}{
		{"issue number in a heading", "### Quantized rows (issue 33), Zen 3\n", 1, false},
		{"issue's targets in a card", "lookup and arithmetic answer (issue 15's targets met)\n", 1, false},
		{"issue as the brief", "The issue's two workloads on every suite\n", 1, false},
		{"ratios the issue asks for", "The three ratios the issue asks for, on this machine:\n", 1, false},
		{"tracker number in a heading", "## Served block cache (#41)\n", 1, false},
		{"pull request", "as PR 12 measured\n", 1, false},
		{"from a commit on", "From commit dd962f3 calibration's system messages come together\n", 1, false},
		{"until a commit", "the default until commit 4987b2e was two generations\n", 1, false},
		{"binary named by branch and commit", "`dlmcache eval` (binary built from main 3504d64)\n", 1, false},
		{"commits as table columns", "intro\n\n| benchmark | b3693fd | 8a1477f |\n|---|---|---|\n| Fused | 128 | 145 |\n", 1, false},
		{"a commit leading a column header", "| round | 4987b2e, 2 unbatched | batch 16 |\n|---|---|---|\n", 1, false},
		{"release heading in the changelog", "## The toolkit (to 8662512, 2026-11-23)\nFrom commit dd962f3 on, the tables\n", 0, true},
		{"figure's provenance", "`make bench` on the idle machine (commit 3f07c37; PyTorch from Debian)\n", 0, false},
		{"upstream commit in a table's body", "| method | source |\n|---|---|\n| d2Cache | `src/cache/d2cache.py` (72feb60) |\n| none | 7e031bb0 |\n", 0, false},
		{"a known issue", "a known issue with old OpenBLAS builds; the issue is the page size\n", 0, false},
		{"numbers in a table header", "| rows | 1000000 | 2048 |\n|---|---|---|\n", 0, false},
		{"main as a word", "the main 2048-row product; the head 32 rows\n", 0, false},
		{"a hex word in a heading's table", "| deadbeef | cafe |\n|---|---|\n", 0, false},
		{"tracker number in prose", "the store's eviction (#12) keeps the newest blocks\n", 1, false},
		{"tracker number after a verb", "the queue's order, as fixes #7 left it\n", 1, false},
		{"issue number without a space", "see issue#12 for the regime\n", 1, false},
		{"a build at a commit", "`make bench-8b` at commit 9a4f434, load 12–18\n", 1, false},
		{"a figure before a commit", "the int8 kernel's step, before 40c911e\n", 1, false},
		{"a build against a commit", "the fused halves, against commit b3693fd\n", 1, false},
		{"two commits on one line", "the int8 kernel of 8a8bf3d and the 64-row packs of 40c911e\n", 1, false},
		{"rows labelled by commits", "| build | step (s) |\n|---|---|\n| 3f07c37 | 0.084 |\n| with the packs (8a1477f) | 0.080 |\n", 2, false},
		{"a row labelled by a date", "| day | step (s) |\n|---|---|\n| 2026-11-25 | 0.08 |\n", 1, false},
		{"a shell session", "open a shell session and run `make build`; the chat's session keeps its turns\n", 0, false},
		{"hex constants", "a MessagePack uint8 is `0xcc`, a fixint `0x1f`; the magic 0x46554747a1b2c3d4\n", 0, false},
		{"a SHA-256 digest as a row's label", "| digest | input |\n|---|---|\n| `9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08` | `test` |\n", 0, false},
		{"a shell comment in a code block", "```sh\n# 1. Profile once per model\nmake run   # then 2. plot\n```\n", 0, false},
		{"numbers compared", "2048 rows against 1000000, before 4096\n", 0, false},
		{"one upstream commit named twice", "read at 72feb60, as the table's (72feb60) says\n", 0, false},
		{"a commit after a line break", "the whole of `make bench-8b` at commit\n9a4f434, load 12–18 at each row\n", 1, false},
		{"an issue number after a line break", "the regime as issue\n33 measured it\n", 1, false},
		{"two commits in a wrapped sentence", "the int8 kernel of 8a8bf3d, before the\n64-row packs of 40c911e\n", 1, false},
		{"provenance in two paragraphs", "`make bench` (commit 3f07c37)\n\nthe thread team (commit df41209)\n", 0, false},
		{"rows labelled by what they measure", "| suite | greedy |\n|---|---|\n| lookup | 94% |\n| the export | 2026-11-25 |\n", 0, false},
	}
	dir := t.TempDir()
	for i, c := range cases {
		name := "c" + strconv.Itoa(i) + ".md"
		if c.changelog {
			sub := filepath.Join(dir, strconv.Itoa(i))
			os.MkdirAll(sub, 0o755)
			name = filepath.Join(strconv.Itoa(i), "CHANGELOG.md")
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(c.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		hits, err := findWorkPeriods(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != c.hits {
			t.Errorf("%s: %d hits %v, want %d", c.name, len(hits), hits, c.hits)
		}
	}
}
