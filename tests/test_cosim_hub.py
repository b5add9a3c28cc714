"""The hub stage: the vectorised fast path equals packet-by-packet HubModel, and every
routed row reaches its expert exactly once."""
import numpy as np
import pytest

from moehub.cosim.config import ModelConfig, load_system_config, load_workload_config
from moehub.spec.config import load_hub_config
from moehub.cosim.hub_stage import HubArrivals, run_hub_fast, run_hub_reference
from moehub.cosim.layer import Layer
from moehub.cosim.systems import hub_schedule, run_hub, run_system
from moehub.cosim.workload import make_routing


def small_model(**kw):
    d = dict(name="small", hidden=64, expert_ffn=96, experts=6, topk=2, layers=2,
             dense_layers=0, dense_ffn=0, shared_experts=0, shared_expert_ffn=0,
             attn_params=16384, attn_heads=1, attn_qk_head_dim=64, attn_v_head_dim=64,
             act_bytes=2, weight_bytes=2, hub_config="tiny")
    d.update(kw)
    return ModelConfig.from_dict(d)


def small_layer(tokens=40, gpus=3, seed=5, routing="uniform", **kw):
    sysc = load_system_config("h100x8").replace(gpus=gpus, gpus_per_node=gpus)
    model = small_model(**kw)
    wl = load_workload_config("default").replace(tokens_per_gpu=tokens, seed=seed,
                                                 routing=routing,
                                                 skewness=2.0 if routing == "skewed" else 1.0)
    return Layer(sysc, model, wl, make_routing(model, wl, gpus), load_hub_config("tiny"))


def compare(a, b):
    assert a.alloc == b.alloc
    assert a.tile_ready == b.tile_ready
    assert a.counts == b.counts
    assert a.credits == b.credits
    assert a.done_cycle == b.done_cycle
    assert a.drops == b.drops == 0
    assert a.packets == b.packets


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_path_matches_packet_by_packet_model(seed):
    L = small_layer(seed=seed)
    arrivals, *_ = hub_schedule(L, t0=1.0)
    for arr in arrivals:
        compare(run_hub_fast(L.hub, arr), run_hub_reference(L.hub, arr))


def test_fast_path_matches_on_an_interleaved_adversarial_schedule():
    """Rows overlap heavily, share cycles and lanes, and tags are reused right after credits."""
    cfg = load_hub_config("tiny").replace(sources=3, experts=2, max_rows_per_expert=64)
    rng = np.random.default_rng(7)
    n, cpr = 60, cfg.chunks_per_row
    src = rng.integers(0, 3, n)
    # per source, rows go out back to back on one tag each (tags reused after completion)
    first = np.zeros(n, dtype=np.int64)
    last = np.zeros(n, dtype=np.int64)
    tag = np.zeros(n, dtype=np.int64)
    tnext = {s: int(rng.integers(0, 5)) for s in range(3)}
    seen = {s: 0 for s in range(3)}
    free_at = {}                                          # (src, tag) -> first cycle it is free
    for i in range(n):
        s = int(src[i])
        tag[i] = seen[s] % cfg.tags_per_source
        seen[s] += 1
        first[i] = max(tnext[s], free_at.get((s, int(tag[i])), 0))
        last[i] = first[i] + int(rng.integers(0, 4))     # several chunks per cycle possible
        tnext[s] = first[i] + int(rng.integers(0, 2))    # the next row may start in the same cycle
        free_at[(s, int(tag[i]))] = last[i] + 2          # credit back, then reuse
    fl = rng.integers(0, cfg.lanes, n)
    ll = np.where(last == first, np.maximum(fl, rng.integers(0, cfg.lanes, n)), rng.integers(0, cfg.lanes, n))
    last = last + ((last == first) & (ll <= fl))
    eos = [(int(last[src == s].max()) + 1, s, s, int((src == s).sum())) for s in range(3)]
    arr = HubArrivals(cfg, src, tag, rng.integers(0, 2, n), np.arange(n), np.zeros(n, int),
                      first, fl, last, ll, eos)
    a, b = run_hub_fast(cfg, arr), run_hub_reference(cfg, arr)
    assert a.alloc == b.alloc and a.tile_ready == b.tile_ready and a.counts == b.counts
    assert a.credits == b.credits and a.done_cycle == b.done_cycle and a.drops == b.drops == 0
    assert len(a.alloc) == n and len(a.tile_ready) >= n // cfg.tile_rows
    # the schedule really interleaves rows: some row opens while another is still open
    assert any(first[j] < last[i] and first[j] > first[i] for i in range(n) for j in range(n))


def test_every_routed_row_arrives_exactly_once():
    L = small_layer(tokens=64, routing="skewed")
    arrivals, *_ = hub_schedule(L, t0=0.0)
    total = 0
    for d, arr in enumerate(arrivals):
        r = run_hub_fast(L.hub, arr)
        assert r.drops == 0
        # per destination: the hub's counts match the routing, row by row
        want = {(int(s), int(t), int(k)) for s, t, k in
                zip(L.src[L.dest == d], L.tok[L.dest == d], L.slot[L.dest == d])}
        assert set(r.alloc) == want
        assert len(r.alloc) == len(want)
        assert r.counts == L.expert_rows[d].tolist()
        # rows of an expert fill 0..count-1 exactly once
        for e in range(L.E_local):
            got = sorted(row for (x, row) in r.alloc.values() if x == e)
            assert got == list(range(L.expert_rows[d, e]))
        # every tile of every expert is flagged once
        tiles = {(e, t) for e in range(L.E_local)
                 for t in range(-(-int(L.expert_rows[d, e]) // L.tile_rows))}
        assert set(r.tile_ready) == tiles
        total += len(r.alloc)
    assert total == L.N == L.G * L.T * L.k


def test_tile_flag_comes_after_its_rows_arrive():
    L = small_layer(seed=9)
    arrivals, *_ = hub_schedule(L, t0=0.0)
    arr = arrivals[0]
    r = run_hub_fast(L.hub, arr)
    last_of = {}
    for i in range(len(arr)):
        e, row = r.alloc[(int(arr.src[i]), int(arr.token[i]), int(arr.slot[i]))]
        key = (e, row // L.tile_rows)
        last_of[key] = max(last_of.get(key, 0), int(arr.last_cycle[i]))
    for key, cyc in r.tile_ready.items():
        assert cyc >= last_of[key] + 4


def test_hub_system_conserves_rows_on_a_real_config():
    from moehub.cosim.config import load_model_config
    sysc = load_system_config("h100x8")
    m = load_model_config("mixtral-8x7b")
    wl = load_workload_config("default").replace(tokens_per_gpu=128)
    L = Layer(sysc, m, wl, make_routing(m, wl, 8))
    res = run_hub(L)
    assert res.extra["drops"] == 0
    assert res.extra["rows_allocated"] == res.extra["rows"] == 8 * 128 * 2
    assert res.extra["packets"] == 8 * 128 * 2 * L.hub.chunks_per_row + 8 * 8


def test_reference_hub_mode_gives_the_same_layer():
    from moehub.cosim.config import load_model_config
    sysc = load_system_config("h100x8").replace(gpus=4, gpus_per_node=4)
    m = load_model_config("phi-3.5-moe")
    wl = load_workload_config("default").replace(tokens_per_gpu=24)
    L = Layer(sysc, m, wl, make_routing(m, wl, 4))
    a, b = run_system("hub", L, "model"), run_system("hub", L, "reference")
    assert a.latency_us == b.latency_us
    assert sorted(a.markers) == sorted(b.markers)


def test_explicit_packet_list_backend_matches():
    from moehub.cosim.hub_stage import run_hub_packets
    L = small_layer(seed=4)
    arrivals, *_ = hub_schedule(L, t0=0.0)
    arr = arrivals[1]
    compare(run_hub_packets(L.hub, list(arr.packets())), run_hub_fast(L.hub, arr))


def test_the_hub_cache_keeps_a_bounded_number_of_results_and_changes_no_result(monkeypatch):
    """A wide layer's passes must not keep every pass's hub results (memory grows with
    GPUs x passes); a result computed again is the same."""
    from moehub.cosim.systems import hub
    from cosim_helpers import two_nodes
    L = two_nodes(64)
    whole = run_system("hub", L)
    assert len(L._hub_cache) <= hub.HUB_CACHE_PASSES * L.G
    monkeypatch.setattr(hub, "HUB_CACHE_PASSES", 1)
    L1 = two_nodes(64)
    one = run_system("hub", L1)
    assert whole.extra["passes"] >= 3            # (three passes' schedules, two different)
    assert len(L1._hub_cache) == L1.G            # the last pass's results only
    assert one.latency_us == whole.latency_us
    assert np.array_equal(one.gpu_end, whole.gpu_end)
