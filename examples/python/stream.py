"""Streams tokens as they are generated; stops early after a given number of characters.

    python examples/python/stream.py ../shared/models/stories260K.gguf
"""
import sys

import sitsrt

engine = sitsrt.Engine(sys.argv[1])
request = engine.stream("Once upon a time", max_tokens=200, temperature=0.8, seed=1)
chars = 0
for event in request:
    print(event.text, end="", flush=True)
    chars += len(event.text)
    if chars > 300:
        request.cancel()  # the generation stops after the token in flight
print(f"\n[{request.result().finish_reason}]")
