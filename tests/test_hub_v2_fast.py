"""Protocol v2 in the co-simulation's fast hub stage: multicast rows, per-expert
count packets, the page pool -- hand-checked small cases, then the vectorised path
against the packet-by-packet reference (``HubModel`` of spec/model.py, the oracle) on
random schedules, every output compared.
"""
import numpy as np
import pytest

from moehub.spec.config import load_hub_config
from moehub.cosim import hub_stage as H
from moehub.cosim.hub_stage import (FLAG_DELAY, SWEEP_DELAY, HubArrivals, run_hub_fast,
                                    run_hub_reference, target_alloc, why_not_vectorised)

from cosim_helpers import random_row_cycles


def tiny(**kw):
    """3 sources, 3 experts, top-3, tiles of 4 rows, 16-chunk rows, 4 lanes (config/hub/tiny)."""
    return load_hub_config("tiny").replace(**{"topk": 3, **kw})


def arrivals(cfg, rows, eos, counts=(), targets=None):
    """rows: (src, tag, token, first cycle, first lane, last cycle, last lane, expert, slot);
    ``targets``: per row a tuple of (expert, slot) (multicast)."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 9)
    kw = {}
    if targets is not None:
        kw = dict(tgt_row=np.array([r for r, t in enumerate(targets) for _ in t], np.int64),
                  tgt_expert=np.array([x for t in targets for x, _ in t], np.int64),
                  tgt_slot=np.array([sl for t in targets for _, sl in t], np.int64))
    return HubArrivals(cfg, a[:, 0], a[:, 1], a[:, 7], a[:, 2], a[:, 8], a[:, 3], a[:, 4],
                       a[:, 5], a[:, 6], list(eos), counts=list(counts), **kw)


def outputs(r) -> dict:
    return {"alloc": sorted(r.alloc.items()), "tile_ready": sorted(r.tile_ready.items()),
            "counts": list(r.counts), "credits": list(r.credits), "done_cycle": r.done_cycle,
            "drops": r.drops, "packets": r.packets, "count_cycle": sorted(r.count_cycle.items()),
            "pages": r.pages}


def assert_equal(cfg, arr, what):
    why = why_not_vectorised(cfg, arr)
    assert why is None, f"{what}: expected the vectorised path, got {why}"
    a, b = outputs(run_hub_fast(cfg, arr)), outputs(run_hub_reference(cfg, arr))
    for k in a:
        assert a[k] == b[k], f"{what}: {k} differs: fast {str(a[k])[:300]} ref {str(b[k])[:300]}"


# ----------------------------------------------------------------------------- by hand
def test_one_row_three_targets_three_allocations_each_tile_flagged_at_its_completion():
    """Tiles of 4 rows: source 0 sends 4 rows, the first three to expert 0 only, the
    fourth (token 3) to experts 0, 1 and 2 at once. The fourth row opens 3 allocations
    (rows 3, 0, 0), holds the control port 3 cycles (one metadata write per target), and
    its completion fills expert 0's tile 0: flagged FLAG_DELAY after the completion's slot;
    experts 1 and 2 hold one row each (partial tiles, flagged in the sweep)."""
    cfg = tiny(max_targets=3)
    rows = [(0, i, i, 10 * i, 0, 10 * i + 2, 1, 0, 0) for i in range(3)]
    rows.append((0, 0, 3, 40, 0, 50, 1, 0, 0))
    tg = [((0, 0),)] * 3 + [((0, 0), (1, 1), (2, 2))]
    eos = [(60, 0, 0, 4), (0, 1, 1, 0), (0, 2, 2, 0)]
    arr = arrivals(cfg, rows, eos, targets=tg)
    r = run_hub_fast(cfg, arr)
    assert r.counts == [4, 1, 1]
    assert {k: v for k, v in r.alloc.items() if k[1] == 3} == {(0, 3, 0): (0, 3), (0, 3, 1): (1, 0),
                                                               (0, 3, 2): (2, 0)}
    # slots: opens at 0, 10, 20 (one cycle), completions at 2, 12, 22; row 4 opens at 40
    # for 3 cycles (40..42) and completes at 50
    assert r.tile_ready[(0, 0)] == 50 + FLAG_DELAY
    assert [c for *_, c in r.credits] == [2, 12, 22, 50]
    # sweep: from max(last packet 60, port free 51) + SWEEP_DELAY: count 0, count 1, flag 1,
    # count 2, flag 2, done
    s = 60 + SWEEP_DELAY
    assert r.tile_ready[(1, 0)] == s + 2 and r.tile_ready[(2, 0)] == s + 4
    assert r.count_cycle == {0: s, 1: s + 1, 2: s + 3} and r.done_cycle == s + 5
    trow, tx, rank = target_alloc(r, arr)
    assert trow.tolist() == [0, 1, 2, 3, 3, 3] and rank.tolist() == [0, 1, 2, 3, 0, 0]
    assert_equal(cfg, arr, "three targets")


def test_metadata_writes_hold_the_port_one_cycle_per_target():
    """Two rows of 3 targets open in the same cycle on two lanes: the second row's opening
    waits for the first's 3 metadata writes (slots 5..7, then 8..10), and the completions
    that follow queue behind them."""
    cfg = tiny(max_targets=3)
    tg = [((0, 0), (1, 1), (2, 2))] * 2
    rows = [(0, 0, 0, 5, 0, 6, 0, 0, 0), (1, 0, 0, 5, 1, 6, 1, 0, 0)]
    eos = [(7, 0, 0, 1), (7, 1, 1, 1), (0, 2, 2, 0)]
    arr = arrivals(cfg, rows, eos, targets=tg)
    r = run_hub_fast(cfg, arr)
    assert [c for *_, c in r.credits] == [11, 12]
    assert_equal(cfg, arr, "port")


def test_expert_complete_by_counts_gets_its_final_flag_before_the_last_eos():
    """Counts announce 2 rows of expert 1 (from source 0) and 0 rows of experts 0 and 2
    from everyone; expert 1's second row completes at cycle 30, long before source 1's
    end-of-stream at 500: its count word and its partial tile's flag follow at once
    (FLAG_DELAY after the completion's slot), not after the sweep at 500 + SWEEP_DELAY.
    Without count packets the same tile waits for the sweep."""
    rows = [(0, 0, 0, 10, 0, 12, 1, 1, 0), (0, 1, 1, 20, 0, 30, 1, 1, 0)]
    eos = [(31, 0, 0, 2), (500, 1, 1, 0), (0, 2, 2, 0)]
    counts = [(0, 1, s, x, 2 if (s, x) == (0, 1) else 0) for s in range(3) for x in range(3)]
    cfg = tiny(count_packets=True)
    arr = arrivals(cfg, rows, eos, counts)
    r = run_hub_fast(cfg, arr)
    slot = 30                     # the completion's slot (nothing queued)
    assert r.count_cycle[1] == slot + FLAG_DELAY
    assert r.tile_ready[(1, 0)] == slot + FLAG_DELAY + 1
    assert r.done_cycle == 500 + SWEEP_DELAY          # the sweep writes only the done word
    assert_equal(cfg, arr, "early counts")
    v1 = run_hub_fast(tiny(), arrivals(tiny(), rows, eos))
    assert v1.tile_ready[(1, 0)] > 500 + SWEEP_DELAY
    assert r.tile_ready[(1, 0)] < 100


def test_count_packet_arriving_last_makes_the_expert_final():
    """Expert 0's rows complete at cycle 12, but source 2's count for it arrives at 40:
    the count packet's event (one port cycle) writes the final words."""
    rows = [(0, 0, 0, 10, 0, 12, 1, 0, 0)]
    eos = [(13, 0, 0, 1), (50, 1, 1, 0), (50, 2, 2, 0)]
    counts = [(1 if (s, x) != (2, 0) else 40, 3, s, x, 1 if (s, x) == (0, 0) else 0)
              for s in range(3) for x in range(3)]
    cfg = tiny(count_packets=True)
    arr = arrivals(cfg, rows, eos, counts)
    r = run_hub_fast(cfg, arr)
    assert r.count_cycle[0] == 40 + FLAG_DELAY and r.tile_ready[(0, 0)] == 40 + FLAG_DELAY + 1
    assert_equal(cfg, arr, "count last")


def test_paged_pool_hands_out_one_page_per_started_tile():
    """Tiles of 4 rows: 9 rows of expert 0 and 1 of expert 2 take 3 + 1 pages (unicast,
    one stream per expert); the same 10 rows as one multicast arena take 3 pages."""
    rows = [(0, i % 3, i, 3 * i, 0, 3 * i + 1, 1, 0 if i < 9 else 2, 0) for i in range(10)]
    eos = [(40, 0, 0, 10), (0, 1, 1, 0), (0, 2, 2, 0)]
    cfg = tiny(pool_pages=16)
    arr = arrivals(cfg, rows, eos)
    assert run_hub_fast(cfg, arr).pages == 4
    assert_equal(cfg, arr, "paged")
    cfgm = tiny(pool_pages=16, max_targets=2)
    tg = [((0 if i < 9 else 2, 0),) for i in range(10)]
    arrm = arrivals(cfgm, rows, eos, targets=tg)
    assert run_hub_fast(cfgm, arrm).pages == 3
    assert_equal(cfgm, arrm, "paged multicast")
    # paging changes memory, not time
    assert run_hub_fast(cfg, arr).tile_ready == run_hub_fast(tiny(), arrivals(tiny(), rows, eos)).tile_ready


# ----------------------------------------------------------------------------- random
def random_v2(cfg, rng, n_per_src, multicast, counts, gap=2, span=3):
    S, E, tags, lanes = cfg.sources, cfg.experts, cfg.tags_per_source, cfg.lanes
    rows, tg, eos, cnt = [], [], [], []
    for s in range(S):
        t, free = int(rng.integers(0, 4)), [0] * tags
        n = int(rng.integers(0, n_per_src + 1))
        sent = np.zeros(E, int)
        for i in range(n):
            g = i % tags
            t, fl, lc, ll, free[g] = random_row_cycles(rng, t, free[g], lanes, gap, span)
            f = int(rng.integers(1, cfg.max_targets + 1)) if multicast else 1
            xs = rng.choice(E, size=f, replace=False)
            tg.append(tuple((int(x), j) for j, x in enumerate(xs)))
            sent[xs] += 1
            rows.append((s, g, i, t, fl, lc, ll, int(xs[0]), 0))
        last = max([r[5] for r in rows if r[0] == s], default=0)
        e_cyc = int(rng.integers(0, last + 3))
        eos.append((e_cyc, int(rng.integers(0, lanes)), s, n))
        if counts:
            for x in range(E):
                cnt.append((int(rng.integers(0, e_cyc + 1)), int(rng.integers(0, lanes)), s, x,
                            int(sent[x])))
    rng.shuffle(eos)
    return arrivals(cfg, rows, eos, cnt, tg if multicast else None)


V2 = {"multicast": dict(max_targets=3), "counts": dict(count_packets=True),
      "paged": dict(pool_pages=64), "multicast+counts": dict(max_targets=2, count_packets=True),
      "all": dict(max_targets=3, count_packets=True, pool_pages=64)}


@pytest.mark.parametrize("mode", list(V2))
@pytest.mark.parametrize("seed", range(5))
def test_random_v2_schedules_match_the_reference(mode, seed):
    cfg = tiny(**V2[mode])
    rng = np.random.default_rng(seed + 100 * list(V2).index(mode))
    arr = random_v2(cfg, rng, 30, cfg.multicast, cfg.count_packets, gap=int(seed % 3),
                    span=1 + seed % 4)
    assert_equal(cfg, arr, f"{mode} seed {seed}")


def test_unclean_v2_schedules_go_to_the_reference():
    """A wrong count, a count after its source's end-of-stream, a full pool: replayed."""
    cfg = tiny(count_packets=True)
    rows = [(0, 0, 0, 10, 0, 12, 1, 0, 0)]
    eos = [(13, 0, 0, 1), (5, 1, 1, 0), (5, 2, 2, 0)]
    ok = [(1, 0, s, x, int((s, x) == (0, 0))) for s in range(3) for x in range(3)]
    assert why_not_vectorised(cfg, arrivals(cfg, rows, eos, ok)) is None
    bad = [c if c[2:4] != (0, 0) else (1, 0, 0, 0, 2) for c in ok]
    assert "differs" in why_not_vectorised(cfg, arrivals(cfg, rows, eos, bad))
    late = [c if c[2:4] != (1, 0) else (9, 0, 1, 0, 0) for c in ok]
    assert "after" in why_not_vectorised(cfg, arrivals(cfg, rows, eos, late))
    n0 = H.FALLBACKS.copy()
    assert_fallback = run_hub_fast(cfg, arrivals(cfg, rows, eos, bad))
    assert sum(H.FALLBACKS.values()) == sum(n0.values()) + 1 and assert_fallback.drops >= 0
    full = tiny(pool_pages=1)
    rows5 = [(0, i % 3, i, 3 * i, 0, 3 * i + 1, 1, 0, 0) for i in range(5)]
    assert "pool" in why_not_vectorised(full, arrivals(full, rows5, [(40, 0, 0, 5), (0, 1, 1, 0),
                                                                      (0, 2, 2, 0)]))
