"""Next-token logits as a NumPy array [positions, vocab] (zero-copy), and a softmax over them.

    python examples/python/numpy_logits.py ../shared/models/stories260K.gguf
"""
import sys

import numpy as np

import sitsrt

engine = sitsrt.Engine(sys.argv[1])
tokens = engine.tokenize("Once upon a time")
logits = engine.logits(tokens)  # float32, shape (len(tokens), vocab)
print(logits.shape, logits.dtype)
probs = np.exp(logits[-1] - logits[-1].max())
probs /= probs.sum()
for i in np.argsort(probs)[::-1][:5]:
    print(f"{engine.detokenize([int(i)])!r:12} {probs[i]:.3f}")
# The perplexity of the prompt under the model:
logp = logits[:-1] - np.log(np.exp(logits[:-1]).sum(axis=1, keepdims=True))
print("perplexity:", float(np.exp(-logp[np.arange(len(tokens) - 1), tokens[1:]].mean())))
