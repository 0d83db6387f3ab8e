"""Many Python threads sharing one engine (the GIL is released while generating), and asyncio.

    python examples/python/batch_threads.py ../shared/models/stories260K.gguf
"""
import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

import sitsrt

engine = sitsrt.Engine(sys.argv[1])
prompts = [f"Once upon a time, a {animal}" for animal in ("cat", "dog", "bird", "fish", "frog", "bear", "fox", "owl")]

with ThreadPoolExecutor(max_workers=8) as pool:
    for prompt, result in zip(prompts, pool.map(lambda p: engine.generate(p, max_tokens=24, seed=0), prompts)):
        print(f"{prompt}{result.text}")

# submit() returns at once; result() waits.
handles = [engine.submit(p, max_tokens=24, seed=0) for p in prompts]
print(sum(len(h.result().tokens) for h in handles), "tokens from submitted requests")


async def main():
    results = await asyncio.gather(*(engine.agenerate(p, max_tokens=24, seed=0) for p in prompts))
    print(sum(len(r.tokens) for r in results), "tokens from asyncio")

asyncio.run(main())
