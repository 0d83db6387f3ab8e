#!/usr/bin/env python3
"""Python overhead per streamed token vs the C++ decode time.

    build/bin/sitsrt make-model --dim 1024 --layers 24 --heads 16 --kv-heads 8 --ffn 2816 \\
        --vocab 32000 --type q8_0 -o build/models/bench-0.35b-q8_0.gguf
    PYTHONPATH=build/python build/pyenv/bin/python benchmarks/bench_python.py build/models/bench-0.35b-q8_0.gguf

For each repeat it runs the same greedy request twice: generate() (the C++ loop; its own
decode_seconds is the reference) and stream() consumed by a Python for-loop, timing the interval
between the first and the last event on the Python side. Overhead = streamed interval per token /
C++ decode time per token - 1 (median of repeats, after a warm-up). The streamed request's own
C++ decode time is printed too: the consumer runs beside the decode thread, so what matters is
whether it slows the producer down.
"""
import argparse
import statistics
import time

import sitsrt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    engine = sitsrt.Engine(args.model, threads=args.threads)
    opts = dict(max_tokens=args.tokens, temperature=0, stop_at_eos=False)
    engine.generate("Once upon a time", **dict(opts, max_tokens=4))  # warm-up
    n = args.tokens
    cpp, streamed, streamed_cpp = [], [], []
    for _ in range(args.repeats):
        r = engine.generate("Once upon a time", **opts)
        cpp.append(r.timings.decode_seconds / (r.timings.generated_tokens - 1))
        request = engine.stream("Once upon a time", **opts)
        stamps = [time.perf_counter() for _ in request]
        streamed.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
        t = request.result().timings
        streamed_cpp.append(t.decode_seconds / (t.generated_tokens - 1))
    c, s, sc = (statistics.median(x) for x in (cpp, streamed, streamed_cpp))
    print(f"model {args.model}, {n} tokens, {engine.info['threads']} threads, median of {args.repeats}")
    print(f"{'C++ decode per token (generate)':45s} {c * 1e3:9.3f} ms")
    print(f"{'C++ decode per token (inside stream)':45s} {sc * 1e3:9.3f} ms")
    print(f"{'Python-observed interval per streamed token':45s} {s * 1e3:9.3f} ms")
    print(f"{'overhead vs generate':45s} {100 * (s / c - 1):+8.2f} %   (goal <= 5 %)")


if __name__ == "__main__":
    main()
