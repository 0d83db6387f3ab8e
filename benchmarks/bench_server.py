"""Load test of `sitsrt serve` through the openai client: at each concurrency level, that many
client threads each send `--requests` streamed completions (a fixed prompt, `--max-tokens`
greedy tokens) back to back; reports aggregate generated tokens/s over the level's wall time,
time to first token and inter-token latency P50/P95, against the single-stream level. Timings
never gate anything; the table is for notes.

    python benchmarks/bench_server.py -m MODEL [--bin build/bin/sitsrt] [--concurrency 1,16] [--json]
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

from openai import OpenAI

PROMPT = ("The history of the city goes back a long way. In the early days, the river was the centre of trade, "
          "and merchants came from far away to sell their goods. Over the years")


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_level(client, model, concurrency, requests, max_tokens):
    ttft, itl, tokens = [], [], [0]
    lock = threading.Lock()

    def worker():
        for _ in range(requests):
            start = time.perf_counter()
            last = None
            n = 0
            first = None
            gaps = []
            for chunk in client.completions.create(model=model, prompt=PROMPT, max_tokens=max_tokens, temperature=0,
                                                   stream=True, stream_options={"include_usage": True}):
                now = time.perf_counter()
                if chunk.choices and chunk.choices[0].text:
                    if first is None:
                        first = now - start
                    elif last is not None:
                        gaps.append(now - last)
                    last = now
                if chunk.usage is not None:
                    n = chunk.usage.completion_tokens
            with lock:
                tokens[0] += n
                if first is not None:
                    ttft.append(first)
                itl.extend(gaps)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - begin
    return {"concurrency": concurrency, "requests": concurrency * requests, "generated_tokens": tokens[0],
            "wall_s": wall, "aggregate_tokens_per_s": tokens[0] / wall,
            "ttft_p50_s": percentile(ttft, 0.5), "ttft_p95_s": percentile(ttft, 0.95),
            "itl_p50_ms": 1e3 * percentile(itl, 0.5), "itl_p95_ms": 1e3 * percentile(itl, 0.95)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--bin", default="build/bin/sitsrt")
    parser.add_argument("-t", "--threads", default="2")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--requests", type=int, default=4, help="requests per client thread")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("serve_args", nargs="*", help="more `sitsrt serve` options (after --)")
    args = parser.parse_args()
    proc = subprocess.Popen([args.bin, "serve", "-m", args.model, "--port", "0", "-t", args.threads,
                             "--max-concurrent-requests", "256", *args.serve_args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            sys.exit(f"sitsrt serve did not start: {line!r} {proc.stderr.read()}")
        url, model = line.split()[2], line.split("'")[1]
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0)  # warm-up
        levels = [run_level(client, model, int(c), args.requests, args.max_tokens)
                  for c in args.concurrency.split(",")]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    single = levels[0]["aggregate_tokens_per_s"]
    for level in levels:
        level["x_single"] = level["aggregate_tokens_per_s"] / single
    if args.json:
        print(json.dumps({"model": args.model, "max_tokens": args.max_tokens, "levels": levels}, indent=2))
        return
    print(f"sitsrt serve load test: {args.model}, {args.max_tokens} greedy tokens per request, streamed")
    print("| clients | requests | tok/s | x single | TTFT p50 / p95 | ITL p50 / p95 |")
    print("|---|---|---|---|---|---|")
    for lv in levels:
        print(f"| {lv['concurrency']} | {lv['requests']} | {lv['aggregate_tokens_per_s']:.1f} | {lv['x_single']:.2f} | "
              f"{lv['ttft_p50_s']:.2f} / {lv['ttft_p95_s']:.2f} s | {lv['itl_p50_ms']:.1f} / {lv['itl_p95_ms']:.1f} ms |")


if __name__ == "__main__":
    main()
