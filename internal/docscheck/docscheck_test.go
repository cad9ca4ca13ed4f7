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
}

// headingHash matches a heading that names a commit (a chapter of the
// project's history); CHANGELOG.md's release headings name the last commit
// they cover by its convention and are exempt.
var headingHash = regexp.MustCompile(`^#+\s.*?\b([0-9a-f]{7,40})\b`)

// namesCommit reports whether a heading line names a commit hash (hex with
// a letter and a digit, so a number is not one).
func namesCommit(line string) string {
	m := headingHash.FindStringSubmatch(line)
	if m == nil || !strings.ContainsAny(m[1], "abcdef") || !strings.ContainsAny(m[1], "0123456789") {
		return ""
	}
	return m[1]
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
	for n := 1; sc.Scan(); n++ {
		if h := namesCommit(sc.Text()); h != "" && !changelog {
			hits = append(hits, "heading naming commit "+h+" (line "+strconv.Itoa(n)+")")
			continue
		}
		for _, re := range workPeriod {
			if m := re.FindString(sc.Text()); m != "" {
				hits = append(hits, strings.TrimSpace(m)+" (line "+strconv.Itoa(n)+")")
				break
			}
		}
	}
	return hits, sc.Err()
}

// The docs describe the system as it is: no "session N", "wave N",
// "issue N", "previous model", date- or commit-named chapter anywhere in README.md,
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
