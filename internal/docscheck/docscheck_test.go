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
	for n := 1; sc.Scan(); n++ {
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
// "previous model" or date-named chapter anywhere in README.md,
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
	}
	clean := []string{
		"The registry for this sessional test maps names",
		"Each request keeps its own session with the batcher.",
		"a model trained on 16 slots, step 13,000",
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
