// Package formatsdoc reads the column and field tables of docs/formats.md,
// so that tests can hold the written schemas to the documented ones.
package formatsdoc

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

var (
	heading = regexp.MustCompile("^## `([^`]+)`")
	row     = regexp.MustCompile("^\\| `([a-z0-9_]+)` \\| ([^|]+) \\|")
)

// Fields returns the names and types listed in the tables of the section
// whose heading starts with the file name in backquotes ("## `name`"), in
// order. It fails when the section is missing or lists nothing.
func Fields(path, section string) (names, types []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := heading.FindStringSubmatch(line); m != nil {
			in = m[1] == section
			continue
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			names = append(names, m[1])
			types = append(types, strings.TrimSpace(m[2]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("%s: no field table under ## `%s`", path, section)
	}
	return names, types, nil
}
