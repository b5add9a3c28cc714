"""cocotb tests of the hub with protocol v2's multicast rows in a paged arena
(``max_targets`` > 1 and ``pool_pages`` > 0; run on ``tests/data/tiny-multicast-paged.yaml``
through moehub.verif.runner, see tests/test_hub_multicast_paged_cocotb.py).

A multicast row's data lands once, in the pool: the arena's rows fill pages one tile at a
time, in the order the rows are granted (one stream for every expert: the index arrays
are per expert, the data is not), row ``n`` of the arena at ``page << log2(tile rows) | n
mod tile rows`` -- its place ``loc``, which each target's metadata word names. A row that
starts a tile when the pool has no page left is refused (OVERFLOW, counted for each of its
targets); software hands pages back with PAGE_FREE (one not handed out: PAGE_BAD).

Every test ends with ``tb.check()`` against ``HubModel``: every data write, every control
write in order, every credit and every status register (ROWS, OVERFLOW, DROPS, POOL_FREE).
The directed tests also assert the pages on their own, from the writes and metadata words
(:func:`pages_of`, independent of the model).
"""
from __future__ import annotations

import random

import cocotb

from moehub.spec.formats import CtlKind, Reason
from moehub.verif.hubtb import pool_hub_tb, random_returns, return_pages
from moehub.verif.tb_hub import CFG, SEED, SEEDS, TIMEOUT, limit
from moehub.verif.tb_hub_multicast import (IDLE, check_multicast, chunks, eos_of, finish, make_mc_tb, mrow,
                                           one_at_a_time, random_mc_rows, rows_in_one_cycle)
from moehub.verif.traffic import LaneFeeder

assert CFG.multicast and CFG.paged, f"{CFG.name}: these tests need multicast rows in a paged arena"
L, E, S, P = CFG.lanes, CFG.experts, CFG.sources, CFG.pool_pages


def locs(tb, model, since: int = 0) -> dict:
    """{(src, token): loc} of the metadata words written from cycle ``since`` on."""
    out = {}
    for cyc, c in tb.ctl_out:
        if c.kind == CtlKind.META and cyc >= since:
            f = tb.fmt.meta_word.unpack(c.data)
            out.setdefault((f["src"], f["token"]), f["loc"])
    return out


def pages_of(tb, model, rows, since: int = 0) -> list:
    """The page of each of ``rows`` (None: refused), from its metadata words' ``loc`` at the
    layer's tile size; asserts each granted row's data was written there."""
    at = locs(tb, model, since)
    writes = {a for lane in tb.wr_out for cyc, a, _ in lane if cyc >= since}
    out = []
    for r in rows:
        loc = at.get((r.src, r.token))
        if loc is not None:
            base = model.pool_base + loc * CFG.stride_bytes
            assert {base + c * CFG.chunk_bytes for c in range(CFG.chunks_per_row)} <= writes, \
                f"row {(r.src, r.token)}: data not at its place {loc}"
        out.append(None if loc is None else loc >> model.layer_tile_rows_log2)
    return out


async def drops(tb, reason: Reason) -> int:
    return await tb.csr_read("DROPS", reason)


# ---------------------------------------------------------------------------- directed
@cocotb.test(**TIMEOUT)
async def test_arena_pages_in_grant_order(dut):
    """Tiles of 4 rows: four rows opened in one cycle (overlapping target sets) take arena
    rows 0..3 of page 0 in lane order; two more rows take page 1; each row's data lands
    once at ``page x 4 + row mod 4``, every target's metadata word names it; POOL_FREE
    12 - 2. At tiles of 8 rows (the next layer, pages handed back) the six rows share page
    1 -- the first page handed back."""
    tb = await make_mc_tb(dut, tile_rows=4)
    sets = [[(0, 0), (1, 1)], [(1, 0)], [(2, 2), (0, 1), (1, 0)], [(0, 2)]]
    rows = [mrow(s, t, token=10 + k) for k, (s, t) in enumerate(zip([0, 1, 2, 0], sets))]
    more = [mrow(1, [(2, 0)], token=20), mrow(2, [(0, 0), (2, 1)], token=21)]
    await tb.send_schedule(rows_in_one_cycle(list(zip(rows, [0, 0, 0, 1]))) + IDLE + one_at_a_time(more)
                           + IDLE + [eos_of(rows + more)])
    model = await finish(tb, rows + more)
    assert pages_of(tb, model, rows + more) == [0, 0, 0, 0, 1, 1]
    assert [locs(tb, model)[(r.src, r.token)] for r in rows + more] == [0, 1, 2, 3, 4, 5]
    assert await tb.csr_read("POOL_FREE") == P - 2
    await return_pages(tb, [1, 0])
    assert await tb.csr_read("POOL_FREE") == P
    await tb.csr_write("TILE_ROWS_LOG2", 3)
    await tb.start_layer()
    since = tb.cycle
    again = [mrow(s % S, [(s % E, 0)], token=40 + s) for s in range(6)]
    await tb.send_schedule(one_at_a_time(again) + IDLE + [eos_of(again)])
    model = await finish(tb)
    assert pages_of(tb, model, again, since) == [1] * 6, "the oldest page handed back is taken first"
    assert await tb.csr_read("POOL_FREE") == P - 1


@cocotb.test(**TIMEOUT)
async def test_pool_exhausted_refuses_rows(dut):
    """Tiles of 4 rows, 12 pages: 48 arena rows. 47 rows fill 11 pages and 3 rows of the
    last; then, one cycle, a row that fits in the last page's last row, two rows that would
    start a tile (OVERFLOW, counted for every target: no page) and, last, a row naming an
    expert whose region is full (OVERFLOW for that). The pool's margin makes the
    admission tight on the way (one data packet a cycle): the rows are still granted
    exactly as the model grants them in lane order. POOL_FREE 0; no data of a refused row."""
    tb = await make_mc_tb(dut, tile_rows=4, caps=[CFG.max_rows_per_expert, CFG.max_rows_per_expert, 16])
    fill = [mrow(k % S, [(k % 2, 0)] + ([(2, 1)] if k < 16 else []), token=k) for k in range(47)]
    last = [mrow(0, [(0, 1), (1, 2)], token=60), mrow(1, [(1, 0)], token=61),
            mrow(2, [(0, 0), (1, 1)], token=62), mrow(0, [(2, 0)], token=63)]
    await tb.send_schedule(one_at_a_time(fill) + IDLE + rows_in_one_cycle(list(zip(last, [0, 0, 0, 1])))
                           + IDLE + [eos_of(fill + last)])
    model = await finish(tb)
    assert pages_of(tb, model, last) == [11, None, None, None]
    assert await drops(tb, Reason.OVERFLOW) == 3
    assert [await tb.csr_read("OVERFLOW", x) for x in range(E)] == [1, 2, 1]
    assert await tb.csr_read("POOL_FREE") == 0
    assert sum(len(w) for w in tb.wr_out) == 48 * CFG.chunks_per_row


@cocotb.test(**TIMEOUT)
async def test_rows_on_every_lane_as_the_pool_runs_out(dut):
    """40 rows take 10 of the 12 pages; then nine rows open on every lane, four a cycle
    offered (every source's tags): eight fit the last two pages, the ninth is OVERFLOW.
    With two pages left the arena is below its admission margin (6 pages at 4-row tiles),
    so the input takes one data packet a cycle and the rows are granted as the model
    grants them; an arena that counted itself roomy here would grant all nine (a hub
    granting a row no page: the writes and POOL_FREE would differ)."""
    tb = await make_mc_tb(dut, tile_rows=4)
    fill = [mrow(k % S, [(k % E, 0)], token=k) for k in range(40)]
    burst = [mrow(k % S, [((k + 1) % E, 0), ((k + 2) % E, 1)], token=100 + k) for k in range(9)]
    tags = [k // S for k in range(9)]
    heads = [chunks(r, t, [0])[0] for r, t in zip(burst, tags)]
    rest = [p for r, t in zip(burst, tags) for p in chunks(r, t, range(1, CFG.chunks_per_row))]
    sched = [heads[k:k + L] + [None] * (L - len(heads[k:k + L])) for k in range(0, 9, L)]
    sched += [rest[k:k + L] + [None] * (L - len(rest[k:k + L])) for k in range(0, len(rest), L)]
    await tb.send_schedule(one_at_a_time(fill) + IDLE + sched + IDLE + [eos_of(fill + burst)])
    model = await finish(tb)
    assert sorted(p for p in pages_of(tb, model, burst) if p is not None) == [10] * 4 + [11] * 4
    assert await drops(tb, Reason.OVERFLOW) == 1
    assert await tb.csr_read("POOL_FREE") == 0


@cocotb.test(**TIMEOUT)
async def test_page_returns(dut):
    """A layer takes pages 0..2; PAGE_FREE of 2, of 2 again (PAGE_BAD), of 9 (never handed
    out: PAGE_BAD) and of 0; the next layer's rows take 2, then 0, then the fresh page 3.
    POOL_FREE follows every step."""
    tb = await make_mc_tb(dut, tile_rows=4)
    first = [mrow(k % S, [(k % E, 0)], token=k) for k in range(10)]
    await tb.send_schedule(one_at_a_time(first) + IDLE + [eos_of(first)])
    await finish(tb, first)
    assert await tb.csr_read("POOL_FREE") == P - 3
    await return_pages(tb, [2, 2, 9, 0])
    assert await drops(tb, Reason.PAGE_BAD) == 2
    assert await tb.csr_read("POOL_FREE") == P - 1
    await tb.start_layer()
    since = tb.cycle
    second = [mrow(k % S, [((k + 1) % E, 0), ((k + 2) % E, 1)], token=20 + k) for k in range(9)]
    await tb.send_schedule(one_at_a_time(second) + IDLE + [eos_of(second)])
    model = await finish(tb)
    assert pages_of(tb, model, second, since) == [2] * 4 + [0] * 4 + [3]
    assert await tb.csr_read("POOL_FREE") == P - 4


# ---------------------------------------------------------------------------- random
def lane_feeder(rng: random.Random, rows, errors: bool) -> LaneFeeder:
    """The random tests' feeder of ``rows`` (idle lanes, early EOS, v1's bad input with
    ``errors``)."""
    return LaneFeeder(CFG, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                      errors=0.15 if errors else 0.0)


async def random_mc_paged_layers(dut, seed: int, *, layers: int, errors: bool, feeder=lane_feeder):
    """``layers`` layers of random multicast rows (random tile sizes, sometimes more rows
    than the pool holds, sometimes small regions; back-pressure, idle lanes, early EOS,
    credit delay; v1's bad input with ``errors``), a random part of the pages handed back
    between layers (sometimes a bad return), against the model; the seed is in every
    assertion message. ``feeder(rng, rows, errors)`` makes each layer's traffic
    (tb_hub_multicast_paged_counts adds count packets)."""
    rng = random.Random(seed)
    tb = await pool_hub_tb(dut, CFG, seed, rng)
    refused = 0
    for layer in range(layers):
        tile = rng.choice([4, 8, 16])
        await tb.csr_write("TILE_ROWS_LOG2", tile.bit_length() - 1)
        await tb.csr_write("EPOCH", (seed + layer) & 0xFFFF)
        small = rng.random() < 0.3
        for x in range(E):
            await tb.csr_write("REGION_CAP", rng.randrange(4, 20) if small else CFG.max_rows_per_expert, x)
        await tb.start_layer()
        rows = random_mc_rows(rng, rng.randrange(8, 60), CFG.max_rows_per_expert)
        tb.feed(feeder(rng, rows, errors), credit_delay=rng.randrange(0, 8))
        model = await tb.finish_layer(flush_if_open=errors)
        assert model.done, f"layer {layer} did not finish (seed {seed})"
        refused += model.drop_counts[Reason.OVERFLOW]
        await return_pages(tb, random_returns(model, rng, P))
    await tb.check()
    tb.stop()
    cocotb.log.info(f"seed {seed}: {refused} rows refused for want of room or a page")


@cocotb.test(**limit(400))
async def test_random_multicast_paged(dut):
    """Random multicast rows in pages over three layers; MOEHUB_SEEDS consecutive seeds
    from MOEHUB_SEED."""
    for k in range(SEEDS):
        seed = SEED * 1000 + k
        cocotb.log.info(f"test_random_multicast_paged seed {seed}")
        await random_mc_paged_layers(dut, seed, layers=3, errors=False)


@cocotb.test(**limit(400))
async def test_random_multicast_paged_with_errors(dut):
    """As test_random_multicast_paged, with v1's bad input mixed in."""
    for k in range(SEEDS):
        seed = SEED * 1000 + 500 + k
        cocotb.log.info(f"test_random_multicast_paged_with_errors seed {seed}")
        await random_mc_paged_layers(dut, seed, layers=3, errors=True)
