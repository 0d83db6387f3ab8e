"""Audit: a Python sink and a hash-chained JSONL log (HMAC), then verify and replay the log.

    python examples/python/audit_verify.py ../shared/models/stories260K.gguf /tmp/audit.jsonl
"""
import sys

import sitsrt
import sitsrt.audit


class LowConfidence(sitsrt.audit.Sink):
    """Prints tokens the model was unsure about (runs on the generating thread: keep it short)."""

    def on_token(self, request_id, event):
        if event.logprob < -2.0:
            print(f"  [{request_id}] token {event.index} {event.text!r} logprob {event.logprob:.2f}")


model, log = sys.argv[1], sys.argv[2]
engine = sitsrt.Engine(model, deterministic=True, audit=[log, LowConfidence()], audit_key=b"secret")
for prompt in ("Once upon a time", "The little dog"):
    print(prompt + engine.generate(prompt, max_tokens=32, temperature=0.9, seed=42).text)
del engine  # writes and closes the log

report = sitsrt.audit.verify(log, key=b"secret")
print("verify:", "clean" if report else f"{report.problem} at {report.file}:{report.line}: {report.message}",
      f"({report.records} records)")
for outcome in sitsrt.audit.replay(log, model):
    print("replay:", outcome.request_id, outcome.message)
