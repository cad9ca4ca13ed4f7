package datasets

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlmcache/dlmcache/internal/testutil"
	"github.com/parquet-go/parquet-go"
)

// WildChat-1M's layout (a subset of its columns, plus one it does not have,
// so that unknown columns are known to be ignored).
type wildchatTestTurn struct {
	Content        string `parquet:"content"`
	Country        string `parquet:"country"`
	Language       string `parquet:"language"`
	Redacted       bool   `parquet:"redacted"`
	Role           string `parquet:"role"`
	Toxic          bool   `parquet:"toxic"`
	TurnIdentifier int64  `parquet:"turn_identifier"`
}

type wildchatTestRow struct {
	ConversationHash string             `parquet:"conversation_hash"`
	Model            string             `parquet:"model"`
	Timestamp        time.Time          `parquet:"timestamp"`
	Conversation     []wildchatTestTurn `parquet:"conversation,list"`
	Turn             int64              `parquet:"turn"`
	Language         string             `parquet:"language"`
	Toxic            bool               `parquet:"toxic"`
	Redacted         bool               `parquet:"redacted"`
	Extra            string             `parquet:"extra_column"`
}

// A conversation stored as a plain repeated group (no LIST annotation),
// keyed by conversation_id.
type wildchatTestPlainRow struct {
	ConversationID string `parquet:"conversation_id"`
	Conversation   []struct {
		Role    string `parquet:"role"`
		Content string `parquet:"content"`
	} `parquet:"conversation"`
}

func wildchatTestTurns(pairs ...string) []wildchatTestTurn {
	var out []wildchatTestTurn
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, wildchatTestTurn{Role: pairs[i], Content: pairs[i+1], Language: "English", Country: "Nowhere", TurnIdentifier: int64(i)})
	}
	return out
}

func wildchatTestRows() []wildchatTestRow {
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	rows := []wildchatTestRow{
		{ConversationHash: "h0", Conversation: wildchatTestTurns("user", "What is the capital of France?", "assistant", "Paris."), Language: "English"},
		{ConversationHash: "h1", Conversation: wildchatTestTurns("assistant", "Hello!", "user", "  Write a haiku about rain.  ", "user", "second user turn"), Language: "English"},
		{ConversationHash: "h2", Conversation: func() []wildchatTestTurn {
			t := wildchatTestTurns("user", "Bonjour, comment ça va ?")
			t[0].Language = "French"
			return t
		}(), Language: "French"},
		{ConversationHash: "h3", Conversation: wildchatTestTurns("user", "toxic text here"), Language: "English", Toxic: true},
		{ConversationHash: "h4", Conversation: func() []wildchatTestTurn {
			t := wildchatTestTurns("user", "My name is [REDACTED]")
			t[0].Redacted = true
			return t
		}(), Language: "English"},
		{ConversationHash: "h5", Conversation: nil, Language: "English"},
		{ConversationHash: "h6", Conversation: wildchatTestTurns("assistant", "only the assistant"), Language: "English"},
		{ConversationHash: "h7", Conversation: wildchatTestTurns("user", "What is the capital of France?"), Language: "English"},
		{ConversationHash: "h8", Conversation: wildchatTestTurns("user", "Explain "+strings.Repeat("very ", 200)+"long things."), Language: "English"},
	}
	for i := range rows {
		rows[i].Model = "gpt-4"
		rows[i].Timestamp = ts
		rows[i].Turn = int64(len(rows[i].Conversation))
		rows[i].Extra = "x"
	}
	return rows
}

// writeWildChatTest writes rows to dir/name with tiny row groups and pages,
// so that reading crosses row group and page boundaries.
func writeWildChatTest[T any](t *testing.T, dir, name string, rows []T) string {
	t.Helper()
	return writeParquetTest(t, dir, name, rows, parquet.MaxRowsPerRowGroup(4), parquet.PageBufferSize(64))
}

// writeParquetTest writes rows to dir/name with the writer options opts and
// returns the path.
func writeParquetTest[T any](t *testing.T, dir, name string, rows []T, opts ...parquet.WriterOption) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, opts...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func wildchatIDs(ps []Prompt) []string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids
}

func TestReadWildChat(t *testing.T) {
	dir := t.TempDir()
	path := writeWildChatTest(t, dir, "train-0.parquet", wildchatTestRows())
	for _, tc := range []struct {
		name   string
		filter WildChatFilter
		want   []string
	}{
		{"default", WildChatFilter{}, []string{"h0", "h1", "h2", "h8"}},
		{"english", WildChatFilter{Language: "english"}, []string{"h0", "h1", "h8"}},
		{"french", WildChatFilter{Language: "French"}, []string{"h2"}},
		{"toxic kept", WildChatFilter{KeepToxic: true}, []string{"h0", "h1", "h2", "h3", "h8"}},
		{"redacted kept", WildChatFilter{KeepRedacted: true}, []string{"h0", "h1", "h2", "h4", "h8"}},
		{"duplicates", WildChatFilter{KeepDuplicates: true}, []string{"h0", "h1", "h2", "h7", "h8"}},
		{"min chars", WildChatFilter{MinChars: 27}, []string{"h0", "h8"}},
		{"max chars", WildChatFilter{MaxChars: 30}, []string{"h0", "h1", "h2"}},
		{"limit", WildChatFilter{Limit: 2}, []string{"h0", "h1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadWildChat([]string{path}, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if ids := wildchatIDs(got); !reflect.DeepEqual(ids, tc.want) {
				t.Errorf("ids = %v, want %v", ids, tc.want)
			}
		})
	}
	got, err := ReadWildChat([]string{path}, WildChatFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Prompt{
		{ID: "h0", Text: "What is the capital of France?", Language: "English", Source: path},
		{ID: "h1", Text: "Write a haiku about rain.", Language: "English", Source: path},
		{ID: "h2", Text: "Bonjour, comment ça va ?", Language: "French", Source: path},
	}
	if !reflect.DeepEqual(got[:3], want) {
		t.Errorf("prompts = %+v, want %+v", got[:3], want)
	}
}

func TestReadWildChatStats(t *testing.T) {
	dir := t.TempDir()
	path := writeWildChatTest(t, dir, "a.parquet", wildchatTestRows())
	st, _, err := ReadWildChatStats([]string{path}, WildChatFilter{Language: "English", MaxChars: 500})
	if err != nil {
		t.Fatal(err)
	}
	want := WildChatStats{Path: path, Rows: 9, Kept: 2, NoUser: 2, Language: 1, Long: 1, Toxic: 1, Redacted: 1, Duplicate: 1}
	if len(st) != 1 || st[0] != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
}

func TestReadWildChatDirAndPlainList(t *testing.T) {
	dir := t.TempDir()
	writeWildChatTest(t, dir, "b.parquet", wildchatTestRows()[:2])
	plain := []wildchatTestPlainRow{{ConversationID: "p0"}, {ConversationID: "p1"}}
	plain[0].Conversation = append(plain[0].Conversation, struct {
		Role    string `parquet:"role"`
		Content string `parquet:"content"`
	}{"user", "plain layout prompt"})
	writeWildChatTest(t, dir, "a.parquet", plain)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadWildChat([]string{dir}, WildChatFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if ids, want := wildchatIDs(got), []string{"p0", "h0", "h1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	if got[0].Language != "" || got[0].Text != "plain layout prompt" {
		t.Errorf("plain prompt = %+v", got[0])
	}
}

func TestReadWildChatErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeWildChatTest(t, dir, "good.parquet", wildchatTestRows())
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.parquet")
	if err := os.WriteFile(truncated, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "text.parquet")
	if err := os.WriteFile(text, []byte("conversation_hash,conversation\nh0,hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.parquet")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	noConv := writeWildChatTest(t, dir, "noconv.parquet", []struct {
		Hash string `parquet:"conversation_hash"`
		Text string `parquet:"text"`
	}{{"h", "hello"}})
	flat := writeWildChatTest(t, dir, "flat.parquet", []struct {
		Conversation string `parquet:"conversation"`
	}{{"hello"}})
	noRole := writeWildChatTest(t, dir, "norole.parquet", []struct {
		Conversation []struct {
			Content string `parquet:"content"`
		} `parquet:"conversation,list"`
	}{{}})
	intContent := writeWildChatTest(t, dir, "intcontent.parquet", []struct {
		Conversation []struct {
			Content int64  `parquet:"content"`
			Role    string `parquet:"role"`
		} `parquet:"conversation,list"`
	}{{}})
	structConv := writeWildChatTest(t, dir, "struct.parquet", []struct {
		Conversation struct {
			Content string `parquet:"content"`
			Role    string `parquet:"role"`
		} `parquet:"conversation"`
	}{{}})
	boolToxic := writeWildChatTest(t, dir, "toxicstring.parquet", []struct {
		Conversation []struct {
			Content string `parquet:"content"`
			Role    string `parquet:"role"`
			Toxic   string `parquet:"toxic"`
		} `parquet:"conversation,list"`
	}{{}})
	noRows := writeWildChatTest(t, dir, "norows.parquet", []wildchatTestRow{})
	for _, tc := range []struct {
		name   string
		paths  []string
		filter WildChatFilter
		want   []string // substrings of the error
	}{
		{"truncated", []string{truncated}, WildChatFilter{}, []string{truncated, "not a readable parquet file"}},
		{"text", []string{text}, WildChatFilter{}, []string{text, "not a readable parquet file"}},
		{"empty", []string{empty}, WildChatFilter{}, []string{empty, "not a readable parquet file"}},
		{"missing", []string{filepath.Join(dir, "nope.parquet")}, WildChatFilter{}, []string{"nope.parquet"}},
		{"no conversation", []string{noConv}, WildChatFilter{}, []string{noConv, "no conversation column", "conversation_hash, text"}},
		{"flat conversation", []string{flat}, WildChatFilter{}, []string{flat, "conversation has type STRING"}},
		{"no role", []string{noRole}, WildChatFilter{}, []string{noRole, "no role field"}},
		{"int content", []string{intContent}, WildChatFilter{}, []string{intContent, "content has type INT64, want BYTE_ARRAY"}},
		{"struct conversation", []string{structConv}, WildChatFilter{}, []string{structConv, "0 lists deep"}},
		{"string toxic", []string{boolToxic}, WildChatFilter{}, []string{boolToxic, "toxic has type BYTE_ARRAY, want BOOLEAN"}},
		{"no rows", []string{noRows}, WildChatFilter{}, []string{"no usable WildChat prompt", noRows + ": 0 rows"}},
		{"all filtered", []string{good, noRows}, WildChatFilter{Language: "Klingon"}, []string{"no usable WildChat prompt", good + ": 9 rows, 0 kept", "other language 7"}},
		{"bad filter", []string{good}, WildChatFilter{MinChars: 10, MaxChars: 5}, []string{"length filter"}},
		{"no paths", nil, WildChatFilter{}, []string{"no WildChat files"}},
		{"empty dir", []string{t.TempDir()}, WildChatFilter{}, []string{"no *.parquet file"}},
		{"good then bad", []string{good, truncated}, WildChatFilter{}, []string{truncated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadWildChat(tc.paths, tc.filter)
			testutil.ErrorSays(t, err, tc.want...)
		})
	}
}

// Reading whole conversations: exchanges pair each user message with the
// assistant's reply, rows with too few user turns or too many characters
// are dropped and counted.
func TestReadWildChatConversations(t *testing.T) {
	rows := []wildchatTestRow{
		{ConversationHash: "c0", Language: "English", Conversation: wildchatTestTurns("user", "first?", "assistant", "one.", "user", "second?", "assistant", "two.", "user", "third?")},
		{ConversationHash: "c1", Language: "English", Conversation: wildchatTestTurns("user", "only one", "assistant", "reply")},
		{ConversationHash: "c2", Language: "English", Conversation: wildchatTestTurns("user", "a", "user", "b", "assistant", "c")},
		{ConversationHash: "c3", Language: "English", Conversation: wildchatTestTurns("user", "long", "assistant", strings.Repeat("x", 500), "user", "more")},
	}
	path := writeWildChatTest(t, t.TempDir(), "conv.parquet", rows)
	st, ps, err := ReadWildChatStats([]string{path}, WildChatFilter{MinTurns: 2, MaxConversationChars: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got := wildchatIDs(ps); !slices.Equal(got, []string{"c0", "c2"}) {
		t.Fatalf("kept %v, want c0 c2", got)
	}
	want := []Turn{{"first?", "one."}, {"second?", "two."}, {"third?", ""}}
	if !slices.Equal(ps[0].Exchanges, want) {
		t.Errorf("c0 exchanges %+v, want %+v", ps[0].Exchanges, want)
	}
	if want := []Turn{{"a", ""}, {"b", "c"}}; !slices.Equal(ps[1].Exchanges, want) {
		t.Errorf("c2 exchanges %+v, want %+v", ps[1].Exchanges, want)
	}
	if st[0].FewTurns != 1 || st[0].Long != 1 || !strings.Contains(st[0].String(), "too few turns 1") {
		t.Errorf("stats %+v", st[0])
	}
	// Without MinTurns, no conversation is read.
	if ps, err := ReadWildChat([]string{path}, WildChatFilter{}); err != nil || ps[0].Exchanges != nil {
		t.Errorf("first turns only: %v, %+v", err, ps)
	}
	if _, err := ReadWildChat([]string{path}, WildChatFilter{MinTurns: -1}); err == nil {
		t.Error("negative MinTurns: no error")
	}
}
