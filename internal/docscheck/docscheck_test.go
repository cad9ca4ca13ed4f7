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
	regexp.MustCompile(`^#+\s*(\(|\[)?\d{4}-\d{2}-\d{2}`),
	regexp.MustCompile(`(?i)\bissues?\s+#?\d+`),
	// The tracker's item as the page's brief: "the issue's two workloads",
	// "the ratios the issue asks for" (a known issue with a library is
	// ordinary prose).
	regexp.MustCompile(`(?i)\bthe issue's\b`),
	regexp.MustCompile(`(?i)\b(the|this|that) issue (asks|asked|wants|wanted|calls|called|requires|required|names|named|lists|listed|sets|set|targets|targeted)\b`),
	regexp.MustCompile(`(?i)\b(PR|pull request|ticket)\s+#?\d+`),
	regexp.MustCompile(`^#+\s.*(^|[\s(\[])#\d+\b`),
}

// commitChapter matches a commit hash used as a chapter in prose: the
// stretch of work from, since or until a commit, or a build named by its
// branch and commit. Group 2 is the hash (checked by isHash, so a number
// is not one). A figure's provenance in parentheses ("(commit 3f07c37)")
// is not a chapter.
var commitChapter = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(from|since|until|as of|up to|after|before)\s+commit\s+([0-9a-f]{7,40})\b`),
	regexp.MustCompile(`(?i)\b(main|master|HEAD)\s+(?:at\s+)?([0-9a-f]{7,40})\b`),
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
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		row := strings.HasPrefix(strings.TrimSpace(line), "|")
		header := row && !inTable
		inTable = row
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

// The docs describe the system as it is: no "session N", "wave N",
// "issue N", "the issue's", "previous model", date- or commit-named chapter
// (a heading, a table's columns, work "from commit X", a build "main X")
// anywhere in README.md,
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
	}
	clean := []string{
		"The registry for this sessional test maps names",
		"Each request keeps its own session with the batcher.",
		"a model trained on 16 slots, step 13,000",
		"## 2048 rows and 1000000 steps",
		"a known issue with old OpenBLAS builds",
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
// the page's brief, a stretch of work from or until a commit, a build named
// by branch and commit, a table whose columns are commits. A figure's
// provenance ("(commit 3f07c37; PyTorch 2.1)"), an upstream file's
// commit in a table's body and CHANGELOG.md's release lines are not.
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
