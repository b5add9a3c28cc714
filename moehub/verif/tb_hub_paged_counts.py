"""cocotb tests of the hub with protocol v2's paged regions and count packets together
(``pool_pages > 0`` and ``count_packets``; run on ``tests/data/tiny-paged-counts.yaml``
through moehub.verif.runner, see tests/test_hub_paged_counts_cocotb.py).

The two refusals meet here: a row of an expert whose counts are met is COUNT_MISMATCH and
takes no page (the model checks the counts first); a row that starts a tile when the pool
is empty is OVERFLOW, and so is every later row of its expert in the cycle -- they see
the rows held before it, not the requests ahead of them, also when a count packet between
them completes the expert; in the cycle after, the hub still refuses the expert's rows
(the pool is empty) and its counters and its count limit are a cycle late, which the
verdicts of that cycle must not show. Each test ends, as tb_hub_paged's and
tb_hub_counts's do, with ``tb.check()`` against ``HubModel``: every write, every control
write in order (flags naming their pages, early final counts), every credit and every
status register (POOL_FREE, DROPS per reason, OVERFLOW per expert).

The helpers are tb_hub_paged's and tb_hub_counts's; tiles of 2 rows and the 6-page pool
of the config, so that 12 rows of one expert empty the pool.
"""
from __future__ import annotations

from collections import Counter

import cocotb

from moehub.spec.formats import Reason
from moehub.verif.count_traffic import CountFeeder
from moehub.verif.tb_hub import CFG, SEED, SEEDS, TIMEOUT, chunks, eos_all, finish, limit, row, serial, wide
from moehub.verif.tb_hub_counts import cnt, count_word_cycle, drops, first_eos_cycle
from moehub.verif.tb_hub_paged import IDLE, P, PAIRS, flags, make_paged_tb, random_paged_layers, return_pages

assert CFG.paged and CFG.count_packets, f"{CFG.name}: these tests need paged regions and count packets"
L, E, S = CFG.lanes, CFG.experts, CFG.sources


def fill(expert: int, n: int, token0: int = 0) -> list:
    """``n`` rows of ``expert``, one row at a time on all lanes, sources and tags in turn
    (each row completes before the next starts: the tags are free again)."""
    sched = []
    for k in range(n):
        s, t = PAIRS[k % len(PAIRS)]
        sched += wide(chunks(row(s, expert, token=token0 + k), tag=t))
    return sched


def firsts_then_rest(group: list) -> list:
    """One cycle of ``group`` -- rows ``(row, (src, tag))`` and count packets, in lane
    order -- then the rows' other chunks, all lanes busy."""
    first, rest = [], []
    for item in group:
        if isinstance(item, tuple):
            r, (s, t) = item
            c = chunks(r, tag=t)
            first.append(c[0])
            rest += c[1:]
        else:
            first.append(item)
    return [first] + wide(rest)


def in_turn(*scheds) -> list:
    """The first cycles of ``scheds`` in consecutive cycles, then the rest of each."""
    return [s[0] for s in scheds] + [c for s in scheds for c in s[1:]]


def rows_of(expert: int, pairs, token0: int) -> list:
    """One cycle of rows of ``expert`` from the (src, tag) ``pairs``, then their chunks."""
    return firsts_then_rest([(row(s, expert, token=token0 + k), (s, t)) for k, (s, t) in enumerate(pairs)])


def eos_for(sched: list) -> list:
    """End-of-stream from every source, counting the rows ``sched`` opens (every row
    here sends its chunk 0 first)."""
    n = Counter(p.src for cyc in sched for p in cyc if p is not None and p.kind == 0 and p.chunk == 0)
    return eos_all(dict(n))


async def next_layer(tb, epoch: int):
    """Every page handed back (tb_hub_paged's return_pages), then the next layer."""
    await return_pages(tb, range(P))
    await tb.csr_write("EPOCH", epoch)
    await tb.start_layer()


# ---------------------------------------------------------------------------- directed
@cocotb.test(**TIMEOUT)
async def test_row_refused_for_counts_takes_no_page(dut):
    """Expert 1 announced 3 rows (1 + 2 + 0); its rows 0 and 1 fill its first tile (page
    0). One cycle: its row 2 (starts a tile: page 1), a row past its count (COUNT_MISMATCH),
    a row of expert 2 (page 2), expert 1 again (COUNT_MISMATCH); then a row of expert 1 on
    its own (COUNT_MISMATCH). Then, every count of expert 0 in at 0 rows, one cycle: a row
    of expert 0 (it would start a tile: refused for counts, it takes no page), rows 1 and 2
    of expert 2 (row 2 starts a tile: page 3, the next one, not 4). POOL_FREE 6 - 4;
    COUNT_MISMATCH 4, no OVERFLOW."""
    tb = await make_paged_tb(dut, tile_rows=2)
    sched = serial([cnt(0, 1, 1), cnt(1, 1, 2), cnt(2, 1, 0)], lanes=[3])
    sched += fill(1, 2) + IDLE
    sched += firsts_then_rest([(row(0, 1, token=20), (0, 0)), (row(1, 1, token=21), (1, 0)),
                               (row(2, 2, token=22), (2, 0)), (row(1, 1, token=23), (1, 1))]) + IDLE
    sched += wide(chunks(row(2, 1, token=24), tag=1)) + IDLE
    sched += serial([cnt(0, 0, 0), cnt(1, 0, 0), cnt(2, 0, 0)], lanes=[1])
    sched += firsts_then_rest([(row(0, 0, token=30), (0, 1)), (row(1, 2, token=31), (1, 2)),
                               (row(2, 2, token=32), (2, 2))])
    await tb.send_schedule(sched + IDLE + [eos_for(sched)])
    model = await finish(tb)
    assert await drops(tb, Reason.COUNT_MISMATCH) == 4
    assert await drops(tb, Reason.OVERFLOW) == 0
    assert await tb.csr_read("POOL_FREE") == P - 4
    assert flags(tb, model) == {(1, 0): 0, (1, 1): 1, (2, 0): 2, (2, 1): 3}, flags(tb, model)
    assert model.final[0] and model.final[1]


@cocotb.test(**TIMEOUT)
async def test_pool_runs_out_before_the_counts_are_met(dut):
    """Expert 0 announced by sources 0 and 1 (6 + 4 rows), source 2's count held back; 10
    rows of it and 2 of expert 1 take the six pages. One cycle: expert 0's row 10 (a tile
    start, no page: OVERFLOW, its counts not all in), expert 0 again (OVERFLOW with it),
    expert 1's row 2 (no page: OVERFLOW), expert 0 (OVERFLOW); the very next cycle another
    row of expert 0 (the pool still empty: OVERFLOW). Then source 2's count (0) completes
    expert 0 at the 10 rows it holds: its final count is written at once, before any
    end-of-stream; a row of it after that is COUNT_MISMATCH."""
    tb = await make_paged_tb(dut, tile_rows=2)
    sched = serial([cnt(0, 0, 6), cnt(1, 0, 4)], lanes=[2])
    sched += fill(0, 10) + fill(1, 2, token0=40) + IDLE
    group = firsts_then_rest([(row(0, 0, token=50), (0, 0)), (row(1, 0, token=51), (1, 0)),
                              (row(2, 1, token=52), (2, 0)), (row(0, 0, token=53), (0, 1))])
    sched += in_turn(group, wide(chunks(row(1, 0, token=54), tag=1))) + IDLE
    sched += serial([cnt(2, 0, 0)], lanes=[1]) + IDLE
    sched += wide(chunks(row(2, 0, token=55), tag=1))
    await tb.send_schedule(sched + IDLE + [eos_for(sched)])
    model = await finish(tb)
    assert await drops(tb, Reason.OVERFLOW) == 5
    assert await tb.csr_read("OVERFLOW", 0) == 4 and await tb.csr_read("OVERFLOW", 1) == 1
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1
    assert await tb.csr_read("POOL_FREE") == 0 and await tb.csr_read("ROWS", 0) == 10
    assert model.final[0] and count_word_cycle(tb, model, 0) < first_eos_cycle(tb)


@cocotb.test(**TIMEOUT)
async def test_count_and_page_refusals_of_one_expert_in_one_group(dut):
    """Same-cycle mixes on all lanes, the pool empty at a tile start of expert 0 (12 rows
    of it hold the six pages), one of its counts still out. Layer 1, one cycle: a row of
    expert 0 (no page: OVERFLOW), the last count of expert 0 making its total the 12 rows
    it holds, two rows of expert 0 (its counts now met: COUNT_MISMATCH, though the row
    refused for want of a page sat ahead); the next cycle, four rows of expert 0, the
    cycle after, two (COUNT_MISMATCH). Layer 2 (pages back), again 12 rows, the total
    to be 13: one cycle of two rows of expert 0 (OVERFLOW), its last count -- one row more
    than it holds: neither below the rows held (though two requests sat ahead) nor met --
    and a row (OVERFLOW: the rows held are 12, not the three requests ahead); the next
    cycle four rows (OVERFLOW: the hub's count limit is a cycle behind there), the cycle
    after two (OVERFLOW); at the sweep expert 0 is short (COUNT_MISMATCH)."""
    tb = await make_paged_tb(dut, tile_rows=2)
    later = [(0, 1), (1, 1), (2, 1), (0, 2)]
    # ---- layer 1: the counts met between a page refusal and the rows behind it
    sched = serial([cnt(0, 0, 12), cnt(1, 0, 0)], lanes=[3]) + fill(0, 12) + IDLE
    group = firsts_then_rest([(row(0, 0, token=60), (0, 0)), cnt(2, 0, 0),
                              (row(1, 0, token=61), (1, 0)), (row(2, 0, token=62), (2, 0))])
    sched += in_turn(group, rows_of(0, later, 63), rows_of(0, [(1, 2), (2, 2)], 67))
    await tb.send_schedule(sched + IDLE + [eos_for(sched)])
    model = await finish(tb)
    assert await drops(tb, Reason.OVERFLOW) == 1
    assert await drops(tb, Reason.COUNT_MISMATCH) == 8
    assert model.final[0]
    # ---- layer 2: the counts not met behind the page refusal, nor in the cycles after
    await next_layer(tb, 2)
    sched = serial([cnt(0, 0, 13), cnt(1, 0, 0)], lanes=[0]) + fill(0, 12, token0=100) + IDLE
    group = firsts_then_rest([(row(0, 0, token=70), (0, 0)), (row(1, 0, token=71), (1, 0)),
                              cnt(2, 0, 0), (row(2, 0, token=72), (2, 0))])
    sched += in_turn(group, rows_of(0, later, 73), rows_of(0, [(1, 2), (2, 2)], 77))
    await tb.send_schedule(sched + IDLE + [eos_for(sched)])
    model = await finish(tb)
    assert await drops(tb, Reason.OVERFLOW) == 9 and await tb.csr_read("OVERFLOW", 0) == 9
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1        # (the sweep: short)
    assert not model.final[0]


@cocotb.test(**TIMEOUT)
async def test_count_packet_behind_a_page_refusal(dut):
    """The pool empty at a tile start of expert 2 (12 rows), two of its sources' counts in
    (10 + 2). One cycle: two rows of expert 2 (OVERFLOW), source 2's count of 0 -- the rows
    held are 12, the total 12: not below it, though two requests sat ahead; the expert is
    final there -- and a row of expert 1 (it starts a tile, no page: OVERFLOW). Layer 2
    (pages back), the same with a total of 11 and a row of expert 2 behind the count: the
    count is below the rows held (COUNT_MISMATCH), the row behind it and the two of the
    next cycle are past the count (COUNT_MISMATCH)."""
    tb = await make_paged_tb(dut, tile_rows=2)
    sched = serial([cnt(0, 2, 10), cnt(1, 2, 2)], lanes=[1]) + fill(2, 12) + IDLE
    sched += firsts_then_rest([(row(0, 2, token=90), (0, 0)), (row(1, 2, token=91), (1, 0)),
                               cnt(2, 2, 0), (row(2, 1, token=92), (2, 0))])
    await tb.send_schedule(sched + IDLE + [eos_for(sched)])
    model = await finish(tb)
    assert await drops(tb, Reason.OVERFLOW) == 3 and await drops(tb, Reason.COUNT_MISMATCH) == 0
    assert model.final[2]
    await next_layer(tb, 2)
    sched = serial([cnt(0, 2, 9), cnt(1, 2, 2)], lanes=[1]) + fill(2, 12, token0=120) + IDLE
    group = firsts_then_rest([(row(0, 2, token=93), (0, 0)), (row(1, 2, token=94), (1, 0)),
                              cnt(2, 2, 0), (row(2, 2, token=95), (2, 0))])
    sched += in_turn(group, rows_of(2, [(0, 1), (1, 1)], 96))
    await tb.send_schedule(sched + IDLE + [eos_for(sched)])
    await finish(tb)
    assert await drops(tb, Reason.OVERFLOW) == 2
    assert await drops(tb, Reason.COUNT_MISMATCH) == 4


# ---------------------------------------------------------------------------- random
def count_feeder(rng, rows, errors: bool) -> CountFeeder:
    """tb_hub_paged's layers with count packets: announcements before and among the rows,
    sometimes one row off (rows past their count refused beside rows without a page)."""
    return CountFeeder(CFG, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                       p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                       count_errors=rng.choice([0.0, 0.15, 0.4]))


@cocotb.test(**limit(400))
async def test_random_paged_counts(dut):
    """Random rows and count packets over three layers on the small pool (random tile
    sizes; pages handed back between layers), back-pressure, idle lanes, early EOS,
    credit delay; MOEHUB_SEEDS consecutive seeds from MOEHUB_SEED."""
    for k in range(SEEDS):
        seed = SEED * 1000 + k
        cocotb.log.info(f"test_random_paged_counts seed {seed}")
        await random_paged_layers(dut, seed, layers=3, errors=False, feeder=count_feeder)


@cocotb.test(**limit(400))
async def test_random_paged_counts_with_errors(dut):
    """As test_random_paged_counts, with v1's bad input mixed in."""
    for k in range(SEEDS):
        seed = SEED * 1000 + 500 + k
        cocotb.log.info(f"test_random_paged_counts_with_errors seed {seed}")
        await random_paged_layers(dut, seed, layers=3, errors=True, feeder=count_feeder)
