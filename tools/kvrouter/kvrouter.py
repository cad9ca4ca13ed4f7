#!/usr/bin/python3
"""A cache-aware router written from vLLM's published KV-event schema
(vllm/distributed/kv_events.py), not from dlmcache's Go: it subscribes to
the KV-event ZMQ PUB sockets of several replicas, rebuilds each replica's
tree of cached blocks from BlockStored / BlockRemoved / AllBlocksCleared
events (and from the replay ROUTER socket at start and after a gap), and
routes a request to the replica holding the longest cached prefix of its
token blocks, as llm-d's precise prefix-cache scorer does: block keys are
recomputed from the events' token ids (chained over the parent block's key
and the block's extra keys), so the router's block size must equal the
engines'; the engines' own hashes serve only to find a block's parent and
what a BlockRemoved removes.

Wire format read here (vLLM):
  frames   [topic, sequence (8 bytes big-endian), msgpack payload]
  batch    [ts, [event...], data_parallel_rank]  or  {"ts","events","data_parallel_rank"}
  events   ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
            lora_id, medium, lora_name?, extra_keys?, ...]      (positional)
           {"type": "BlockStored", "block_hashes": ..., ...}     (tagged map)
           ["BlockRemoved", block_hashes, medium, ...] / ["AllBlocksCleared"]
  replay   send [b"", start sequence (8 bytes big-endian)] to the ROUTER; receive
           [b"", sequence, payload] per held batch, then [b"", -1, b""].

Debian's python3-zmq and python3-msgpack only; run with /usr/bin/python3.
"""

import hashlib
import json
import struct
import threading
import urllib.request

import msgpack
import zmq

END = -1
STORED_FIELDS = ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                 "lora_id", "medium", "lora_name", "extra_keys", "group_idx"]
REMOVED_FIELDS = ["block_hashes", "medium", "group_idx"]


def decode_event(ev):
    """An event, in either layout, as (type, {field: value})."""
    if isinstance(ev, dict):
        return ev.get("type"), ev
    kind, rest = ev[0], ev[1:]
    names = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS}.get(kind, [])
    return kind, dict(zip(names, rest))


def decode_batch(payload):
    """A payload as (ts, [events], data_parallel_rank)."""
    b = msgpack.unpackb(payload, raw=False)
    if isinstance(b, dict):
        return b.get("ts"), b.get("events", []), b.get("data_parallel_rank")
    return b[0], b[1], (b[2] if len(b) > 2 else None)


def norm_hash(h):
    """An engine hash (int of either sign, or bytes) as an unsigned 64-bit int."""
    if isinstance(h, bytes):
        return int.from_bytes(h[-8:], "big")
    return h & 0xFFFFFFFFFFFFFFFF


def block_key(parent, tokens, extra):
    """The router's own chained key of a block (llm-d hashes in its own way;
    any deterministic chain over the same inputs routes the same)."""
    h = hashlib.sha256()
    h.update(parent)
    h.update(struct.pack("<%di" % len(tokens), *tokens))
    h.update(json.dumps(extra or [], separators=(",", ":")).encode())
    return h.digest()[:16]


ROOT = b"\0" * 16

# Extra keys that describe a replica's block, not a request's: left out
# of the router's keys (dlmcache marks a bidirectional model's blocks so).
DESCRIPTIVE = {"dlmcache:partial-depth"}


def request_keys(tokens, block_size, cache_salt=""):
    """The router keys of a request's full blocks."""
    keys, parent = [], ROOT
    for i in range(len(tokens) // block_size):
        extra = [cache_salt] if (i == 0 and cache_salt) else []
        parent = block_key(parent, tokens[i * block_size:(i + 1) * block_size], extra)
        keys.append(parent)
    return keys


class Replica:
    """One engine's block tree as its events describe it."""

    def __init__(self, name, events, replay, http, block_size):
        self.name, self.events, self.replay, self.http = name, events, replay, http
        self.block_size = block_size
        self.by_engine = {}  # engine hash -> router key
        self.keys = {}       # router key -> engine hash
        self.partial = set()
        self.next_seq = 0
        self.applied = 0
        self.gaps = 0

    def apply_events(self, events):
        for ev in events:
            kind, f = decode_event(ev)
            if kind == "BlockStored":
                bs = f["block_size"]
                if bs != self.block_size:
                    raise ValueError("%s: block_size %d, the router hashes in %d" % (self.name, bs, self.block_size))
                ph = f.get("parent_block_hash")
                parent = ROOT if ph is None else self.by_engine.get(norm_hash(ph))
                if parent is None:
                    continue  # a parent this router never saw: unusable
                toks, extras = f["token_ids"], f.get("extra_keys") or []
                for i, h in enumerate(f["block_hashes"]):
                    extra = extras[i] if i < len(extras) and extras[i] else []
                    marks = [x for x in extra if x in DESCRIPTIVE]
                    extra = [x for x in extra if x not in DESCRIPTIVE]
                    parent = block_key(parent, toks[i * bs:(i + 1) * bs], extra)
                    eh = norm_hash(h)
                    self.by_engine[eh], self.keys[parent] = parent, eh
                    if marks:
                        self.partial.add(parent)
            elif kind == "BlockRemoved":
                for h in f["block_hashes"]:
                    k = self.by_engine.pop(norm_hash(h), None)
                    if k is not None:
                        self.keys.pop(k, None)
                        self.partial.discard(k)
            elif kind == "AllBlocksCleared":
                self.by_engine.clear()
                self.keys.clear()
                self.partial.clear()
            self.applied += 1

    def apply(self, seq, payload):
        if seq < self.next_seq:
            return
        _, events, _ = decode_batch(payload)
        self.apply_events(events)
        self.next_seq = seq + 1

    def prefix_blocks(self, keys):
        n = 0
        for k in keys:
            if k not in self.keys:
                break
            n += 1
        return n


class Router:
    """Subscribes to every replica; route() picks one per request."""

    def __init__(self, replicas, block_size, ctx=None):
        self.ctx = ctx or zmq.Context.instance()
        self.block_size = block_size
        self.replicas = [Replica(r["name"], r["events"], r.get("replay"), r["http"], block_size) for r in replicas]
        self.lock = threading.Lock()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.by_topic = {}
        for r in self.replicas:
            self.sub.connect(r.events)
        self.stop = False

    def replay_from(self, r, start):
        """Everything the replica's replay socket holds from start on."""
        if not r.replay:
            return 0
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.RCVTIMEO, 10000)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(r.replay)
        d.send_multipart([b"", struct.pack(">Q", start)])
        n = 0
        while True:
            frames = d.recv_multipart()
            seq = struct.unpack(">q", frames[-2])[0]
            if seq == END:
                break
            r.apply(seq, frames[-1])
            n += 1
        d.close()
        return n

    def recover(self):
        """Rebuild every replica's tree from its replay socket (a start or a restart)."""
        with self.lock:
            for r in self.replicas:
                self.replay_from(r, r.next_seq)

    def poll(self, timeout_ms=0):
        """Apply the batches waiting on the SUB socket; replay a gap."""
        n = 0
        while self.sub.poll(timeout_ms):
            timeout_ms = 0
            topic, seqb, payload = self.sub.recv_multipart()
            seq = struct.unpack(">Q", seqb)[0]
            with self.lock:
                r = self.replica_of(topic.decode())
                if r is None:
                    continue
                if seq > r.next_seq:
                    r.gaps += 1
                    self.replay_from(r, r.next_seq)
                r.apply(seq, payload)
            n += 1
        return n

    def replica_of(self, topic):
        # kv@POD@MODEL: the pod address names the replica.
        if topic in self.by_topic:
            return self.by_topic[topic]
        pod = topic.split("@")[1] if topic.count("@") >= 2 else topic
        for r in self.replicas:
            if r.name == pod:
                self.by_topic[topic] = r
                return r
        return None

    def scores(self, tokens, cache_salt=""):
        keys = request_keys(tokens, self.block_size, cache_salt)
        with self.lock:
            return [r.prefix_blocks(keys) * self.block_size for r in self.replicas]

    def route(self, tokens, n, cache_salt=""):
        """The replica with the longest cached prefix; ties go round robin
        by the request's number n."""
        s = self.scores(tokens, cache_salt)
        best = max(s)
        ties = [i for i, v in enumerate(s) if v == best]
        return ties[n % len(ties)], best

    def close(self):
        self.sub.close(0)


def http_json(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def tokenize(http, messages):
    return http_json(http + "/tokenize", {"messages": messages})["tokens"]
