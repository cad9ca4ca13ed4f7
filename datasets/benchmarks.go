package datasets

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/parquet-go/parquet-go"
)

// Public benchmarks that LoadBenchmark reads, by kind:
//
//	gsm8k    JSONL or parquet {"question", "answer"}; the answer's text ends
//	         with "#### 42", the reference is the number after "####" with
//	         thousands separators removed.
//	arc      ARC-Challenge, either as AllenAI ships it (JSONL {"id",
//	         "question": {"stem", "choices": [{"text", "label"}]},
//	         "answerKey"}) or in the Hugging Face layout (parquet or JSONL
//	         {"id", "question", "choices": {"text": [...], "label": [...]},
//	         "answerKey"}); the reference is a letter A–E.
//	math500  JSONL or parquet {"problem", "solution", "answer", "subject",
//	         "level", "unique_id"}; the reference is "answer" without
//	         surrounding "$" and white space.
//	gpqa     CSV (or JSONL/parquet with the same names) with the columns
//	         "Question", "Correct Answer", "Incorrect Answer 1" to
//	         "Incorrect Answer 3" and optionally "Record ID"; the four
//	         answers are shuffled into choices A–D by a permutation seeded
//	         with a hash of the question text, so a question always gets the
//	         same letters; the reference is the correct answer's letter.
const (
	BenchGSM8K   = "gsm8k"
	BenchARC     = "arc"
	BenchMATH500 = "math500"
	BenchGPQA    = "gpqa"
)

// BenchmarkKinds returns the kinds LoadBenchmark accepts.
func BenchmarkKinds() []string {
	return []string{BenchGSM8K, BenchARC, BenchMATH500, BenchGPQA}
}

// benchRecord is one row of a benchmark file as JSON would decode it:
// strings, json.Number, bool, nil, []any and map[string]any. Parquet rows and
// CSV records are turned into the same shape.
type benchRecord = map[string]any

// benchConvert turns one record into a sample; where names the record
// ("line 3", "row 7") for IDs that fall back to it.
type benchConvert func(rec benchRecord, where benchWhere) (Sample, error)

// benchWhere locates a record in its file: JSONL line or 1-based data row.
type benchWhere struct {
	unit string // "line" or "row"
	n    int
}

func (w benchWhere) String() string { return fmt.Sprintf("%s %d", w.unit, w.n) }

// LoadBenchmark reads the samples of a public benchmark file. kind is one of
// BenchmarkKinds (see BenchGSM8K and the others for the layouts); the file's
// format follows its extension: .jsonl (JSON lines), .json (JSON lines, or
// one JSON array of objects), .parquet, or .csv (a header row naming the columns). limit > 0
// stops after that many samples.
//
// Every sample has Suite = kind, the benchmark's shared System message (an
// instruction to end with "## <answer>" and a few worked examples, the same
// for every question, so that it is the cached prefix), the question (with
// lettered choices for arc and gpqa) as User, the reference answer as Answer
// and ID = "kind/<id>", where <id> is the record's id ("id" for arc,
// "unique_id" for math500, "Record ID" for gpqa) or, without one, its line
// (JSONL) or 1-based data row (parquet, CSV). Errors name the file, the line
// or row and the field at fault.
func LoadBenchmark(kind, path string, limit int) ([]Sample, error) {
	var conv benchConvert
	switch kind {
	case BenchGSM8K:
		conv = benchGSM8K
	case BenchARC:
		conv = benchARC
	case BenchMATH500:
		conv = benchMATH500
	case BenchGPQA:
		conv = benchGPQA
	default:
		return nil, fmt.Errorf("datasets: unknown benchmark %q (have %s)", kind, strings.Join(BenchmarkKinds(), ", "))
	}
	var read func(path string, limit int, conv benchConvert) ([]Sample, error)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".jsonl":
		read = func(path string, limit int, conv benchConvert) ([]Sample, error) {
			return benchReadJSON(path, limit, conv, false)
		}
	case ".json":
		read = func(path string, limit int, conv benchConvert) ([]Sample, error) {
			return benchReadJSON(path, limit, conv, true)
		}
	case ".parquet":
		read = benchReadParquet
	case ".csv":
		read = benchReadCSV
	default:
		return nil, fmt.Errorf("datasets: %s: unknown file extension %q (want .jsonl, .json, .parquet or .csv)", path, ext)
	}
	out, err := read(path, limit, conv)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Suite = kind
	}
	return out, nil
}

// benchReadJSON reads JSON lines (blank lines skipped) or, when array is
// allowed and the first non-blank byte is '[', one JSON array of objects.
func benchReadJSON(path string, limit int, conv benchConvert, array bool) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var out []Sample
	add := func(rec benchRecord, w benchWhere) error {
		s, err := conv(rec, w)
		if err != nil {
			return fmt.Errorf("datasets: %s: %s: %w", path, w, err)
		}
		out = append(out, s)
		return nil
	}
	full := func() bool { return limit > 0 && len(out) >= limit }

	first, skipped, err := benchFirstByte(br)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("datasets: %s: %w", path, err)
	}
	if array && first == '[' {
		dec := json.NewDecoder(br)
		dec.UseNumber()
		var recs []json.RawMessage
		if err := dec.Decode(&recs); err != nil {
			return nil, fmt.Errorf("datasets: %s: not a JSON array of objects: %w", path, err)
		}
		for i, raw := range recs {
			w := benchWhere{"element", i + 1}
			rec, err := benchDecodeObject(raw)
			if err != nil {
				return nil, fmt.Errorf("datasets: %s: %s: %w", path, w, err)
			}
			if err := add(rec, w); err != nil {
				return nil, err
			}
			if full() {
				break
			}
		}
		return out, nil
	}

	line := skipped // lines of white space benchFirstByte consumed
	for !full() {
		text, err := br.ReadBytes('\n')
		if len(text) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("datasets: %s: line %d: %w", path, line+1, err)
		}
		line++
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		w := benchWhere{"line", line}
		rec, derr := benchDecodeObject(text)
		if derr != nil {
			return nil, fmt.Errorf("datasets: %s: %s: %w", path, w, derr)
		}
		if err := add(rec, w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// benchFirstByte skips a UTF-8 byte order mark and white space and returns
// the first other byte, left unread, and the number of newlines skipped.
func benchFirstByte(br *bufio.Reader) (first byte, newlines int, err error) {
	if p, _ := br.Peek(3); bytes.Equal(p, []byte("\xEF\xBB\xBF")) {
		br.Discard(3)
	}
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, newlines, err
		}
		switch b {
		case '\n':
			newlines++
			continue
		case ' ', '\t', '\r':
			continue
		}
		return b, newlines, br.UnreadByte()
	}
}

// benchDecodeObject decodes one JSON object, keeping numbers as json.Number.
func benchDecodeObject(data []byte) (benchRecord, error) {
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("bad JSON: more than one value on the line")
	}
	rec, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("bad JSON: want an object, have %s", benchTypeName(v))
	}
	return rec, nil
}

// benchReadCSV reads a CSV file whose first record names the columns.
func benchReadCSV(path string, limit int, conv benchConvert) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.ReuseRecord = false
	header, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("datasets: %s: empty CSV file, want a header row", path)
	}
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", path, err)
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\uFEFF")
	}
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	var out []Sample
	for row := 1; limit <= 0 || len(out) < limit; row++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("datasets: %s: data row %d: %w", path, row, err)
		}
		if len(rec) != len(header) {
			line, _ := r.FieldPos(0)
			return nil, fmt.Errorf("datasets: %s: row %d (line %d): %d fields, the header has %d", path, row, line, len(rec), len(header))
		}
		m := make(benchRecord, len(header))
		for i, name := range header {
			m[name] = rec[i]
		}
		s, err := conv(m, benchWhere{"row", row})
		if err != nil {
			line, _ := r.FieldPos(0)
			return nil, fmt.Errorf("datasets: %s: row %d (line %d): %w", path, row, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// benchLeaf is a parquet leaf column: the record path it fills (LIST
// wrappers "list"/"element" removed) and whether it is repeated.
type benchLeaf struct {
	path     []string
	repeated bool
}

// openParquet opens a parquet file for reading row by row (no page index,
// no bloom filters); errors from the file system begin with what. The
// caller closes the *os.File.
func openParquet(path, what string) (*os.File, *parquet.File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	pf, err := parquet.OpenFile(fh, fi.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		fh.Close()
		return nil, nil, fmt.Errorf("datasets: %s is not a readable parquet file: %w", path, err)
	}
	return fh, pf, nil
}

// benchReadParquet reads a parquet file row by row and turns each row into a
// JSON-like record: a leaf column "a.b" fills rec["a"]["b"], as a list when
// the column is repeated (e.g. choices.text.list.element → choices.text).
func benchReadParquet(path string, limit int, conv benchConvert) ([]Sample, error) {
	fh, pf, err := openParquet(path, "datasets")
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	leaves := map[int]benchLeaf{}
	var walk func(c *parquet.Column)
	walk = func(c *parquet.Column) {
		if c.Leaf() {
			leaves[c.Index()] = benchLeaf{path: benchStripListPath(c.Path()), repeated: c.MaxRepetitionLevel() > 0}
			return
		}
		for _, k := range c.Columns() {
			walk(k)
		}
	}
	walk(pf.Root())

	var out []Sample
	row := 0
	buf := make([]parquet.Row, 64)
	for g, rg := range pf.RowGroups() {
		rows := rg.Rows()
		for limit <= 0 || len(out) < limit {
			n, err := rows.ReadRows(buf)
			for _, r := range buf[:n] {
				if limit > 0 && len(out) >= limit {
					break
				}
				row++
				w := benchWhere{"row", row}
				rec, rerr := benchParquetRecord(r, leaves)
				var s Sample
				if rerr == nil {
					s, rerr = conv(rec, w)
				}
				if rerr != nil {
					rows.Close()
					return nil, fmt.Errorf("datasets: %s: %s: %w", path, w, rerr)
				}
				out = append(out, s)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("datasets: %s: row group %d: %w", path, g, err)
			}
		}
		rows.Close()
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out, nil
}

// benchStripListPath removes the LIST wrappers that parquet writers put
// around list elements ("list"/"element", "list"/"item", "bag"/
// "array_element") from a column path.
func benchStripListPath(p []string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if i+1 < len(p) && (p[i] == "list" && (p[i+1] == "element" || p[i+1] == "item") || p[i] == "bag" && p[i+1] == "array_element") {
			i++
			continue
		}
		out = append(out, p[i])
	}
	return out
}

// benchParquetRecord builds the record of one parquet row.
func benchParquetRecord(r parquet.Row, leaves map[int]benchLeaf) (benchRecord, error) {
	rec := benchRecord{}
	lists := map[int][]any{}
	for _, v := range r {
		leaf, ok := leaves[v.Column()]
		if !ok || len(leaf.path) == 0 {
			continue
		}
		if leaf.repeated {
			if _, seen := lists[v.Column()]; !seen {
				lists[v.Column()] = []any{}
			}
			if !v.IsNull() {
				lists[v.Column()] = append(lists[v.Column()], benchParquetValue(v))
			}
			continue
		}
		var x any
		if !v.IsNull() {
			x = benchParquetValue(v)
		}
		if err := benchSet(rec, leaf.path, x); err != nil {
			return nil, err
		}
	}
	for col, xs := range lists {
		if err := benchSet(rec, leaves[col].path, xs); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

func benchParquetValue(v parquet.Value) any {
	switch v.Kind() {
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return string(v.ByteArray())
	case parquet.Boolean:
		return v.Boolean()
	case parquet.Int32:
		return json.Number(strconv.FormatInt(int64(v.Int32()), 10))
	case parquet.Int64:
		return json.Number(strconv.FormatInt(v.Int64(), 10))
	case parquet.Float:
		return json.Number(strconv.FormatFloat(float64(v.Float()), 'g', -1, 32))
	case parquet.Double:
		return json.Number(strconv.FormatFloat(v.Double(), 'g', -1, 64))
	}
	return v.String()
}

// benchSet stores x at rec[path[0]][path[1]]..., making maps on the way.
func benchSet(rec benchRecord, path []string, x any) error {
	m := rec
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			if m[k] != nil {
				return fmt.Errorf("column %s is both a value and a group", strings.Join(path, "."))
			}
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = x
	return nil
}

// benchTypeName names a decoded JSON value's type for errors.
func benchTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// benchField returns rec's field name as text (numbers and booleans as
// written); a missing, null or empty field is an error when required.
func benchField(rec benchRecord, name string, required bool) (string, error) {
	v, ok := rec[name]
	var s string
	switch x := v.(type) {
	case nil:
		ok = false
	case string:
		s = x
	case json.Number:
		s = x.String()
	case bool:
		s = strconv.FormatBool(x)
	default:
		return "", fmt.Errorf("field %q is %s, want a string", name, benchTypeName(v))
	}
	if required && (!ok || strings.TrimSpace(s) == "") {
		if !ok {
			return "", fmt.Errorf("missing field %q", name)
		}
		return "", fmt.Errorf("field %q is empty", name)
	}
	return s, nil
}

// benchFields returns rec's required fields names as text (benchField),
// in order.
func benchFields(rec benchRecord, names ...string) ([]string, error) {
	vals := make([]string, len(names))
	for i, n := range names {
		v, err := benchField(rec, n, true)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

// benchStrings returns a list of strings, the value of field name.
func benchStrings(v any, name string) ([]string, error) {
	xs, ok := v.([]any)
	if !ok {
		if v == nil {
			return nil, fmt.Errorf("missing field %q", name)
		}
		return nil, fmt.Errorf("field %q is %s, want a list of strings", name, benchTypeName(v))
	}
	out := make([]string, len(xs))
	for i, x := range xs {
		switch x := x.(type) {
		case string:
			out[i] = x
		case json.Number:
			out[i] = x.String()
		default:
			return nil, fmt.Errorf("field %q element %d is %s, want a string", name, i, benchTypeName(x))
		}
	}
	return out, nil
}

// benchID returns "kind/id", id rec's optional field idField, or
// "kind/<line or row>" when id is empty.
func benchID(kind string, rec benchRecord, idField string, w benchWhere) string {
	id, _ := benchField(rec, idField, false)
	if id = strings.TrimSpace(id); id != "" {
		return kind + "/" + id
	}
	return kind + "/" + strconv.Itoa(w.n)
}

func benchGSM8K(rec benchRecord, w benchWhere) (Sample, error) {
	f, err := benchFields(rec, "question", "answer")
	if err != nil {
		return Sample{}, err
	}
	q, sol := f[0], f[1]
	i := strings.LastIndex(sol, "####")
	if i < 0 {
		return Sample{}, errors.New(`field "answer" has no "#### <number>" line`)
	}
	ans := benchGSM8KNumber(sol[i+len("####"):])
	if ans == "" {
		return Sample{}, errors.New(`field "answer" has nothing after "####"`)
	}
	return Sample{
		System: benchGSM8KSystem,
		User:   strings.TrimSpace(q),
		Answer: ans,
		ID:     benchID(BenchGSM8K, rec, "id", w),
	}, nil
}

// benchGSM8KNumber normalises a GSM8K number: white space trimmed,
// thousands separators and "$" removed.
func benchGSM8KNumber(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, ",", "")
	s = strings.ReplaceAll(s, "$", "")
	return strings.TrimSpace(s)
}

func benchARC(rec benchRecord, w benchWhere) (Sample, error) {
	var stem string
	var texts, labels []string
	var err error
	switch q := rec["question"].(type) {
	case map[string]any: // AllenAI: question.stem, question.choices
		if stem, err = benchField(q, "stem", true); err != nil {
			return Sample{}, fmt.Errorf("question: %w", err)
		}
		if texts, labels, err = benchARCChoices(q["choices"]); err != nil {
			return Sample{}, fmt.Errorf("question: %w", err)
		}
	default: // Hugging Face: question, choices
		if stem, err = benchField(rec, "question", true); err != nil {
			return Sample{}, err
		}
		if texts, labels, err = benchARCChoices(rec["choices"]); err != nil {
			return Sample{}, err
		}
	}
	key, err := benchField(rec, "answerKey", true)
	if err != nil {
		return Sample{}, err
	}
	key = strings.TrimSpace(key)
	if len(texts) < 2 || len(texts) > 5 {
		return Sample{}, fmt.Errorf("%d choices, want 2 to 5", len(texts))
	}
	answer := ""
	for i, l := range labels {
		if strings.TrimSpace(l) == key {
			answer = string(rune('A' + i))
		}
	}
	if answer == "" {
		return Sample{}, fmt.Errorf("answerKey %q is none of the choice labels %q", key, labels)
	}
	return Sample{
		System: benchARCSystem,
		User:   benchChoicesText(stem, texts),
		Answer: answer,
		ID:     benchID(BenchARC, rec, "id", w),
	}, nil
}

// benchARCChoices reads ARC choices as a list of {"text", "label"} objects
// (AllenAI) or as {"text": [...], "label": [...]} (Hugging Face). Labels may
// be letters or digits; choices are relabelled A, B, ... in their order.
func benchARCChoices(v any) (texts, labels []string, err error) {
	switch c := v.(type) {
	case nil:
		return nil, nil, errors.New(`missing field "choices"`)
	case []any:
		for i, x := range c {
			m, ok := x.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("choices element %d is %s, want an object {text, label}", i, benchTypeName(x))
			}
			t, err := benchField(m, "text", true)
			if err != nil {
				return nil, nil, fmt.Errorf("choices element %d: %w", i, err)
			}
			l, err := benchField(m, "label", true)
			if err != nil {
				return nil, nil, fmt.Errorf("choices element %d: %w", i, err)
			}
			texts, labels = append(texts, t), append(labels, l)
		}
	case map[string]any:
		if texts, err = benchStrings(c["text"], "choices.text"); err != nil {
			return nil, nil, err
		}
		if labels, err = benchStrings(c["label"], "choices.label"); err != nil {
			return nil, nil, err
		}
		if len(texts) != len(labels) {
			return nil, nil, fmt.Errorf("choices have %d texts and %d labels", len(texts), len(labels))
		}
	default:
		return nil, nil, fmt.Errorf("field \"choices\" is %s, want a list of {text, label} or {text: [...], label: [...]}", benchTypeName(v))
	}
	return texts, labels, nil
}

// benchChoicesText writes a question and its choices lettered A, B, ...
func benchChoicesText(stem string, choices []string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(stem))
	b.WriteString("\n")
	for i, c := range choices {
		fmt.Fprintf(&b, "\n%c. %s", 'A'+i, strings.TrimSpace(c))
	}
	return b.String()
}

func benchMATH500(rec benchRecord, w benchWhere) (Sample, error) {
	f, err := benchFields(rec, "problem", "answer")
	if err != nil {
		return Sample{}, err
	}
	p, a := f[0], benchStripDollars(f[1])
	if a == "" {
		return Sample{}, errors.New(`field "answer" is empty without its "$"`)
	}
	return Sample{
		System: benchMATH500System,
		User:   strings.TrimSpace(p),
		Answer: a,
		ID:     benchID(BenchMATH500, rec, "unique_id", w),
	}, nil
}

// benchStripDollars trims white space and surrounding "$" or "$$".
func benchStripDollars(s string) string {
	s = strings.TrimSpace(s)
	for len(s) >= 2 && s[0] == '$' && s[len(s)-1] == '$' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

func benchGPQA(rec benchRecord, w benchWhere) (Sample, error) {
	vals, err := benchFields(rec, "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
	if err != nil {
		return Sample{}, err
	}
	for i, v := range vals {
		vals[i] = strings.TrimSpace(v)
	}
	q := vals[0]
	perm := benchGPQAPerm(q)
	choices := make([]string, 4)
	answer := ""
	for slot, k := range perm { // choice slot shows answer k (0 = correct)
		choices[slot] = vals[1+k]
		if k == 0 {
			answer = string(rune('A' + slot))
		}
	}
	return Sample{
		System: benchGPQASystem,
		User:   benchChoicesText(q, choices),
		Answer: answer,
		ID:     benchID(BenchGPQA, rec, "Record ID", w),
	}, nil
}

// benchGPQAPerm returns the order in which a GPQA question shows its four
// answers (0 = the correct one), seeded by an FNV-1a hash of the question.
func benchGPQAPerm(question string) []int {
	h := fnv.New64a()
	h.Write([]byte(question))
	r := rand.New(rand.NewPCG(h.Sum64(), 0x67707161)) // "gpqa"
	return r.Perm(4)
}

// CheckBenchmarkAnswer reports whether a generated text answers a benchmark
// question correctly. It takes the text after "##" (ExtractAnswer) and
// compares it with the reference want by kind:
//
//	gsm8k    as numbers: commas, "$" and a final "." dropped, then the
//	         leading number compared by value (so "1,200.0" = "1200",
//	         "18 apples" = "18").
//	arc,gpqa the answer's first character, after "(" or "[", must be a
//	         letter A–E standing alone ("B", "b)", "(C) 42", not "Blue") and
//	         equal want's letter, without case.
//	math500  as strings after normalising both (benchMathNormalize): no white
//	         space, \left and \right, \! and spacing commands, surrounding
//	         "$", \boxed{…}, \text{…} and \mathrm{…} unwrapped, \dfrac and
//	         \tfrac as \frac. Equal values written differently ("0.5" and
//	         "\frac{1}{2}") do not match.
//
// Other kinds compare exactly, as CheckAnswer does.
func CheckBenchmarkAnswer(kind, generated, want string) bool {
	got, ok := ExtractAnswer(generated)
	if !ok {
		return false
	}
	switch kind {
	case BenchGSM8K:
		g, ok1 := benchLeadingNumber(got)
		w, ok2 := benchLeadingNumber(want)
		return ok1 && ok2 && g == w
	case BenchARC, BenchGPQA:
		g, ok1 := benchLetter(got)
		w, ok2 := benchLetter(want)
		return ok1 && ok2 && g == w
	case BenchMATH500:
		g := benchMathNormalize(got)
		return g != "" && g == benchMathNormalize(want)
	}
	return got == strings.TrimSpace(want)
}

var benchNumberRe = regexp.MustCompile(`^[-+]?(\d+\.?\d*|\.\d+)`)

// benchLeadingNumber returns the value of the number a text starts with,
// after dropping white space, commas and "$"; ok is false when there is none.
func benchLeadingNumber(s string) (float64, bool) {
	s = strings.Map(func(r rune) rune {
		if r == ',' || r == '$' || unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
	m := benchNumberRe.FindString(s)
	if m == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(m, "."), 64)
	return v, err == nil
}

// benchLetter returns the choice letter a text starts with, upper case.
func benchLetter(s string) (rune, bool) {
	s = strings.TrimLeft(strings.TrimSpace(s), "([ ")
	rs := []rune(s)
	if len(rs) == 0 {
		return 0, false
	}
	c := unicode.ToUpper(rs[0])
	if c < 'A' || c > 'E' {
		return 0, false
	}
	if len(rs) > 1 && (unicode.IsLetter(rs[1]) || unicode.IsDigit(rs[1])) {
		return 0, false
	}
	return c, true
}

// benchMathNormalize puts a MATH answer into a canonical string for comparison:
// surrounding "$" removed, \boxed{x}, \text{x}, \textbf{x}, \mathrm{x} and
// \mbox{x} replaced by x, \left, \right, \!, \, \; \: and "\ " removed,
// \dfrac and \tfrac written \frac, all white space and a final "." removed.
// It does not evaluate anything.
func benchMathNormalize(s string) string {
	s = benchStripDollars(s)
	for _, w := range []string{`\boxed`, `\text`, `\textbf`, `\mathrm`, `\mbox`} {
		s = benchUnwrap(s, w)
	}
	s = strings.NewReplacer(
		`\left`, "", `\right`, "",
		`\!`, "", `\,`, "", `\;`, "", `\:`, "", `\ `, "",
		`\dfrac`, `\frac`, `\tfrac`, `\frac`,
	).Replace(s)
	s = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
	s = strings.TrimSuffix(s, ".")
	return benchStripDollars(s)
}

// benchUnwrap replaces every cmd{x} in s by x (braces matched; cmd must not
// be followed by a letter, so \text does not match \textbf).
func benchUnwrap(s, cmd string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, cmd)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		rest := s[i+len(cmd):]
		j := len(rest) - len(strings.TrimLeft(rest, " "))
		if j >= len(rest) || rest[j] != '{' {
			// not a wrapper here (\textbf when unwrapping \text, or no brace)
			b.WriteString(s[:i+len(cmd)])
			s = rest
			continue
		}
		depth, end := 0, -1
		for k := j; k < len(rest); k++ {
			switch rest[k] {
			case '{':
				depth++
			case '}':
				depth--
			}
			if depth == 0 {
				end = k
				break
			}
		}
		if end < 0 { // unbalanced: leave the rest alone
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(rest[j+1 : end])
		s = rest[end+1:]
	}
}

// The shared system messages: an instruction to end with "## <answer>" and
// worked examples (written for dlmcache, not taken from the benchmarks), the
// same for every question of a benchmark, so that they form the cached
// prefix as the few-shot prompts of the paper's benchmarks do.
const (
	benchGSM8KSystem = `You solve grade-school math word problems. Reason step by step in a few short sentences, doing one calculation per sentence. Then write the final answer on a line of its own as "## <number>": digits only, no units, no commas, no dollar signs.

Example 1
Question: A baker makes 12 loaves of bread each hour. She works for 7 hours and then gives 9 loaves to a shelter. How many loaves does she have left?
Answer: In 7 hours she makes 12 * 7 = 84 loaves. After giving 9 away she has 84 - 9 = 75 loaves.
## 75

Example 2
Question: Tom buys 3 notebooks at $4 each and 2 pens at $1.50 each. He pays with a $20 bill. How much change does he get?
Answer: The notebooks cost 3 * 4 = 12 dollars. The pens cost 2 * 1.50 = 3 dollars. Together he spends 12 + 3 = 15 dollars. His change is 20 - 15 = 5 dollars.
## 5

Example 3
Question: A garden has 4 rows of tomato plants with 15 plants in each row. Each plant gives 6 tomatoes. Half of the tomatoes are sold. How many tomatoes are sold?
Answer: There are 4 * 15 = 60 plants. They give 60 * 6 = 360 tomatoes. Half of them is 360 / 2 = 180 tomatoes.
## 180

Example 4
Question: Maria reads 25 pages on Monday and twice as many on Tuesday. Her book has 120 pages. How many pages are left to read?
Answer: On Tuesday she reads 2 * 25 = 50 pages. Over both days she reads 25 + 50 = 75 pages. She has 120 - 75 = 45 pages left.
## 45

Solve the next question the same way and end with "## <number>".`

	benchARCSystem = `You answer grade-school science questions. Each question has lettered choices. Think briefly about which choice is correct, then write the letter of the correct choice on a line of its own as "## <letter>".

Example 1
Question: Which of these is a renewable source of energy?

A. coal
B. natural gas
C. wind
D. oil
Answer: Coal, natural gas and oil take millions of years to form, but wind keeps blowing.
## C

Example 2
Question: A student puts a metal spoon into a cup of hot soup. After a minute the handle of the spoon feels warm. How did the heat reach the handle?

A. by conduction through the metal
B. by radiation from the lamp
C. by convection in the air
D. by evaporation of the soup
Answer: Heat moved along the solid metal from the hot end to the handle, which is conduction.
## A

Example 3
Question: Which part of a plant takes in most of the water the plant needs?

A. flower
B. leaf
C. stem
D. root
Answer: Roots absorb water from the soil and the stem carries it up.
## D

Example 4
Question: What happens to a puddle of water on a sunny day?

A. It freezes.
B. It evaporates.
C. It condenses.
D. It melts.
Answer: The sun warms the water and it turns into water vapor.
## B

Answer the next question the same way and end with "## <letter>".`

	benchMATH500System = `You solve competition mathematics problems. Work through the problem step by step, keeping each step short. Then write the final answer on a line of its own as "## <answer>", in simplest form, in LaTeX without dollar signs and without \boxed: an integer, a reduced fraction such as \frac{3}{4}, a simplified radical such as 2\sqrt{3}, or an expression.

Example 1
Problem: What is the sum of all solutions of x^2 - 5x + 6 = 0?
Solution: The equation factors as (x - 2)(x - 3) = 0, so the solutions are 2 and 3. Their sum is 5.
## 5

Example 2
Problem: A fair six-sided die is rolled twice. What is the probability that the sum of the two rolls is 7?
Solution: There are 36 equally likely outcomes. The pairs with sum 7 are (1,6), (2,5), (3,4), (4,3), (5,2) and (6,1), six of them. The probability is 6/36 = 1/6.
## \frac{1}{6}

Example 3
Problem: Simplify \sqrt{48}.
Solution: Since 48 = 16 \cdot 3, we have \sqrt{48} = \sqrt{16}\sqrt{3} = 4\sqrt{3}.
## 4\sqrt{3}

Example 4
Problem: Find the remainder when 2^{10} is divided by 7.
Solution: Powers of 2 modulo 7 repeat with period 3: 2, 4, 1. Since 10 = 3 \cdot 3 + 1, 2^{10} has the same remainder as 2^1, which is 2.
## 2

Solve the next problem the same way and end with "## <answer>".`

	benchGPQASystem = `You answer graduate-level multiple-choice questions in biology, physics and chemistry. Each question has four choices, A to D, and exactly one is correct. Reason carefully but briefly, then write the letter of the correct choice on a line of its own as "## <letter>".

Example 1
Question: A particle of mass m moves in a circle of radius r at constant speed v. What is the magnitude of the net force on it?

A. m v r
B. m v^2 / r
C. m v / r^2
D. 0
Answer: Uniform circular motion needs a centripetal force of magnitude m v^2 / r.
## B

Example 2
Question: Which enzyme joins Okazaki fragments on the lagging strand during DNA replication?

A. helicase
B. primase
C. DNA ligase
D. topoisomerase
Answer: Helicase unwinds, primase lays down primers, topoisomerase relieves supercoiling; DNA ligase seals the nicks between fragments.
## C

Example 3
Question: What is the hybridization of the carbon atoms in ethyne, HC≡CH?

A. sp
B. sp2
C. sp3
D. sp3d
Answer: Each carbon forms one sigma bond to H and one sigma plus two pi bonds to the other carbon, so it has two electron domains and is sp hybridized.
## A

Example 4
Question: The half-life of a radioactive isotope is 8 days. What fraction of a sample remains after 24 days?

A. 1/3
B. 1/4
C. 1/6
D. 1/8
Answer: 24 days are three half-lives, so (1/2)^3 = 1/8 of the sample remains.
## D

Answer the next question the same way and end with "## <letter>".`
)
