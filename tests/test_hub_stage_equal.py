"""The vectorised hub stage (run_hub_fast) equals the packet-by-packet reference
(run_hub_reference, HubModel on every packet) on random schedules: every output, in order.

Each case is seeded; a failing case names its seed and the first output that differs.
The schedules stress the hub's tie-breaking: many rows in one cycle on several lanes, the
first and last chunk of a row on different lanes and cycles, rows of one expert opening in
the same cycle, tags reused right after their row's completion cycle, end-of-stream words
early and late, region overflows; and, from the co-simulation's own scheduler, uniform and
skewed routing on tiny-, Mixtral- and DeepSeek-V3-like hubs with tag-window stalls.
Schedules the vectorised path does not cover (drops other than overflow) must go to the
reference, and the last tests break the fast path on purpose to show the comparison
catches it.
"""
import numpy as np
import pytest

from moehub.cosim.config import ModelConfig, load_system_config, load_workload_config
from moehub.spec.config import load_hub_config
from moehub.cosim import hub_stage as H
from moehub.cosim.hub_stage import HubArrivals, run_hub_fast, run_hub_reference, why_not_vectorised
from moehub.cosim.layer import Layer
from moehub.cosim.systems import hub_schedule
from moehub.cosim.workload import make_routing

from cosim_helpers import random_row_cycles


def outputs(r) -> dict:
    """Every output of a hub stage, in order (dict insertion order included: the hub
    system builds its GEMM work list in tile_ready's order)."""
    return {"alloc": list(r.alloc.items()), "tile_ready": list(r.tile_ready.items()),
            "counts": list(r.counts), "credits": list(r.credits), "done_cycle": r.done_cycle,
            "drops": r.drops, "packets": r.packets}


def assert_equal(cfg, arr, what: str):
    why = why_not_vectorised(cfg, arr)
    assert why is None, f"{what}: expected a vectorised case, got fallback ({why})"
    a, b = outputs(run_hub_fast(cfg, arr)), outputs(run_hub_reference(cfg, arr))
    for k in a:
        if a[k] != b[k]:
            x, y = a[k], b[k]
            i = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None) \
                if isinstance(x, list) else None
            where = f" first at [{i}]: fast {x[i]} reference {y[i]}" if i is not None else \
                f": fast {str(x)[:200]} reference {str(y)[:200]}"
            pytest.fail(f"{what}: {k} differs{where}")


# ----------------------------------------------------------------------------- synthetic
HUBS = {
    "tiny": dict(),
    "tiny-2chunk": dict(row_bytes=32),          # first and last chunk only
    "mixtral": dict(sources=8, token_bits=10),
    "deepseek": dict(sources=8, token_bits=10),
}
BASE = {"tiny": "tiny", "tiny-2chunk": "tiny",
        "mixtral": "mixtral-8gpu", "deepseek": "deepseek-v3-8gpu"}


def hub(name: str, **kw):
    cfg = load_hub_config(BASE[name])
    return cfg.replace(**{**HUBS[name], **kw})


def random_arrivals(cfg, rng, n_per_src: int, skew: float = 0.0, gap: int = 2,
                    span: int = 3, reuse: int = 1, overflow: bool = False,
                    start: int = 0) -> HubArrivals:
    """Rows of every source back to back, ``gap`` cycles apart at most (0: several rows of
    a source in one cycle), each spread over up to ``span`` cycles on random lanes; a tag
    is reused ``reuse`` .. reuse + 2 cycles after its previous row completed (1: the next
    cycle, the earliest the hub takes it). Experts uniform or Zipf-skewed (``skew``);
    cycles from ``start`` (the hub's first control slot is cycle 0 even so)."""
    S, E, tags, lanes = cfg.sources, cfg.experts, cfg.tags_per_source, cfg.lanes
    w = 1.0 / np.arange(1, E + 1) ** skew
    cols = {k: [] for k in ("src", "tag", "expert", "token", "slot", "fc", "fl", "lc", "ll")}
    eos = []
    for s in range(S):
        t, free = start + int(rng.integers(0, 4)), [start] * tags
        n = int(rng.integers(0, n_per_src + 1))
        for i in range(n):
            g = i % tags
            t, fl, lc, ll, free[g] = random_row_cycles(rng, t, free[g], lanes, gap, span, reuse)
            for k, v in zip(cols, (s, g, int(rng.choice(E, p=w / w.sum())), i // cfg.topk,
                                   i % cfg.topk, t, fl, lc, ll)):
                cols[k].append(v)
        last = max([c for c, x in zip(cols["lc"], cols["src"]) if x == s], default=start)
        eos.append((int(rng.integers(start, last + 3)), int(rng.integers(0, lanes)), s, n))
    rng.shuffle(eos)
    a = {k: np.array(v, dtype=np.int64) for k, v in cols.items()}
    cap = None
    if overflow:
        cnt = np.bincount(a["expert"], minlength=E)
        cap = [max(0, int(c) - int(rng.integers(0, 5))) for c in cnt]
    return HubArrivals(cfg, a["src"], a["tag"], a["expert"], a["token"], a["slot"], a["fc"],
                       a["fl"], a["lc"], a["ll"], eos, region_cap=cap)


CASES = [  # (hub, rows per source, skew, gap, span, reuse, overflow, tile_rows[, start])
    ("tiny", 40, 0.0, 2, 3, 1, False, None),
    ("tiny", 30, 0.0, 0, 2, 1, False, None, -12),
    ("tiny", 60, 2.0, 0, 5, 1, False, None),
    ("tiny", 40, 0.0, 0, 0, 1, True, None),
    ("tiny-2chunk", 60, 1.0, 0, 0, 1, False, None),
    ("tiny-2chunk", 60, 0.0, 1, 0, 1, True, None),
    ("tiny-2chunk", 50, 1.5, 0, 2, 1, False, None),
    ("mixtral", 60, 0.0, 1, 8, 1, False, 16),
    ("mixtral", 40, 0.0, 0, 3, 2, True, 16),
    ("deepseek", 60, 0.0, 1, 4, 1, False, 16),
    ("deepseek", 80, 2.0, 0, 6, 1, True, 16),
]


def case_arrivals(case: int, rng):
    name, n, skew, gap, span, reuse, overflow, tile, *start = CASES[case]
    cfg = hub(name, **({} if tile is None else {"tile_rows": tile, "min_tile_rows": 16}))
    return cfg, random_arrivals(cfg, rng, n, skew, gap, span, reuse, overflow, *start)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("seed", range(6))
def test_random_schedule_matches_reference(case, seed):
    cfg, arr = case_arrivals(case, np.random.default_rng(1000 * case + seed))
    assert_equal(cfg, arr, f"case {CASES[case]} seed {1000 * case + seed}")


def test_random_schedules_exercise_the_tie_rules():
    """The generator really produces what the tie rules are about (else the equality
    above proves little): rows of one expert opening in one cycle on several lanes, rows
    whose chunks cross cycles and lanes, a tag reused the cycle after its completion,
    overflows."""
    cfg = hub("tiny")
    arr = random_arrivals(cfg, np.random.default_rng(3), 60, 0.0, 0, 3, 1, True)
    fc, x = arr.first_cycle, arr.expert
    same = [(c, e) for c, e in zip(fc.tolist(), x.tolist())]
    assert len(same) - len(set(same)) >= 5
    assert ((arr.last_cycle > fc) & (arr.last_lane != arr.first_lane)).sum() >= 10
    r = run_hub_reference(cfg, arr)
    assert r.drops > 0 and r.drops == len(arr) - len(r.alloc)
    key = arr.src * cfg.tags_per_source + arr.tag
    nxt = {}
    tight = 0
    for i in np.argsort(fc, kind="stable"):
        k = int(key[i])
        if k in nxt and fc[i] == nxt[k] + 1:
            tight += 1
        nxt[k] = int(arr.last_cycle[i])
    assert tight >= 3


# ----------------------------------------------------------------------------- cosim schedules
def model(name: str, experts: int, topk: int, hub_config: str, hidden: int):
    return ModelConfig.from_dict(dict(
        name=name, hidden=hidden, expert_ffn=96, experts=experts, topk=topk, layers=2,
        dense_layers=0, dense_ffn=0, shared_experts=0, shared_expert_ffn=0,
        attn_params=16384, attn_heads=1, attn_qk_head_dim=64, attn_v_head_dim=64,
        act_bytes=2, weight_bytes=2, hub_config=hub_config))


LAYERS = {  # name: (model, gpus, tokens, hub overrides)
    "tiny-like": (model("tiny-like", 6, 2, "tiny", 64), 3, 40, {}),
    "mixtral-like": (model("mixtral-like", 8, 2, "mixtral-8gpu", 1024), 8, 96, {}),
    "deepseek-like": (model("deepseek-like", 256, 8, "deepseek-v3-8gpu", 1024), 8, 48, {}),
    "few-tags": (model("few-tags", 8, 2, "mixtral-8gpu", 1024), 4, 128, {"tags_per_source": 2}),
}


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("seed", [1, 2])
def test_cosim_schedule_matches_reference(layer, routing, seed):
    m, gpus, tokens, over = LAYERS[layer]
    sysc = load_system_config("h100x8").replace(gpus=gpus, gpus_per_node=gpus)
    wl = load_workload_config("default").replace(tokens_per_gpu=tokens, seed=seed,
                                                 routing=routing,
                                                 skewness=2.0 if routing == "skewed" else 1.0)
    base = load_hub_config(m.hub_config).replace(**over) if over else None
    L = Layer(sysc, m, wl, make_routing(m, wl, gpus), base)
    arrivals, _, _, stalls = hub_schedule(L, t0=1.0)
    if layer == "few-tags":
        assert stalls > 0, "two tags per source should stall the flows"
    for d, arr in enumerate(arrivals):
        assert_equal(L.hub, arr, f"{layer} {routing} seed {seed} GPU {d}")


# ----------------------------------------------------------------------------- fallbacks
def _broken(arr: HubArrivals, how: str) -> HubArrivals:
    import dataclasses
    a = dataclasses.replace(arr, eos=list(arr.eos))
    if how == "tag reused in its completion cycle":
        i, j = next((i, j) for i in range(len(a)) for j in range(i + 1, len(a))
                    if a.src[j] == a.src[i] and a.tag[j] == a.tag[i])
        a.first_cycle = a.first_cycle.copy()
        a.first_cycle[j] = a.last_cycle[i]
        a.last_cycle = np.maximum(a.last_cycle, a.first_cycle + 1)
    elif how == "eos count short":
        c, l, s, n = a.eos[0]
        a.eos[0] = (c, l, s, n - 1)
    elif how == "eos twice":
        a.eos.append(a.eos[0])
    elif how == "bad expert":
        a.expert = a.expert.copy()
        a.expert[3] = a.cfg.experts
    elif how == "last before first":
        a.last_cycle = a.last_cycle.copy()
        a.last_cycle[2] = a.first_cycle[2] - 1
    return a


@pytest.mark.parametrize("how", ["tag reused in its completion cycle", "eos count short",
                                 "eos twice", "bad expert", "last before first"])
def test_unclean_schedules_go_to_the_reference(how):
    cfg = hub("tiny")
    arr = _broken(random_arrivals(cfg, np.random.default_rng(11), 30, gap=1), how)
    assert why_not_vectorised(cfg, arr) is not None
    a, b = outputs(run_hub_fast(cfg, arr)), outputs(run_hub_reference(cfg, arr))
    assert a == b
    if how != "last before first":          # (the hub takes a row's chunks in any order)
        assert b["drops"] > 0 or b["done_cycle"] == -1


# ----------------------------------------------------------------------------- the net catches
def _mismatch(monkeypatch, name, broken) -> bool:
    """True if some random case differs from the reference with ``name`` replaced."""
    monkeypatch.setattr(H, name, broken)
    for case in range(len(CASES)):
        cfg, arr = case_arrivals(case, np.random.default_rng(case))
        if outputs(run_hub_fast(cfg, arr)) != outputs(run_hub_reference(cfg, arr)):
            return True
    return False


def test_comparison_catches_a_fast_path_without_one_event_per_cycle(monkeypatch):
    assert _mismatch(monkeypatch, "_control_slots", lambda c: c.copy())


def test_comparison_catches_a_fast_path_that_ignores_lanes(monkeypatch):
    """Packets of one cycle taken in row order, not lane order."""
    orig = H._Events.__init__

    def no_lanes(self, cfg, a):
        import dataclasses
        zero = np.zeros(len(a), dtype=np.int64)
        orig(self, cfg, dataclasses.replace(a, first_lane=zero, last_lane=zero))
    assert _mismatch(monkeypatch, "_Events", type("E", (H._Events,), {"__init__": no_lanes}))


def test_comparison_catches_a_fast_path_that_flags_tiles_late(monkeypatch):
    orig = H._sweep_flags
    assert _mismatch(monkeypatch, "_sweep_flags", lambda t, r, l, s: orig(t, r, l, s + 1))
