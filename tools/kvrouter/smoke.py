#!/usr/bin/python3
"""Two (or more) `dlmcache serve` replicas with --kv-events on loopback and
the router of kvrouter.py in front: the same interleaved traffic (system
messages x questions) routed by longest cached prefix and round robin, each
on fresh replicas. Prints the share of prompt tokens found in the chosen
replica's store (usage.prompt_tokens_details.cached_tokens), whether the
router's trees agree with the replicas' /metrics (blocks held), and
whether a router restarted mid-run (tree rebuilt from the replay sockets)
takes the same decisions.

  /usr/bin/python3 tools/kvrouter/smoke.py --bin /tmp/dlmcache --model models/llada-tiny-block
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvrouter  # noqa: E402

TOPICS = ["harbour", "library", "bakery", "railway", "observatory", "vineyard", "pharmacy", "museum",
          "brewery", "lighthouse", "orchard", "foundry", "theatre", "archive", "dairy", "mill",
          "quarry", "tannery", "weather station", "post office"]
FACTS = ["opens at {a} and closes at {b}", "keeps {a} ledgers and {b} maps", "was founded in {a} by {b} families",
         "charges {a} coins a day and {b} a week", "has {a} rooms on {b} floors", "employs {a} clerks and {b} guards"]
QUESTIONS = ["When does it open?", "How many rooms does it have?", "Who founded it?", "What does it charge?"]


def system_message(i):
    rnd = random.Random(i)
    t = TOPICS[i % len(TOPICS)]
    facts = " ".join("The %s %s." % (t, rnd.choice(FACTS).format(a=rnd.randint(2, 90), b=rnd.randint(2, 90))) for _ in range(6))
    return "You are clerk number %d of the %s. %s Answer in one short sentence." % (i, t, facts)


def metric(http, name):
    with urllib.request.urlopen(http + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def start(args, k):
    port, ev, rp = args.port + 10 * k, args.port + 10 * k + 1, args.port + 10 * k + 2
    cmd = [args.bin, "serve", "--model", args.model, "--addr", "127.0.0.1:%d" % port, "--quiet",
           "--cache-bytes", str(args.cache_bytes), "--kv-events", "tcp://127.0.0.1:%d" % ev,
           "--kv-events-replay", "tcp://127.0.0.1:%d" % rp, "--kv-events-pod", "127.0.0.1:%d" % port,
           "--kv-events-layout", args.layout, "--max-concurrency", "1", "--max-batch", "1"] + args.serve_args
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open("/tmp/kvrouter-replica-%d.log" % k, "w"))
    http = "http://127.0.0.1:%d" % port
    for _ in range(300):
        try:
            models = kvrouter.http_json(http + "/v1/models")
            return p, {"name": "127.0.0.1:%d" % port, "events": "tcp://127.0.0.1:%d" % ev,
                       "replay": "tcp://127.0.0.1:%d" % rp, "http": http}, models["data"][0]["block_size"]
        except OSError:
            time.sleep(0.1)
    raise SystemExit("replica %d did not start: /tmp/kvrouter-replica-%d.log" % (k, k))


def sync(router, r):
    """Poll until the router applied every batch replica r published."""
    want = metric(r.http, "dlmcache_kv_events_sequence")
    for _ in range(500):
        if r.next_seq >= want:
            return
        router.poll(20)
    raise SystemExit("%s: published %d batches, the router applied %d" % (r.name, want, r.next_seq))


def run(args, policy, traffic):
    procs, reps, bs = [], [], None
    for k in range(args.replicas):
        p, rep, bs = start(args, k)
        procs.append(p)
        reps.append(rep)
    try:
        router = kvrouter.Router(reps, bs)
        time.sleep(0.5)  # the subscriptions
        router.recover()
        shadow, agree, compared = None, 0, 0
        prompt = cached = 0
        for n, (sysmsg, q) in enumerate(traffic):
            router.poll(0)
            msgs = [{"role": "system", "content": sysmsg}, {"role": "user", "content": q}]
            toks = kvrouter.tokenize(reps[0]["http"], msgs)
            if policy == "prefix":
                i, _ = router.route(toks, n)
                if shadow is not None:
                    shadow.poll(0)
                    compared += 1
                    agree += shadow.route(toks, n)[0] == i
            else:
                i = n % len(reps)
            resp = kvrouter.http_json(reps[i]["http"] + "/v1/chat/completions",
                                      {"messages": msgs, "max_tokens": args.max_tokens, "temperature": 0})
            prompt += resp["usage"]["prompt_tokens"]
            cached += resp["usage"]["prompt_tokens_details"]["cached_tokens"]
            sync(router, router.replicas[i])
            if shadow is not None:
                sync(shadow, shadow.replicas[i])
            if policy == "prefix" and args.restart and n == len(traffic) // 2:
                # A router restarted mid-run: its trees from the replay sockets alone.
                shadow = kvrouter.Router(reps, bs)
                time.sleep(0.3)
                shadow.recover()
                same = all(a.keys == b.keys for a, b in zip(router.replicas, shadow.replicas))
                print("  restart at request %d: trees rebuilt from replay %s" % (n + 1, "equal" if same else "DIFFER"))
        agreement = []
        for r in router.replicas:
            held = metric(r.http, "dlmcache_prefix_cache_entries")
            ev = metric(r.http, "dlmcache_prefix_cache_evictions_total")
            drops = metric(r.http, "dlmcache_kv_events_dropped_total")
            agreement.append((r.name, len(r.keys), int(held), int(ev), int(drops), r.gaps))
        result = {"policy": policy, "requests": len(traffic), "prompt_tokens": prompt, "cached_tokens": cached,
                  "share": cached / prompt, "replicas": agreement}
        if compared:
            result["restart_agreement"] = (agree, compared)
        router.close()
        if shadow:
            shadow.close()
        return result
    finally:
        for p in procs:
            p.terminate()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="/tmp/dlmcache")
    ap.add_argument("--model", default="models/llada-tiny-block")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--systems", type=int, default=40)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--cache-bytes", type=int, default=16 << 20)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--layout", default="array")
    ap.add_argument("--port", type=int, default=18100)
    ap.add_argument("--restart", action="store_true", default=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dump-traffic", action="store_true",
                    help="print the traffic as JSON lines [system, question] and exit (tools/llmd's kvroute reads it)")
    ap.add_argument("serve_args", nargs="*", help="more dlmcache serve flags (after --)")
    args = ap.parse_args()
    traffic = [(system_message(i), QUESTIONS[j]) for i in range(args.systems) for j in range(args.questions)]
    random.Random(args.seed).shuffle(traffic)  # interleaved arrivals
    if args.dump_traffic:
        for t in traffic:
            print(json.dumps(t))
        return
    for policy in ("prefix", "round-robin"):
        t0 = time.time()
        r = run(args, policy, traffic)
        print("%-12s %d requests: %d of %d prompt tokens cached (%.1f%%), %.0f s" % (
            policy, r["requests"], r["cached_tokens"], r["prompt_tokens"], 100 * r["share"], time.time() - t0))
        for name, believed, held, ev, drops, gaps in r["replicas"]:
            print("  %s: router believes %d blocks, /metrics holds %d (%s); %d evictions, %d batches dropped, %d gaps replayed" % (
                name, believed, held, "agree" if believed == held else "DIFFER", ev, drops, gaps))
        if "restart_agreement" in r:
            a, c = r["restart_agreement"]
            print("  restarted router: %d of %d later decisions the same" % (a, c))


if __name__ == "__main__":
    main()
