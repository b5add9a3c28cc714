"""cocotb tests of the hub with protocol v2's three features together: multicast rows,
their data in a paged arena, count packets (run on
``tests/data/tiny-multicast-paged-counts.yaml`` through moehub.verif.runner, see
tests/test_hub_multicast_paged_counts_cocotb.py).

Where they meet: a row refused for counts (any target met: COUNT_MISMATCH, checked before
OVERFLOW) takes no arena row, so no page and no place -- the next granted row takes the
place it would have had; experts end early (final count, partial flag) while the arena's
pages fill in grant order. Every test ends with ``tb.check()`` against ``HubModel``.
The helpers are tb_hub_multicast_paged's and tb_hub_multicast_counts's.
"""
from __future__ import annotations

import random

import cocotb

from moehub.spec.formats import Reason
from moehub.verif.count_traffic import CountFeeder
from moehub.verif.tb_hub import CFG, SEED, SEEDS, TIMEOUT, limit
from moehub.verif.tb_hub_counts import cnt, early
from moehub.verif.tb_hub_multicast import IDLE, eos_of, finish, make_mc_tb, mrow, one_at_a_time, spread
from moehub.verif.tb_hub_multicast_paged import P, drops, locs, pages_of, random_mc_paged_layers

assert CFG.multicast and CFG.paged and CFG.count_packets, \
    f"{CFG.name}: these tests need multicast rows, a paged arena and count packets"
E = CFG.experts


@cocotb.test(**TIMEOUT)
async def test_row_refused_for_counts_takes_no_arena_row(dut):
    """Tiles of 4 rows. Expert 0 announced one row, expert 1 five, expert 2 none (met
    from the start). Rows one at a time: (0) takes arena row 0; (0, 1) is refused (expert
    0 met) and takes no arena row; four rows of (1) take arena rows 1..4 -- row 4 the
    first of page 1; (2, 1) is refused (expert 2 met); the last row of (1) arena row 5.
    Every expert final before the end-of-stream; POOL_FREE 12 - 2."""
    tb = await make_mc_tb(dut, tile_rows=4)
    a, b = mrow(0, [(0, 0)], token=1), mrow(1, [(0, 1), (1, 0)], token=2)
    ones = [mrow(k % 2, [(1, 0)], token=10 + k) for k in range(5)]
    h = mrow(2, [(2, 0), (1, 1)], token=20)
    counts = [cnt(0, 0, 1), cnt(1, 0, 0), cnt(2, 0, 0), cnt(0, 1, 3), cnt(1, 1, 2), cnt(2, 1, 0),
              cnt(0, 2, 0), cnt(1, 2, 0), cnt(2, 2, 0)]
    order = [a, b] + ones[:4] + [h, ones[4]]
    await tb.send_schedule(spread(counts) + IDLE + one_at_a_time(order) + IDLE + [eos_of(order)])
    model = await finish(tb)
    granted = [a] + ones
    assert [locs(tb, model)[(r.src, r.token)] for r in granted] == [0, 1, 2, 3, 4, 5]
    assert pages_of(tb, model, granted) == [0, 0, 0, 0, 1, 1]
    assert await drops(tb, Reason.COUNT_MISMATCH) == 2
    assert await tb.csr_read("POOL_FREE") == P - 2
    assert model.final == [True] * E and early(tb, model) == list(range(E))


def count_feeder(rng: random.Random, rows, errors: bool) -> CountFeeder:
    """Random traffic with count packets (some wrong, repeated or out of range with
    ``errors``)."""
    return CountFeeder(CFG, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                       p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                       count_errors=0.15 if errors else 0.0)


@cocotb.test(**limit(400))
async def test_random_multicast_paged_counts(dut):
    """Random multicast rows with count packets in a paged arena over three layers, pages
    handed back between them; MOEHUB_SEEDS consecutive seeds from MOEHUB_SEED."""
    for k in range(SEEDS):
        seed = SEED * 1000 + k
        cocotb.log.info(f"test_random_multicast_paged_counts seed {seed}")
        await random_mc_paged_layers(dut, seed, layers=3, errors=False, feeder=count_feeder)


@cocotb.test(**limit(400))
async def test_random_multicast_paged_counts_with_errors(dut):
    """As test_random_multicast_paged_counts, with count errors and v1's bad input."""
    for k in range(SEEDS):
        seed = SEED * 1000 + 500 + k
        cocotb.log.info(f"test_random_multicast_paged_counts_with_errors seed {seed}")
        await random_mc_paged_layers(dut, seed, layers=3, errors=True, feeder=count_feeder)
