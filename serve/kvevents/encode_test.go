package kvevents

import (
	"bytes"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/dlmcache/dlmcache/cache"
)

// fixture joins hand-written bytes: hex for msgpack's type bytes and
// numbers (each piece's comment says which), and 'text' for the raw bytes
// of a string's body, whose header byte is written in hex before it.
func fixture(t *testing.T, pieces ...string) []byte {
	t.Helper()
	var b []byte
	for _, p := range pieces {
		if s, ok := strings.CutPrefix(p, "'"); ok {
			b = append(b, strings.TrimSuffix(s, "'")...)
			continue
		}
		h, err := hex.DecodeString(strings.ReplaceAll(p, " ", ""))
		if err != nil {
			t.Fatalf("fixture piece %q: %v", p, err)
		}
		b = append(b, h...)
	}
	return b
}

// The events of the fixtures: two stored blocks (a first block, so no
// parent, whose extra keys hold a cache_salt), one removed, a clear.
var fixtureEvents = []Event{
	{Type: "BlockStored", BlockHashes: []cache.Key{0x0102030405060708, 0xfffffffffffffffe}, TokenIDs: []int32{1, 200, 300, 70000},
		BlockSize: 2, ExtraKeys: [][]string{{"salt"}, nil}},
	{Type: "BlockRemoved", BlockHashes: []cache.Key{0xfffffffffffffffe}},
	{Type: "AllBlocksCleared"},
}

// The array layout byte for byte, from the msgpack spec: fixarray 0x9N,
// fixmap 0x8N, fixstr 0xa0|len (0xb0… past 15), float64 0xcb, uint8 0xcc,
// uint16 0xcd, uint32 0xce, int64 0xd3, nil 0xc0. Every hash is a 9-byte
// int64 however small: 0xfffffffffffffffe is −2, which a compact encoder
// writes as the negative fixint 0xfe that llm-d's decoder rejects.
func TestEncodeArrayLayout(t *testing.T) {
	want := fixture(t,
		"93",                        // batch: array of 3
		"cb 3ff8000000000000",       // ts 1.5
		"93",                        // 3 events
		"99", "ab", "'BlockStored'", // array of 9, fixstr 11
		"92 d3 0102030405060708 d3 fffffffffffffffe", // block_hashes: int64, −2
		"c0",                              // parent_block_hash nil
		"94 01 cc c8 cd 012c ce 00011170", // token_ids 1, 200, 300, 70000
		"02",                              // block_size
		"c0",                              // lora_id
		"a3", "'GPU'",                     // medium
		"c0",                       // lora_name
		"92 91 a4", "'salt'", "c0", // extra_keys [["salt"], nil]
		"93", "ac", "'BlockRemoved'", "91 d3 fffffffffffffffe", "a3", "'GPU'",
		"91", "b0", "'AllBlocksCleared'",
		"00", // data_parallel_rank
	)
	wantEncoded(t, "array layout", Array, want)
}

// wantEncoded: fixtureEvents encoded in layout l at ts 1.5 are want.
func wantEncoded(t *testing.T, what string, l Layout, want []byte) {
	t.Helper()
	got, err := Encode(l, 1.5, fixtureEvents, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s:\n got %x\nwant %x", what, got, want)
	}
}

// The tagged-map layout byte for byte: the batch the same array of ts,
// events and data_parallel_rank (as vLLM writes it); each event a map
// whose first key is "type".
func TestEncodeMapLayout(t *testing.T) {
	want := fixture(t,
		"93", "cb 3ff8000000000000",
		"93",
		"89", "a4", "'type'", "ab", "'BlockStored'",
		"ac", "'block_hashes'", "92 d3 0102030405060708 d3 fffffffffffffffe",
		"b1", "'parent_block_hash'", "c0",
		"a9", "'token_ids'", "94 01 cc c8 cd 012c ce 00011170",
		"aa", "'block_size'", "02",
		"a7", "'lora_id'", "c0",
		"a6", "'medium'", "a3", "'GPU'",
		"a9", "'lora_name'", "c0",
		"aa", "'extra_keys'", "92 91 a4", "'salt'", "c0",
		"83", "a4", "'type'", "ac", "'BlockRemoved'", "ac", "'block_hashes'", "91 d3 fffffffffffffffe", "a6", "'medium'", "a3", "'GPU'",
		"81", "a4", "'type'", "b0", "'AllBlocksCleared'",
		"00",
	)
	wantEncoded(t, "map layout", Map, want)
}

// Without extra keys a BlockStored ends at lora_name (8 fields), as
// vLLM's encoder leaves a field at its default out; a parent is written.
func TestEncodeWithoutExtraKeys(t *testing.T) {
	ev := []Event{{Type: "BlockStored", BlockHashes: []cache.Key{5}, Parent: 4, HasParent: true, TokenIDs: []int32{7}, BlockSize: 1, ExtraKeys: [][]string{nil}}}
	want := fixture(t, "93", "cb 3ff8000000000000", "91",
		"98", "ab", "'BlockStored'", "91 d3 0000000000000005", "d3 0000000000000004", "91 07", "01", "c0", "a3", "'GPU'", "c0",
		"03")
	got, err := Encode(Array, 1.5, ev, 3)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("got %x (%v)\nwant %x", got, err, want)
	}
}

// Store events become vLLM's: a chain of stored blocks one BlockStored
// (its first block's parent, every block's tokens, the salt in the first
// block's extra keys and, for a bidirectional model, the partial-depth
// marker in every block's), a run of removals one BlockRemoved.
func TestEventsCoalesce(t *testing.T) {
	in := []cache.KVEvent{
		{Type: "stored", Key: 1, TokenIDs: []int32{10, 11}, CacheSalt: "s"},
		{Type: "stored", Key: 2, ParentKey: 1, HasParent: true, TokenIDs: []int32{12, 13}, CacheSalt: "s"},
		{Type: "stored", Key: 9, ParentKey: 7, HasParent: true, TokenIDs: []int32{14, 15}},
		{Type: "removed", Key: 2}, {Type: "removed", Key: 9},
		{Type: "cleared"},
		{Type: "removed", Key: 1},
	}
	got := Events(in, 2, true, ExtraAll)
	if len(got) != 5 {
		t.Fatalf("%d events: %+v", len(got), got)
	}
	a := got[0]
	if a.Type != "BlockStored" || !slices.Equal(a.BlockHashes, []cache.Key{1, 2}) || a.HasParent || !slices.Equal(a.TokenIDs, []int32{10, 11, 12, 13}) ||
		a.BlockSize != 2 || len(a.ExtraKeys) != 2 || !slices.Equal(a.ExtraKeys[0], []string{"s", PartialDepthKey}) || !slices.Equal(a.ExtraKeys[1], []string{PartialDepthKey}) {
		t.Errorf("first: %+v", a)
	}
	if b := got[1]; !b.HasParent || b.Parent != 7 || !slices.Equal(b.BlockHashes, []cache.Key{9}) {
		t.Errorf("second: %+v", b)
	}
	if r := got[2]; r.Type != "BlockRemoved" || !slices.Equal(r.BlockHashes, []cache.Key{2, 9}) {
		t.Errorf("removed: %+v", r)
	}
	if got[3].Type != "AllBlocksCleared" || got[4].Type != "BlockRemoved" {
		t.Errorf("order: %+v", got[3:])
	}
	if e := Events(in[:1], 2, false, ExtraAll); e[0].ExtraKeys[0][0] != "s" || len(e[0].ExtraKeys[0]) != 1 {
		t.Errorf("causal store: %+v", e)
	}
}

// --kv-events-extra-keys: salt keeps vLLM's cache_salt and drops the
// partial-depth marker; none writes no extra keys (so no extra_keys field).
func TestEventsExtraKeys(t *testing.T) {
	in := []cache.KVEvent{
		{Type: "stored", Key: 1, TokenIDs: []int32{10, 11}, CacheSalt: "s"},
		{Type: "stored", Key: 2, ParentKey: 1, HasParent: true, TokenIDs: []int32{12, 13}, CacheSalt: "s"},
	}
	salt := Events(in, 2, true, ExtraSalt)
	if len(salt) != 1 || !slices.Equal(salt[0].ExtraKeys[0], []string{"s"}) || salt[0].ExtraKeys[1] != nil {
		t.Errorf("salt: %+v", salt)
	}
	none := Events(in, 2, true, ExtraNone)
	if len(none) != 1 || none[0].ExtraKeys[0] != nil || none[0].ExtraKeys[1] != nil {
		t.Errorf("none: %+v", none)
	}
	b, err := Encode(Array, 1, none, 0)
	if err != nil || bytes.Contains(b, []byte("partial")) || b[11] != 0x98 {
		t.Errorf("none encoded %x (%v): want an 8-field BlockStored", b, err)
	}
	for _, s := range []string{"all", "salt", "none"} {
		if x, err := ParseExtraKeys(s); err != nil || x.String() != s {
			t.Errorf("ParseExtraKeys(%q) = %v, %v", s, x, err)
		}
	}
	if _, err := ParseExtraKeys("some"); err == nil {
		t.Error("ParseExtraKeys(some): no error")
	}
}
