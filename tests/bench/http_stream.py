#!/usr/bin/env python3
"""http_stream.py - streamed completions through an OpenAI-compatible HTTP
server (cpd-http, llama-server, ...), N concurrent streams: total tok/s,
time to first token and inter-token gaps.

Each stream sends R requests one after the other to POST /v1/completions
with "stream": true, "temperature": 0 and "max_tokens": G; its prompt is a
few words naming the stream, repeated to about P words, so no two streams
share a prefix.  A token is a server-sent event whose choice carries
non-empty text.  Standard library only, one thread per stream.

usage: http_stream.py URL [-c N] [-r R] [-g G] [-p P] [--json]
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def pct(xs, q):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def one_request(url, prompt, gen, out):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": gen,
                       "temperature": 0, "stream": True})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body,
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:200]))
    times = []
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        ch = ev.get("choices") or []
        if ch and ch[0].get("text"):
            times.append(time.monotonic())
    conn.close()
    if times:
        out["ttft"].append(times[0] - t0)
        out["itl"].extend(b - a for a, b in zip(times, times[1:]))
    out["tokens"] += len(times)


def stream(url, i, reps, gen, words, out, errors):
    base = "Stream %d tells a story about the sea and the sky." % i
    prompt = " ".join([base] * max(1, words // len(base.split())))
    try:
        for _ in range(reps):
            one_request(url, prompt, gen, out)
    except Exception as e:  # reported, and the run fails
        errors.append("stream %d: %s" % (i, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("-c", type=int, default=16, help="streams")
    ap.add_argument("-r", type=int, default=2, help="requests per stream")
    ap.add_argument("-g", type=int, default=64, help="tokens per request")
    ap.add_argument("-p", type=int, default=40, help="prompt words")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    outs = [{"ttft": [], "itl": [], "tokens": 0} for _ in range(a.c)]
    errors = []
    threads = [threading.Thread(target=stream, args=(a.url, i, a.r, a.g,
                                a.p, outs[i], errors)) for i in range(a.c)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ttft = [x for o in outs for x in o["ttft"]]
    itl = [x for o in outs for x in o["itl"]]
    tokens = sum(o["tokens"] for o in outs)
    res = {"url": a.url, "streams": a.c, "requests": a.c * a.r,
           "tokens": tokens, "wall_s": round(wall, 3),
           "tok_s": round(tokens / wall, 1),
           "ttft_p50_ms": round(pct(ttft, 0.5) * 1e3, 1),
           "ttft_p99_ms": round(pct(ttft, 0.99) * 1e3, 1),
           "itl_p50_ms": round(pct(itl, 0.5) * 1e3, 2),
           "itl_p99_ms": round(pct(itl, 0.99) * 1e3, 2),
           "errors": errors}
    if a.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print("%-12s %s" % (k, v))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
