"""cocotb tests of the hub with protocol v2's multicast rows and count packets together
(``max_targets`` > 1 and ``count_packets``; run on ``tests/data/tiny-multicast-counts.yaml``
through moehub.verif.runner, see tests/test_hub_multicast_counts_cocotb.py).

A count packet announces a source's rows for one expert; a multicast row counts toward each
of its targets. A row naming *any* expert whose counts are all in and met is refused
(COUNT_MISMATCH, before OVERFLOW) and takes no row of its other targets; a completing count
below the rows an expert holds is a COUNT_MISMATCH; an expert whose counts are met and
whose rows are complete gets its final count word (and its partial last tile's flag) at
once. Under the multicast admission the allocator is tight while an expert is within
``ADMISSION_GROUPS x lanes`` rows of its count and not met, roomy again once it is met
(``rtl/multicast_counts.py``).

Every test ends with ``tb.check()`` against ``HubModel``: every data write, every control
write in order, every credit and every status register.
"""
from __future__ import annotations

import random

import cocotb

from moehub.spec.formats import Reason
from moehub.verif.count_traffic import CountFeeder
from moehub.verif.hubtb import pool_hub_tb
from moehub.verif.tb_hub import CFG, SEED, SEEDS, TIMEOUT, limit
from moehub.verif.tb_hub_counts import cnt, count_word_cycle, drops, early
from moehub.verif.tb_hub_multicast import (IDLE, check_multicast, chunks, eos_of, finish, make_mc_tb, mrow,
                                           one_at_a_time, random_mc_rows, rows_in_one_cycle, spread)

assert CFG.multicast and CFG.count_packets, f"{CFG.name}: these tests need multicast rows and count packets"
L, E, S = CFG.lanes, CFG.experts, CFG.sources


def announce(rows, extra=None) -> list:
    """Every source's count packet for every expert: the rows of ``rows`` naming it (plus
    ``extra[(src, expert)]``)."""
    n = {}
    for r in rows:
        for x, _ in r.targets:
            n[(r.src, x)] = n.get((r.src, x), 0) + 1
    for k, v in (extra or {}).items():
        n[k] = n.get(k, 0) + v
    return [cnt(s, x, n.get((s, x), 0)) for s in range(S) for x in range(E)]


# ---------------------------------------------------------------------------- directed
@cocotb.test(**TIMEOUT)
async def test_counts_first_every_expert_final_early(dut):
    """Every count first, then rows to one, two and three experts: each expert's final
    count and partial flag leave before any end-of-stream, with the data written once per
    row and one metadata word per target."""
    tb = await make_mc_tb(dut)
    rows = [mrow(0, [(0, 0), (1, 1)], token=1), mrow(1, [(2, 0)], token=2),
            mrow(2, [(1, 0), (2, 1), (0, 2)], token=3), mrow(0, [(2, 2), (0, 0)], token=4)]
    sched = spread(announce(rows)) + rows_in_one_cycle(list(zip(rows, [0, 0, 0, 1])))
    await tb.send_schedule(sched + IDLE + [eos_of(rows)])
    model = await finish(tb, rows)
    assert model.final == [True] * E
    assert early(tb, model) == list(range(E)), [count_word_cycle(tb, model, x) for x in range(E)]


@cocotb.test(**TIMEOUT)
async def test_row_refused_when_any_target_is_met(dut):
    """Expert 0 announced one row, expert 1 three. A row to (0, 1) takes them; then, in one
    cycle, a row to (1, 0) -- refused, COUNT_MISMATCH: expert 0's count is met -- and a row
    to (1): it takes expert 1's row 1, not 2 (the refused row took nothing); then two rows
    to (1, 2) ... the second refused too (expert 1 met at 3). ROWS 1, 3, 1."""
    tb = await make_mc_tb(dut)
    a = mrow(0, [(0, 0), (1, 1)], token=1)
    b, c = mrow(1, [(1, 0), (0, 1)], token=2), mrow(2, [(1, 2)], token=3)
    d, e = mrow(0, [(1, 0), (2, 1)], token=5), mrow(1, [(2, 0), (1, 2)], token=6)
    counts = [cnt(0, 0, 1), cnt(1, 0, 0), cnt(2, 0, 0), cnt(0, 1, 2), cnt(1, 1, 0), cnt(2, 1, 1),
              cnt(0, 2, 1), cnt(1, 2, 0), cnt(2, 2, 0)]
    sched = spread(counts) + one_at_a_time([a]) + rows_in_one_cycle([(b, 0), (c, 0)]) + IDLE
    sched += rows_in_one_cycle([(d, 1), (e, 1)])
    await tb.send_schedule(sched + IDLE + [eos_of([a, b, c, d, e])])
    model = await finish(tb)
    assert await drops(tb, Reason.COUNT_MISMATCH) == 2
    assert [await tb.csr_read("ROWS", x) for x in range(E)] == [1, 3, 1]
    assert await drops(tb, Reason.OVERFLOW) == 0
    assert model.final == [True] * E


@cocotb.test(**TIMEOUT)
async def test_count_and_row_in_one_cycle(dut):
    """Order within a cycle. Expert 2 holds one row, sources 0 and 1 announced 1 and 0:
    source 2's count (0) on lane 0 completes it; a row naming (0, 2) offered on lane 1 in
    the same cycle waits a cycle (the input ends a group at a count packet) and is then
    refused (COUNT_MISMATCH). Expert 1 holds one row, sources 0 and 1 announced 0: a row
    naming (1, 0) on lane 0 is granted (expert 1's count still open), then source 2's count
    of 1 on lane 1, taken in the same cycle, completes expert 1 below its two rows
    (COUNT_MISMATCH: it ends at the sweep). Expert 0 (1 announced) takes that row: final
    at once."""
    tb = await make_mc_tb(dut)
    r1, r2 = mrow(0, [(2, 0)], token=1), mrow(1, [(1, 0)], token=2)
    pre = [cnt(0, 2, 1), cnt(1, 2, 0), cnt(0, 1, 0), cnt(1, 1, 0), cnt(0, 0, 1), cnt(1, 0, 0), cnt(2, 0, 0)]
    sched = spread(pre) + one_at_a_time([r1, r2])
    x = mrow(2, [(0, 0), (2, 1)], token=3)
    cnt_x, x0 = cnt(2, 2, 0), chunks(x, 0, [0])[0]
    sched += IDLE + [[cnt_x, x0, None, None]] + spread(chunks(x, 0, range(1, CFG.chunks_per_row)))
    y = mrow(0, [(1, 0), (0, 1)], token=4)
    cnt_y, y0 = cnt(2, 1, 1), chunks(y, 1, [0])[0]
    sched += IDLE + [[y0, cnt_y, None, None]] + spread(chunks(y, 1, range(1, CFG.chunks_per_row)))
    await tb.send_schedule(sched + IDLE + [eos_of([r1, r2, x, y])])
    model = await finish(tb)
    at = {k: [c for c, _, p in tb.accepted if p == q] for k, q in (("x", x0), ("cx", cnt_x), ("y", y0), ("cy", cnt_y))}
    assert at["x"] == [at["cx"][0] + 1], f"the row behind a count packet: taken in cycle {at['x']}, count {at['cx']}"
    assert at["y"] == at["cy"], f"a count packet behind a row: taken in cycle {at['cy']}, the row {at['y']}"
    assert [await tb.csr_read("ROWS", x) for x in range(E)] == [1, 2, 1]
    assert model.final == [True, False, True], "expert 1, past its count, ends at the sweep"


@cocotb.test(**TIMEOUT)
async def test_met_expert_beside_roomy_ones(dut):
    """Expert 0 announced 0 rows by every source (met from the start); experts 1 and 2
    25 each (far from their counts: the allocator is not tight). One cycle of four rows --
    (1), (0, 1), (2), (1, 2): all four taken in that cycle, the one naming expert 0
    refused for counts and taking no row of expert 1; experts 1 and 2 get rows 0, 1 in
    lane order; then 23 rows to (1, 2) complete both, final before the end-of-stream."""
    tb = await make_mc_tb(dut)
    first = [mrow(0, [(1, 0)], token=1), mrow(1, [(0, 0), (1, 1)], token=2),
             mrow(2, [(2, 0)], token=3), mrow(0, [(1, 2), (2, 1)], token=4)]
    rest = [mrow(k % S, [(1, 0), (2, 1)], token=10 + k) for k in range(23)]
    counts = announce([first[0], first[2], first[3]] + rest)
    sched = spread(counts) + IDLE + rows_in_one_cycle(list(zip(first, [0, 0, 0, 1]))) + IDLE + one_at_a_time(rest)
    await tb.send_schedule(sched + IDLE + [eos_of(first + rest)])
    model = await finish(tb)
    heads = [chunks(r, t, [0])[0] for r, t in zip(first, [0, 0, 0, 1])]
    took = {c for c, _, p in tb.accepted if p in heads}
    assert len(took) == 1, f"the four rows were taken in cycles {sorted(took)}, not one"
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1
    assert [await tb.csr_read("ROWS", x) for x in range(E)] == [0, 25, 25]
    assert model.final == [True] * E and early(tb, model) == [0, 1, 2]


# ---------------------------------------------------------------------------- random
async def random_mc_count_layer(dut, seed: int, *, errors: bool):
    """One layer of random multicast rows with count packets (before, among and after the
    rows; with ``errors`` wrong, repeated and out-of-range counts and v1's bad input),
    random region capacities sometimes small, against the model."""
    rng = random.Random(seed)
    tb = await pool_hub_tb(dut, CFG, seed, rng)
    await tb.csr_write("TILE_ROWS_LOG2", rng.choice([1, 2, 3]))
    await tb.csr_write("POOL_CAP", CFG.pool_rows)
    small = rng.random() < 0.3
    for x in range(E):
        await tb.csr_write("REGION_CAP", rng.randrange(4, 20) if small else CFG.max_rows_per_expert, x)
    await tb.start_layer()
    rows = random_mc_rows(rng, rng.randrange(8, 40), CFG.max_rows_per_expert)
    feeder = CountFeeder(CFG, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                         p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                         count_errors=0.15 if errors else 0.0)
    tb.feed(feeder, credit_delay=rng.randrange(0, 8))
    model = await tb.finish_layer(flush_if_open=errors)
    assert model.done, f"layer did not finish (seed {seed})"
    if not errors and not small:
        check_multicast(tb, model, rows)
        assert model.final == [True] * E, f"an expert did not end early (seed {seed})"
    tb.stop()


@cocotb.test(**limit(400))
async def test_random_multicast_counts(dut):
    """Random multicast rows with count packets; MOEHUB_SEEDS consecutive seeds from
    MOEHUB_SEED."""
    for k in range(SEEDS):
        seed = SEED * 1000 + k
        cocotb.log.info(f"test_random_multicast_counts seed {seed}")
        await random_mc_count_layer(dut, seed, errors=False)


@cocotb.test(**limit(400))
async def test_random_multicast_counts_with_errors(dut):
    """As test_random_multicast_counts, with count errors and v1's bad input."""
    for k in range(SEEDS):
        seed = SEED * 1000 + 500 + k
        cocotb.log.info(f"test_random_multicast_counts_with_errors seed {seed}")
        await random_mc_count_layer(dut, seed, errors=True)
