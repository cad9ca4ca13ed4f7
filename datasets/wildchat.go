package datasets

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// Prompt is one user turn that profiling can put after a system message.
type Prompt struct {
	// ID names the prompt: the conversation's hash or id for WildChat
	// rows (the file and row number when the file has neither), or
	// "wildchat-style/SEED/I" for generated prompts.
	ID string
	// Text is the user's message.
	Text string
	// Language is WildChat's language label of the turn (e.g. "English");
	// generated prompts say "English".
	Language string
	// Source is the file the prompt was read from, or "generated".
	Source string
	// Exchanges is the conversation from the first user turn on, one
	// user message and the assistant's reply (empty when none followed) per
	// exchange; Exchanges[0].User is Text. Only read when the filter asks
	// for conversations (WildChatFilter.MinTurns).
	Exchanges []Turn
}

// WildChatFilter selects the WildChat rows that ReadWildChat keeps. Its zero
// value keeps every non-toxic, non-redacted first user turn of any length
// and language, once per distinct text.
type WildChatFilter struct {
	// Language keeps only turns with this language label (compared without
	// case; WildChat uses names such as "English"); empty keeps all. The
	// label of the user turn itself is used, else the conversation's.
	Language string
	// MinChars and MaxChars bound the prompt's length in characters (Unicode
	// code points, after trimming surrounding white space); 0 means no bound.
	MinChars, MaxChars int
	// KeepToxic and KeepRedacted keep turns or conversations that WildChat
	// flags as toxic or as having had personal data redacted; by default
	// they are dropped.
	KeepToxic, KeepRedacted bool
	// KeepDuplicates keeps prompts whose text equals an earlier prompt's.
	KeepDuplicates bool
	// Limit stops reading once this many prompts were kept; 0 reads all.
	Limit int
	// MinTurns, when positive, reads whole conversations (Prompt.Exchanges)
	// and keeps only those with at least this many user turns.
	// MaxConversationChars then bounds the characters of their first
	// MinTurns exchanges, user and assistant messages together (0: no bound).
	MinTurns, MaxConversationChars int
}

// WildChatStats counts what ReadWildChat did with the rows of one file.
type WildChatStats struct {
	Path                                           string
	Rows, Kept                                     int
	NoUser, Language, Short, Long, Toxic, Redacted int
	Duplicate, FewTurns                            int
}

func (s WildChatStats) String() string {
	return fmt.Sprintf("%s: %d rows, %d kept (no user turn %d, other language %d, too short %d, too long %d, toxic %d, redacted %d, duplicate %d, too few turns %d)",
		s.Path, s.Rows, s.Kept, s.NoUser, s.Language, s.Short, s.Long, s.Toxic, s.Redacted, s.Duplicate, s.FewTurns)
}

// ReadWildChat reads the first user turn of every conversation in WildChat
// parquet files and returns those that pass f, in file and row order. A path
// that is a directory stands for the *.parquet files in it, sorted by name.
//
// Only the columns it needs are decoded, row group by row group and page by
// page, so files of any size are read in bounded memory, and columns it does
// not know are ignored. The conversation column must be a list of structs
// with string fields content and role (WildChat's layout: a LIST-annotated
// group or a plain repeated group both work); the optional columns
// conversation_hash or conversation_id, language, toxic and redacted, at the
// top level or inside the struct, are used when present.
//
// It fails, naming the file, on a file that is not parquet (or is
// truncated), on one without a usable conversation column, and when no row
// of any file passes the filter (the error lists why rows were dropped).
func ReadWildChat(paths []string, f WildChatFilter) ([]Prompt, error) {
	_, out, err := ReadWildChatStats(paths, f)
	return out, err
}

// ReadWildChatStats is ReadWildChat that also returns, per file read, how
// many rows it kept and why it dropped the others.
func ReadWildChatStats(paths []string, f WildChatFilter) ([]WildChatStats, []Prompt, error) {
	if f.MinChars < 0 || f.MaxChars < 0 || (f.MaxChars > 0 && f.MaxChars < f.MinChars) {
		return nil, nil, fmt.Errorf("datasets: bad WildChat length filter [%d, %d] characters", f.MinChars, f.MaxChars)
	}
	if f.MinTurns < 0 || f.MaxConversationChars < 0 {
		return nil, nil, fmt.Errorf("datasets: bad WildChat conversation filter: %d turns, %d characters", f.MinTurns, f.MaxConversationChars)
	}
	files, err := wildchatExpand(paths)
	if err != nil {
		return nil, nil, err
	}
	r := &wildchatReader{filter: f, seen: map[string]bool{}}
	var stats []WildChatStats
	for _, p := range files {
		st, err := r.readFile(p)
		stats = append(stats, st)
		if err != nil {
			return stats, nil, err
		}
		if r.full() {
			break
		}
	}
	if len(r.out) == 0 {
		lines := make([]string, len(stats))
		for i, s := range stats {
			lines[i] = "  " + s.String()
		}
		return stats, nil, fmt.Errorf("datasets: no usable WildChat prompt in %s:\n%s", strings.Join(files, ", "), strings.Join(lines, "\n"))
	}
	return stats, r.out, nil
}

// wildchatExpand replaces directories in paths by the parquet files in them.
func wildchatExpand(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, errors.New("datasets: no WildChat files given")
	}
	var out []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("datasets: WildChat data: %w", err)
		}
		if !fi.IsDir() {
			out = append(out, p)
			continue
		}
		m, err := filepath.Glob(filepath.Join(p, "*.parquet"))
		if err != nil {
			return nil, fmt.Errorf("datasets: WildChat data %s: %w", p, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("datasets: WildChat data %s: directory holds no *.parquet file", p)
		}
		sort.Strings(m)
		out = append(out, m...)
	}
	return out, nil
}

type wildchatReader struct {
	filter WildChatFilter
	seen   map[string]bool
	out    []Prompt
}

func (r *wildchatReader) full() bool { return r.filter.Limit > 0 && len(r.out) >= r.filter.Limit }

// wildchatLayout holds the leaf column indexes ReadWildChat reads; -1 where
// the file lacks the column.
type wildchatLayout struct {
	content, role                   int // inside conversation (required)
	turnLang, turnToxic, turnRedact int // inside conversation
	id, lang, toxic, redact         int // top level
}

func (r *wildchatReader) readFile(path string) (WildChatStats, error) {
	st := WildChatStats{Path: path}
	fh, pf, err := openParquet(path, "datasets: WildChat data")
	if err != nil {
		return st, err
	}
	defer fh.Close()
	lay, err := wildchatColumns(pf.Root())
	if err != nil {
		return st, fmt.Errorf("datasets: %s: %w", path, err)
	}
	for g, rg := range pf.RowGroups() {
		if err := r.readRowGroup(rg, lay, path, &st); err != nil {
			return st, fmt.Errorf("datasets: %s: row group %d: %w", path, g, err)
		}
		if r.full() {
			break
		}
	}
	return st, nil
}

// wildchatColumns finds the columns ReadWildChat needs in a file's schema.
func wildchatColumns(root *parquet.Column) (wildchatLayout, error) {
	lay := wildchatLayout{-1, -1, -1, -1, -1, -1, -1, -1, -1}
	conv := root.Column("conversation")
	if conv == nil {
		return lay, fmt.Errorf("no conversation column (want list<struct{content string, role string, ...}>); columns: %s", wildchatColumnNames(root))
	}
	if conv.Leaf() {
		return lay, fmt.Errorf("column conversation has type %s, want list<struct{content string, role string, ...}>", conv.Type())
	}
	// Walk down LIST wrappers (conversation.list.element, or .item) to the
	// group holding the turn's fields.
	turn := conv
	for turn.Column("content") == nil && len(turn.Columns()) == 1 && !turn.Columns()[0].Leaf() {
		turn = turn.Columns()[0]
	}
	leaf := func(g *parquet.Column, name string, kind parquet.Kind, required bool) (int, error) {
		c := g.Column(name)
		switch {
		case c == nil && !required:
			return -1, nil
		case c == nil:
			return -1, fmt.Errorf("column conversation has no %s field, want list<struct{content string, role string, ...}>", name)
		case !c.Leaf() || c.Type().Kind() != kind:
			return -1, fmt.Errorf("column %s has type %s, want %s", strings.Join(c.Path(), "."), wildchatTypeName(c), kind)
		}
		return c.Index(), nil
	}
	var err error
	set := func(dst *int, g *parquet.Column, name string, kind parquet.Kind, required bool) {
		if err == nil {
			*dst, err = leaf(g, name, kind, required)
		}
	}
	set(&lay.content, turn, "content", parquet.ByteArray, true)
	set(&lay.role, turn, "role", parquet.ByteArray, true)
	set(&lay.turnLang, turn, "language", parquet.ByteArray, false)
	set(&lay.turnToxic, turn, "toxic", parquet.Boolean, false)
	set(&lay.turnRedact, turn, "redacted", parquet.Boolean, false)
	set(&lay.lang, root, "language", parquet.ByteArray, false)
	set(&lay.toxic, root, "toxic", parquet.Boolean, false)
	set(&lay.redact, root, "redacted", parquet.Boolean, false)
	if err != nil {
		return lay, err
	}
	if rep := turn.Column("content").MaxRepetitionLevel(); rep != 1 {
		return lay, fmt.Errorf("column conversation is nested %d lists deep, want list<struct{content string, role string, ...}>", rep)
	}
	for _, name := range []string{"conversation_hash", "conversation_id"} {
		if c := root.Column(name); c != nil && c.Leaf() && c.MaxRepetitionLevel() == 0 {
			lay.id = c.Index()
			break
		}
	}
	return lay, nil
}

func wildchatTypeName(c *parquet.Column) string {
	if !c.Leaf() {
		return "group"
	}
	return c.Type().Kind().String()
}

func wildchatColumnNames(root *parquet.Column) string {
	var names []string
	for _, c := range root.Columns() {
		names = append(names, c.Name())
	}
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// readRowGroup streams the needed column chunks of one row group in step,
// one row at a time.
func (r *wildchatReader) readRowGroup(rg parquet.RowGroup, lay wildchatLayout, path string, st *WildChatStats) error {
	chunks := rg.ColumnChunks()
	open := func(i int) *wildchatCursor {
		if i < 0 || i >= len(chunks) {
			return nil
		}
		return &wildchatCursor{pages: chunks[i].Pages(), buf: make([]parquet.Value, 256)}
	}
	cols := []*wildchatCursor{
		open(lay.content), open(lay.role), open(lay.turnLang), open(lay.turnToxic), open(lay.turnRedact),
		open(lay.id), open(lay.lang), open(lay.toxic), open(lay.redact),
	}
	if cols[0] == nil || cols[1] == nil {
		return errors.New("conversation content or role column chunk missing")
	}
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.pages.Close()
			}
		}
	}()
	turnLang, turnToxic, turnRedact := cols[2], cols[3], cols[4]
	id, lang, toxic, redact := cols[5], cols[6], cols[7], cols[8]
	rows := rg.NumRows()
	for row := int64(0); row < rows; row++ {
		vals := make([][]parquet.Value, len(cols))
		for i, c := range cols {
			if c == nil {
				continue
			}
			v, err := c.nextRow()
			if err != nil {
				return fmt.Errorf("row %d: %w", row, err)
			}
			vals[i] = v
		}
		st.Rows++
		cv, rv := vals[0], vals[1]
		if len(cv) != len(rv) {
			return fmt.Errorf("row %d: %d content values but %d role values", row, len(cv), len(rv))
		}
		k := -1
		for j, v := range rv {
			if !v.IsNull() && string(v.ByteArray()) == "user" && !cv[j].IsNull() {
				k = j
				break
			}
		}
		if k < 0 {
			st.NoUser++
			continue
		}
		text := strings.TrimSpace(string(cv[k].ByteArray()))
		if text == "" {
			st.NoUser++
			continue
		}
		language := wildchatString(vals[2], k, turnLang)
		if language == "" {
			language = wildchatString(vals[6], 0, lang)
		}
		if r.filter.Language != "" && !strings.EqualFold(language, r.filter.Language) {
			st.Language++
			continue
		}
		n := utf8.RuneCountInString(text)
		if n < r.filter.MinChars {
			st.Short++
			continue
		}
		if r.filter.MaxChars > 0 && n > r.filter.MaxChars {
			st.Long++
			continue
		}
		if !r.filter.KeepToxic && (wildchatBool(vals[3], k, turnToxic) || wildchatBool(vals[7], 0, toxic)) {
			st.Toxic++
			continue
		}
		if !r.filter.KeepRedacted && (wildchatBool(vals[4], k, turnRedact) || wildchatBool(vals[8], 0, redact)) {
			st.Redacted++
			continue
		}
		var exchanges []Turn
		if r.filter.MinTurns > 0 {
			if exchanges = wildchatExchanges(cv[k:], rv[k:]); len(exchanges) < r.filter.MinTurns {
				st.FewTurns++
				continue
			}
			if max := r.filter.MaxConversationChars; max > 0 && conversationChars(exchanges[:r.filter.MinTurns]) > max {
				st.Long++
				continue
			}
		}
		if !r.filter.KeepDuplicates {
			if r.seen[text] {
				st.Duplicate++
				continue
			}
			r.seen[text] = true
		}
		pid := wildchatString(vals[5], 0, id)
		if pid == "" {
			pid = fmt.Sprintf("%s#%d", filepath.Base(path), st.Rows-1)
		}
		r.out = append(r.out, Prompt{ID: pid, Text: text, Language: language, Source: path, Exchanges: exchanges})
		st.Kept++
		if r.full() {
			return nil
		}
	}
	return nil
}

// wildchatExchanges pairs a conversation's turns, from a user turn on, into
// exchanges: each user message with the assistant message that follows it
// (empty when another user message or nothing does). Turns of other roles
// and empty messages are skipped.
func wildchatExchanges(content, role []parquet.Value) []Turn {
	var out []Turn
	for j, rv := range role {
		if rv.IsNull() || content[j].IsNull() {
			continue
		}
		text := strings.TrimSpace(string(content[j].ByteArray()))
		if text == "" {
			continue
		}
		switch string(rv.ByteArray()) {
		case "user":
			out = append(out, Turn{User: text})
		case "assistant":
			if n := len(out); n > 0 && out[n-1].Assistant == "" {
				out[n-1].Assistant = text
			}
		}
	}
	return out
}

// conversationChars counts the characters of the exchanges' messages.
func conversationChars(ts []Turn) int {
	n := 0
	for _, t := range ts {
		n += utf8.RuneCountInString(t.User) + utf8.RuneCountInString(t.Assistant)
	}
	return n
}

func wildchatString(vs []parquet.Value, k int, c *wildchatCursor) string {
	if c == nil || k >= len(vs) || vs[k].IsNull() {
		return ""
	}
	if vs[k].Kind() == parquet.ByteArray {
		return string(vs[k].ByteArray())
	}
	return vs[k].String()
}

func wildchatBool(vs []parquet.Value, k int, c *wildchatCursor) bool {
	return c != nil && k < len(vs) && !vs[k].IsNull() && vs[k].Boolean()
}

// wildchatCursor reads one column chunk row by row: a row is a value with
// repetition level 0 and the values with higher levels that follow it.
type wildchatCursor struct {
	pages  parquet.Pages
	values parquet.ValueReader // of the current page; nil between pages
	buf    []parquet.Value
	pos, n int
	eof    bool
}

// fill makes buf[pos:n] non-empty, or reports io.EOF at the chunk's end.
func (c *wildchatCursor) fill() error {
	for c.pos == c.n {
		if c.eof {
			return io.EOF
		}
		if c.values == nil {
			p, err := c.pages.ReadPage()
			if err == io.EOF {
				c.eof = true
				return io.EOF
			}
			if err != nil {
				return err
			}
			c.values = p.Values()
		}
		n, err := c.values.ReadValues(c.buf)
		c.pos, c.n = 0, n
		if err == io.EOF {
			c.values = nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// nextRow returns the values of the next row; their byte arrays are copied,
// so they stay valid after later reads.
func (c *wildchatCursor) nextRow() ([]parquet.Value, error) {
	var row []parquet.Value
	for {
		if err := c.fill(); err != nil {
			if err == io.EOF && len(row) > 0 {
				return row, nil
			}
			if err == io.EOF {
				return nil, errors.New("column ends before the row group's last row")
			}
			return nil, err
		}
		v := c.buf[c.pos]
		if v.RepetitionLevel() == 0 && len(row) > 0 {
			return row, nil
		}
		row = append(row, v.Clone())
		c.pos++
	}
}
