"""Greedy generation with per-token log-probabilities.

    python examples/python/generate.py ../shared/models/stories260K.gguf "Once upon a time"
"""
import sys

import sitsrt

model, prompt = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "Once upon a time"
engine = sitsrt.Engine(model)
result = engine.generate(prompt, max_tokens=32, temperature=0, logprobs=3)
print(prompt + result.text)
for event in result.events[:5]:
    alternatives = ", ".join(f"{engine.detokenize([i])!r}:{lp:.2f}" for i, lp in event.top)
    print(f"{event.index:3d} {event.text!r:12} logprob {event.logprob:6.3f}  top: {alternatives}")
print(f"{result.finish_reason}, {result.timings.decode_tokens_per_second:.1f} tok/s")
