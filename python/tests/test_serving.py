"""The serving core's options from Python: K/V element types, scheduler limits, tenant quotas
(the request's `tenant=`), and what queue_stats() and info report of them."""

import threading
import time

import pytest

import sitsrt


class _Order(sitsrt.audit.Sink):
    """Appends `tag` to `events` for every token of its request (then calls `then`, if given)."""
    _lock = threading.Lock()

    def __init__(self, events, tag, then=None):
        self.events, self.tag, self.then = events, tag, then

    def on_token(self, request_id, event):
        with self._lock:
            self.events.append(self.tag)
        if self.then:
            self.then()


def test_serving_limits_reach_queue_stats(model_path):
    engine = sitsrt.Engine(model_path, threads=1, ctx=128, max_num_seqs=3, max_num_batched_tokens=48,
                           kv_block_size=8, kv_pool_tokens=512, preemption="swap", prefix_caching=False,
                           tenant_max_seqs=2, tenant_max_kv_blocks=40, reject_over_quota=True)
    q = engine.queue_stats()
    assert (q["max_num_seqs"], q["max_num_batched_tokens"], q["kv_block_size"], q["kv_pool_tokens"]) == (3, 48, 8, 512)
    assert (q["preemption"], q["prefix_caching"], q["reject_over_quota"]) == ("swap", False, True)
    assert (q["tenant_max_seqs"], q["tenant_max_kv_blocks"]) == (2, 40)
    assert q["kv_blocks"] == 512 // 8 and q["kv_blocks_free"] == q["kv_blocks"]
    assert len(engine.generate("Once upon a time", max_tokens=6, stop_at_eos=False).tokens) == 6
    assert engine.queue_stats()["finished"] == 1


def test_device_graphs_option_and_counters(model_path):
    # The CPU backend replays no graphs; the option is accepted either way and type-checked.
    for graphs in (True, False):
        engine = sitsrt.Engine(model_path, threads=1, ctx=64, device_graphs=graphs)
        assert len(engine.generate("Once upon a time", max_tokens=4, stop_at_eos=False).tokens) == 4
        q = engine.queue_stats()
        assert (q["device_graph_captures"], q["device_graph_replays"]) == (0, 0)
        assert all(q[f"device_{k}_matmuls"] == 0 for k in ("prefill_fp8", "prefill_bf16", "decode_tensor_core",
                                                           "decode_cuda_core"))
        assert (q["device_prefill_tiled_attentions"], q["device_prefill_row_attentions"],
                q["device_prefill_fp8_activation_reuses"], q["device_prefill_fp8_block_matmuls"]) == (0, 0, 0, 0)
    with pytest.raises(TypeError):
        sitsrt.Engine(model_path, threads=1, device_graphs="yes")


def test_k_and_v_types_apart(model_path):
    base = sitsrt.Engine(model_path, threads=1, kv_dtype="f32")
    mixed = sitsrt.Engine(model_path, threads=1, k_dtype="int8", v_dtype="int4")
    assert (mixed.info["k_cache_type"], mixed.info["v_cache_type"]) == ("int8", "int4")
    assert (base.info["k_cache_type"], base.info["v_cache_type"]) == ("f32", "f32")
    # int8 keys and int4 values: about 0.23x f32's bytes; the greedy text starts the same.
    assert mixed.info["kv_pool_bytes"] < base.info["kv_pool_bytes"] / 4
    a = base.generate("Once upon a time", max_tokens=8, temperature=0, stop_at_eos=False)
    b = mixed.generate("Once upon a time", max_tokens=8, temperature=0, stop_at_eos=False)
    assert a.tokens[:2] == b.tokens[:2]
    assert mixed.info["kv_cache_type"] == "k=int8+hadamard+centered,v=int4+hadamard,recent=32"
    uncentered = sitsrt.Engine(model_path, threads=1, k_dtype="int8", v_dtype="int4", kv_centering=False)
    assert uncentered.info["kv_cache_type"] == "k=int8+hadamard,v=int4+hadamard,recent=32"
    plain = sitsrt.Engine(model_path, threads=1, kv_dtype="int8", kv_hadamard=False, kv_centering=False,
                          kv_recent_window=0)
    assert plain.info["kv_cache_type"] == "int8"
    windowed = sitsrt.Engine(model_path, threads=1, kv_dtype="int8", kv_hadamard=False, kv_centering=False,
                             kv_recent_window=8)
    assert windowed.info["kv_cache_type"] == "k=int8,v=int8,recent=8"


@pytest.mark.parametrize("kwargs, error", [
    ({"k_dtype": "int3"}, ValueError),
    ({"v_dtype": "bf16"}, ValueError),
    ({"preemption": "drop"}, ValueError),
    ({"max_num_seqs": 0}, ValueError),
    ({"max_num_seqs": 2.0}, TypeError),
    ({"kv_block_size": 0}, ValueError),
    ({"kv_pool_tokens": -1}, ValueError),
    ({"tenant_max_seqs": -1}, ValueError),
    ({"prefix_caching": "yes"}, TypeError),
    ({"reject_over_quota": 1}, TypeError),
    ({"kv_hadamard": None}, TypeError),
    ({"kv_centering": None}, TypeError),
])
def test_bad_serving_options_are_refused(model_path, kwargs, error):
    with pytest.raises(error):
        sitsrt.Engine(model_path, threads=1, **kwargs)


def test_tenant_quota_rejects_with_the_numbers_and_spares_other_tenants(model_path):
    # 16-position blocks and at most 2 per tenant: a 40-token prompt needs 3.
    engine = sitsrt.Engine(model_path, threads=1, tenant_max_kv_blocks=2, reject_over_quota=True)
    prompt = list(range(1, 41))
    with pytest.raises(sitsrt.RejectedError, match=r"tenant 'acme'.*3 KV blocks.*quota of 2"):
        engine.generate(prompt, max_tokens=4, tenant="acme")
    assert engine.queue_stats()["rejected"] == 1
    assert len(engine.generate(prompt[:20], max_tokens=4, stop_at_eos=False, tenant="acme").tokens) == 4
    assert len(engine.generate("Once", max_tokens=4, stop_at_eos=False, tenant="other").tokens) == 4


def test_tenant_seq_quota_lets_one_tenant_run_at_a_time(model_path):
    engine = sitsrt.Engine(model_path, threads=1, tenant_max_seqs=1)
    events = []  # (tenant, index) in the order tokens arrive
    handles = [engine.submit("Once upon a time", max_tokens=12, stop_at_eos=False, tenant="t",
                             audit=_Order(events, ("t", i))) for i in range(2)]
    for h in handles:
        h.result(timeout=60)
    # With one sequence per tenant the two requests of tenant "t" never interleave.
    first = [i for (_, i) in events]
    assert sorted(first) == [0] * 12 + [1] * 12
    switches = sum(1 for a, b in zip(first, first[1:]) if a != b)
    assert switches == 1


def test_priority_admits_a_later_higher_priority_request_first(model_path):
    engine = sitsrt.Engine(model_path, threads=1, max_num_seqs=1)
    events = []
    started = threading.Event()

    def slowly():  # (on the scheduler thread) ~0.3 s in all to queue the others
        started.set()
        time.sleep(0.003)

    running = engine.submit("Once upon a time", max_tokens=100, stop_at_eos=False,
                            audit=_Order(events, "first", slowly))
    assert started.wait(timeout=30)  # it holds the only slot
    low = engine.submit("Once", max_tokens=4, stop_at_eos=False, audit=_Order(events, "low"))
    high = engine.submit("Once", max_tokens=4, stop_at_eos=False, priority=5, audit=_Order(events, "high"))
    for h in (running, low, high):
        h.result(timeout=60)
    order = [tag for i, tag in enumerate(events) if i == 0 or events[i - 1] != tag]
    assert order == ["first", "high", "low"]
    with pytest.raises(TypeError, match="priority"):
        engine.generate("Once", max_tokens=1, priority=1.5)
    with pytest.raises(ValueError, match="priority"):
        engine.generate("Once", max_tokens=1, priority=2**31)


def test_tenant_is_recorded_in_the_audit_record(model_path):
    engine = sitsrt.Engine(model_path, threads=1)
    begins = []

    class Begin(sitsrt.audit.Sink):
        def on_request_begin(self, record):
            begins.append(record)

    engine.generate("Once", max_tokens=2, tenant="acme", user="u1", audit=Begin())
    assert (begins[0]["tenant"], begins[0]["user"]) == ("acme", "u1")
