package profile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The calibration and the method search keep a run log: a JSON header
// line, then one JSON line per outcome, each appended (and synced) before
// it is used, so that --resume replays them and a merge reads shards'.

// logPath makes dir and returns the path of its log name, refusing a log
// already there unless resume.
func logPath(dir, name string, resume bool) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil && !resume {
		return "", fmt.Errorf("%s already holds a calibration (%s): pass --resume to continue it, or choose another --out", dir, name)
	}
	return path, nil
}

// openLog opens the log at path for appending, writing header first when
// the log is empty.
func openLog(path string, header any) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if st, _ := f.Stat(); st.Size() == 0 {
		if err := appendLine(f, header); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// readLog reads the log at path: the first line into header (what names
// the header in the error when it does not parse), every other line to
// line. A torn last line (the process died mid-write) is cut off the file.
func readLog(path, what string, header any, line func([]byte) error) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	good := 0
	rd := bufio.NewReader(bytes.NewReader(raw))
	for first := true; ; first = false {
		ln, err := rd.ReadBytes('\n')
		if err == io.EOF {
			break // a torn line has no newline
		}
		if first {
			if err := json.Unmarshal(ln, header); err != nil {
				return fmt.Errorf("%s: first line is not a %s header: %w", path, what, err)
			}
		} else if err := line(ln); err != nil {
			return fmt.Errorf("%s: malformed line at byte %d: %w", path, good, err)
		}
		good += len(ln)
	}
	if good < len(raw) {
		return os.Truncate(path, int64(good))
	}
	return nil
}
