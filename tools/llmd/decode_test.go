package llmd

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	lkv "github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"

	"github.com/dlmcache/dlmcache/cache"
	"github.com/dlmcache/dlmcache/serve/kvevents"
)

// Hashes of every msgpack integer size class a compact encoder would
// pick: positive fixint, uint8/16/32, int8/16/32, and full 64-bit values
// of both signs.
var hashes = []cache.Key{0, 5, 200, 70000, 1 << 40, cache.Key(math.MaxUint64 - 1), cache.Key(1<<64 - 100), cache.Key(1<<64 - 40000),
	cache.Key(1<<64 - 1<<33), 0x0102030405060708, 0xfedcba9876543210}

func events() []kvevents.Event {
	return []kvevents.Event{
		{Type: "BlockStored", BlockHashes: hashes[:4], TokenIDs: []int32{1, 200, 300, 70000, 5, 6, 7, 8}, BlockSize: 2,
			ExtraKeys: [][]string{{"salt"}, nil, nil, nil}},
		{Type: "BlockStored", BlockHashes: hashes[4:], HasParent: true, Parent: hashes[3],
			TokenIDs: make([]int32, 2*len(hashes[4:])), BlockSize: 2},
		{Type: "BlockRemoved", BlockHashes: hashes},
		{Type: "AllBlocksCleared"},
	}
}

// llm-d's vLLM adapter reads every event of a dlmcache batch, in both
// layouts, with every field as written: hashes of every size, the parent,
// the tokens, the block size, the medium and the extra keys.
func TestLLMDAdapterDecodes(t *testing.T) {
	a := engineadapter.NewVLLMAdapter()
	for _, l := range []kvevents.Layout{kvevents.Array, kvevents.Map} {
		payload, err := kvevents.Encode(l, 1.5, events(), 0)
		if err != nil {
			t.Fatal(err)
		}
		pod, model, b, err := a.ParseMessage(&lkv.RawMessage{Topic: "kv@10.0.0.1:8000@llada-tiny", Sequence: 7, Payload: payload})
		if err != nil {
			t.Fatalf("%v layout: llm-d rejects the batch: %v", l, err)
		}
		if pod != "10.0.0.1:8000" || model != "llada-tiny" || b.Timestamp != 1.5 || len(b.Events) != 4 {
			t.Fatalf("%v layout: pod %q model %q ts %v, %d events", l, pod, model, b.Timestamp, len(b.Events))
		}
		want := make([]uint64, len(hashes))
		for i, h := range hashes {
			want[i] = uint64(h)
		}
		s0, ok := b.Events[0].(*lkv.BlockStoredEvent)
		if !ok || !slices.Equal(s0.BlockHashes, want[:4]) || s0.ParentHash != 0 || s0.BlockSize != 2 || s0.DeviceTier != "GPU" ||
			!slices.Equal(s0.Tokens, []uint32{1, 200, 300, 70000, 5, 6, 7, 8}) || len(s0.ExtraKeys) != 4 || len(s0.ExtraKeys[0]) != 1 ||
			s0.ExtraKeys[0][0] != "salt" || s0.ExtraKeys[1] != nil || s0.LoraID != nil || s0.LoraName != nil {
			t.Errorf("%v layout: first BlockStored %+v", l, b.Events[0])
		}
		s1, ok := b.Events[1].(*lkv.BlockStoredEvent)
		if !ok || !slices.Equal(s1.BlockHashes, want[4:]) || s1.ParentHash != uint64(hashes[3]) || s1.ExtraKeys != nil {
			t.Errorf("%v layout: second BlockStored %+v", l, b.Events[1])
		}
		if r, ok := b.Events[2].(*lkv.BlockRemovedEvent); !ok || !slices.Equal(r.BlockHashes, want) || r.DeviceTier != "GPU" {
			t.Errorf("%v layout: BlockRemoved %+v", l, b.Events[2])
		}
		if _, ok := b.Events[3].(*lkv.AllBlocksClearedEvent); !ok {
			t.Errorf("%v layout: AllBlocksCleared %+v", l, b.Events[3])
		}
	}
}

// The encoding dlmcache wrote before: a hash in msgpack's most compact
// integer form. llm-d's adapter takes a hash only as a 64-bit integer (or
// bytes), so a batch with one small hash (here 5, a positive fixint) is
// rejected whole. dlmcache's encoder must never write that form.
func TestLLMDRejectsCompactHashes(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.EncodeArrayLen(3)           //nolint:errcheck // a bytes.Buffer
	enc.EncodeFloat64(1.5)          //nolint:errcheck
	enc.EncodeArrayLen(1)           //nolint:errcheck
	enc.EncodeArrayLen(5)           //nolint:errcheck
	enc.EncodeString("BlockStored") //nolint:errcheck
	enc.EncodeArrayLen(1)           //nolint:errcheck
	enc.EncodeInt(5)                //nolint:errcheck // compact: 0x05
	enc.EncodeNil()                 //nolint:errcheck
	enc.EncodeArrayLen(0)           //nolint:errcheck
	enc.EncodeInt(2)                //nolint:errcheck
	enc.EncodeInt(0)                //nolint:errcheck
	_, _, _, err := engineadapter.NewVLLMAdapter().ParseMessage(&lkv.RawMessage{Topic: "kv@p@m", Payload: buf.Bytes()})
	if err == nil {
		t.Fatal("llm-d accepted a compact hash: the 9-byte int64 form may no longer be needed")
	}
	payload, err := kvevents.Encode(kvevents.Array, 1.5, []kvevents.Event{{Type: "BlockStored", BlockHashes: []cache.Key{5}, BlockSize: 2}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(payload, []byte{0x91, 0xd3, 0, 0, 0, 0, 0, 0, 0, 5}) {
		t.Errorf("dlmcache wrote hash 5 as %x, not as the 9-byte int64 d3 0000000000000005", payload)
	}
	if _, _, _, err := engineadapter.NewVLLMAdapter().ParseMessage(&lkv.RawMessage{Topic: "kv@p@m", Payload: payload}); err != nil {
		t.Errorf("llm-d rejects dlmcache's hash 5: %v", err)
	}
}
