#!/usr/bin/python3
"""The router's decoding and tree, on batches packed here with msgpack
from vLLM's schema (both layouts): /usr/bin/python3 tools/kvrouter/test_kvrouter.py"""

import os
import sys
import unittest

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvrouter  # noqa: E402


def stored(layout, hashes, parent, tokens, bs, extra=None):
    if layout == "map":
        ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
              "block_size": bs, "lora_id": None, "medium": "GPU", "lora_name": None}
        if extra is not None:
            ev["extra_keys"] = extra
        return ev
    ev = ["BlockStored", hashes, parent, tokens, bs, None, "GPU", None]
    return ev + [extra] if extra is not None else ev


def batch(layout, events):
    if layout == "map":
        return msgpack.packb({"ts": 1.5, "events": events, "data_parallel_rank": 0})
    return msgpack.packb([1.5, events, 0])


class TestRouter(unittest.TestCase):
    def test_both_layouts(self):
        for layout in ("array", "map"):
            r = kvrouter.Replica("a", None, None, None, 2)
            r.apply(0, batch(layout, [stored(layout, [-2, 5], None, [1, 2, 3, 4], 2, [["salt"], ["dlmcache:partial-depth"]])]))
            r.apply(1, batch(layout, [stored(layout, [7], 5, [5, 6], 2)]))
            keys = kvrouter.request_keys([1, 2, 3, 4, 5, 6, 9], 2, "salt")
            self.assertEqual(r.prefix_blocks(keys), 3, layout)
            self.assertEqual(r.prefix_blocks(kvrouter.request_keys([1, 2, 3, 4], 2)), 0, layout)  # no salt
            self.assertEqual(len(r.partial), 1)
            removed = {"type": "BlockRemoved", "block_hashes": [5], "medium": "GPU"} if layout == "map" else ["BlockRemoved", [5], "GPU"]
            r.apply(2, batch(layout, [removed]))
            self.assertEqual(r.prefix_blocks(keys), 1, layout)
            r.apply(3, batch(layout, [{"type": "AllBlocksCleared"} if layout == "map" else ["AllBlocksCleared"]]))
            self.assertEqual(len(r.keys), 0)
            self.assertEqual(r.next_seq, 4)

    def test_unsigned_and_signed_hashes_agree(self):
        self.assertEqual(kvrouter.norm_hash(-2), 0xFFFFFFFFFFFFFFFE)
        self.assertEqual(kvrouter.norm_hash(b"\x00" * 24 + b"\xff" * 7 + b"\xfe"), 0xFFFFFFFFFFFFFFFE)

    def test_block_size_must_match(self):
        r = kvrouter.Replica("a", None, None, None, 4)
        with self.assertRaises(ValueError):
            r.apply(0, batch("array", [stored("array", [1], None, [1, 2], 2)]))


if __name__ == "__main__":
    unittest.main()
