#!/usr/bin/env python3
"""Replays a JSON Lines request set (dlmcache lut verify --dump-requests) through a
running `dlmcache serve` and prints accuracy, the per-request answers and the
server's prefix-store counters. Standard library only.

    bin/dlmcache lut verify TABLE --dump-requests reqs.jsonl
    bin/dlmcache serve --lut TABLE --addr 127.0.0.1:8099 &
    python3 scripts/serve_replay.py http://127.0.0.1:8099 reqs.jsonl answers.json
"""
import json
import sys
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def metric(page, name):
    for line in page.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def main():
    base, path = sys.argv[1], sys.argv[2]
    out = sys.argv[3] if len(sys.argv) > 3 else None
    reqs = [json.loads(l) for l in open(path) if l.strip()]
    correct, answers = 0, []
    for r in reqs:
        res = post(base + "/v1/chat/completions", {"messages": [
            {"role": "system", "content": r["system"]}, {"role": "user", "content": r["user"]}]})
        text = res["choices"][0]["message"]["content"]
        got = text.split("##", 1)[1].strip() if "##" in text else None
        ok = got == r.get("answer", "").strip()
        correct += ok
        answers.append({"text": text, "correct": ok, "depth": res["dlmcache"]["depth"], "hit": res["dlmcache"]["prefix_hit"]})
    page = urllib.request.urlopen(base + "/metrics").read().decode()
    print(json.dumps({
        "requests": len(reqs), "correct": correct, "accuracy": correct / len(reqs),
        "prefix_hit_tokens": metric(page, "dlmcache_prefix_cache_hits_tokens_total"),
        "prefix_query_tokens": metric(page, "dlmcache_prefix_cache_queries_tokens_total"),
        "requests_with_hit": sum(a["hit"] for a in answers),
        "mean_depth": sum(a["depth"] for a in answers) / len(answers),
    }, indent=2))
    if out:
        with open(out, "w") as f:
            json.dump(answers, f, indent=1)


if __name__ == "__main__":
    main()
