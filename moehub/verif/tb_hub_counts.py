"""cocotb tests of the hub with protocol v2's per-expert count packets (``count_packets``;
run on ``tests/data/tiny-counts.yaml`` through moehub.verif.runner, see
tests/test_hub_counts_cocotb.py).

Every test ends as tb_hub's do, with ``tb.check()``: every data write, every control write
*in order* (an expert's early final count and last partial flag included), every credit
and every status register compared with the reference model (``HubModel`` of
spec/model.py). The directed tests also assert what the protocol promises on their own:
which experts end early (before any end-of-stream), the drops counted by reason.
"""
from __future__ import annotations

import random

import cocotb
from cocotb.triggers import RisingEdge

from moehub.spec.formats import CtlKind, Reason, count_addr
from moehub.verif.count_traffic import CountFeeder
from moehub.verif.hubtb import HubTB
from moehub.spec.model import Packet
from moehub.verif.tb_hub import (CFG, SEED, SEEDS, TIMEOUT, chunks, eos_all, finish, limit, make_tb,
                                 row, serial, wait_armed, wide)
from moehub.verif.traffic import random_rows

assert CFG.count_packets, f"{CFG.name}: these tests need a hub with count_packets"
L, E, S = CFG.lanes, CFG.experts, CFG.sources
IDLE = [[None] * L] * 24            # cycles with nothing offered (the pipeline drains)


def cnt(src, expert, n):
    return Packet.counts(src, expert, n)


def count_word_cycle(tb: HubTB, model, x: int):
    """Cycle of expert x's final count word (None if it was not written)."""
    a = count_addr(CFG, model.layer_count_base, x)
    return next((c for c, w in tb.ctl_out if w.kind == CtlKind.COUNT and w.addr == a), None)


def first_eos_cycle(tb: HubTB) -> int:
    return min(c for c, _, p in tb.accepted if p.kind == 1)


def early(tb: HubTB, model) -> list:
    """Experts whose final count word left before the first end-of-stream was accepted."""
    eos = first_eos_cycle(tb)
    cycles = [count_word_cycle(tb, model, x) for x in range(E)]
    return [x for x, c in enumerate(cycles) if c is not None and c < eos]


async def drops(tb: HubTB, reason: Reason) -> int:
    return await tb.csr_read("DROPS", reason)


# ---------------------------------------------------------------------------- directed
@cocotb.test(**TIMEOUT)
async def test_counts_before_rows(dut):
    """Every source announces every expert first; then the rows; the final count words
    and the last partial tiles' flags leave before any end-of-stream, the sweep only
    writes the done word."""
    tb = await make_tb(dut)
    rows = [row(0, 0, token=1), row(1, 0, token=2), row(2, 1, token=3)]
    n = {(r.src, r.expert): 1 for r in rows}
    counts = [cnt(s, x, n.get((s, x), 0)) for s in range(S) for x in range(E)]
    sched = [counts[k:k + L] for k in range(0, len(counts), L)]
    for t, r in enumerate(rows):
        sched += serial(chunks(r, tag=t), lanes=list(range(L)))
    await tb.send_schedule(sched + IDLE + [eos_all({0: 1, 1: 1, 2: 1})])
    model = await finish(tb, rows)
    assert model.final == [True] * E
    assert early(tb, model) == list(range(E)), [count_word_cycle(tb, model, x) for x in range(E)]
    last = [w.kind for _, w in tb.ctl_out][-1:]
    assert last == [CtlKind.DONE]


@cocotb.test(**TIMEOUT)
async def test_counts_among_rows(dut):
    """Counts before, between and after the rows: an expert made final by its last
    row's completion (counts first), one by its last count packet (rows first), and one
    announced as 0 by all in mid-stream."""
    tb = await make_tb(dut)
    a, b, c = row(0, 0, token=1), row(1, 0, token=2), row(2, 1, token=3)
    sched = serial([cnt(0, 0, 1), cnt(1, 0, 1), cnt(2, 0, 0)])
    sched += serial(chunks(a, tag=0) + chunks(c, tag=1), lanes=[0, 1, 2, 3])
    sched += serial([cnt(0, 2, 0), cnt(1, 2, 0), cnt(2, 2, 0)], lanes=[3])
    sched += serial(chunks(b, tag=2), lanes=[1, 2])
    sched += IDLE + serial([cnt(0, 1, 0), cnt(1, 1, 0), cnt(2, 1, 1)])
    await tb.send_schedule(sched + IDLE + [eos_all({0: 1, 1: 1, 2: 1})])
    model = await finish(tb, [a, b, c])
    assert early(tb, model) == [0, 1, 2]
    # expert 1 (its one row complete long before) ends at its last count packet
    last_count = max(cyc for cyc, _, p in tb.accepted if p.kind == 2 and p.expert == 1)
    assert count_word_cycle(tb, model, 1) > last_count


@cocotb.test(**TIMEOUT)
async def test_rows_beyond_their_count(dut):
    """Expert 0 announced 1 row, gets 2: the second is dropped as COUNT_MISMATCH (its
    credit returns). Expert 1 gets 2 rows, then counts of 1 in all: COUNT_MISMATCH at the
    last count, and the expert ends at the sweep (final count 2)."""
    tb = await make_tb(dut)
    r0, r1, r2, r3 = row(0, 0, token=1), row(0, 0, token=2), row(1, 1, token=3), row(1, 1, token=4)
    sched = serial([cnt(0, 0, 1), cnt(1, 0, 0), cnt(2, 0, 0)])
    sched += serial(chunks(r0, tag=0) + chunks(r1, tag=1) + chunks(r2, tag=0) + chunks(r3, tag=1),
                    lanes=[0, 1, 2, 3])
    sched += IDLE + serial([cnt(0, 1, 0), cnt(1, 1, 1), cnt(2, 1, 0)])
    await tb.send_schedule(sched + IDLE + [eos_all({0: 2, 1: 2})])
    model = await finish(tb)
    assert await drops(tb, Reason.COUNT_MISMATCH) == 2
    assert await tb.csr_read("ERRORS") >> Reason.COUNT_MISMATCH & 1
    assert len(tb.credit_out) == 4 and await tb.csr_read("ROWS", 0) == 1
    assert model.final[0] and not model.final[1]
    assert count_word_cycle(tb, model, 1) > first_eos_cycle(tb)


@cocotb.test(**TIMEOUT)
async def test_rows_past_the_count_in_the_next_cycle(dut):
    """Expert 0 announced 3 rows; three rows open in one cycle (granted: the count allows
    three), two more in the next cycle: both refused (COUNT_MISMATCH). The allowance after
    a cycle of several grants is the count less all of them (the count limit keeps it in
    registers, updated with the grants)."""
    tb = await make_tb(dut)
    rows = [row(s, 0, token=t) for t, s in enumerate([0, 1, 2, 0, 1], start=1)]
    cs = [chunks(r, tag=t) for r, t in zip(rows, [0, 0, 0, 1, 1])]
    sched = serial([cnt(0, 0, 3), cnt(1, 0, 0), cnt(2, 0, 0)]) + IDLE
    sched += [[c[0] for c in cs[:3]] + [None], [c[0] for c in cs[3:]] + [None, None]]
    sched += serial([x for c in cs for x in c[1:]], lanes=list(range(L)))
    await tb.send_schedule(sched + IDLE + [eos_all({0: 2, 1: 2, 2: 1})])
    model = await finish(tb)
    opened = {}
    for c, _, p in tb.accepted:
        for k, ch in enumerate(cs):
            if p == ch[0]:
                opened[k] = c
    first, second = {opened[k] for k in range(3)}, {opened[k] for k in (3, 4)}
    assert len(first) == 1 and second == {first.pop() + 1}, f"rows not opened as scheduled: {opened}"
    assert await drops(tb, Reason.COUNT_MISMATCH) == 2
    assert await tb.csr_read("ROWS", 0) == 3 and model.final[0]


@cocotb.test(**TIMEOUT)
async def test_many_rows_under_a_large_count(dut):
    """Expert 0 announced 21 rows (8 + 7 + 6) before any row: the count limit's rows left
    start far above a group's requests (its compares with the lanes' requests ahead come
    from its low bits and flags of its high bits, registered with it); 21 rows come in
    waves of four openers a cycle (every tag of every source), all granted, and a 22nd
    behind them is refused (COUNT_MISMATCH); the expert ends before any end-of-stream."""
    tb = await make_tb(dut)
    plan = [0] * 8 + [1] * 7 + [2] * 7                  # the rows' sources; the last is extra
    seen, rows, waves = {}, [], {}
    for k, s in enumerate(plan):
        i = seen[s] = seen.get(s, -1) + 1
        r = row(s, 0, token=k + 1)
        rows.append(r)
        waves.setdefault(i // 3, []).append(chunks(r, tag=i % 3))
    sched = serial([cnt(0, 0, 8), cnt(1, 0, 7), cnt(2, 0, 6)]) + IDLE
    for w in sorted(waves):
        cs = waves[w]
        sched += wide([c[0] for c in cs]) + wide([x for c in cs for x in c[1:]]) + IDLE
    await tb.send_schedule(sched + [eos_all({0: 8, 1: 7, 2: 7})])
    model = await finish(tb)
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1
    assert await tb.csr_read("ROWS", 0) == 21 and model.final[0]
    assert early(tb, model) == [0]


@cocotb.test(**TIMEOUT)
async def test_repeated_count(dut):
    """A count packet repeated in the same cycle (next lane) and in a later cycle:
    COUNT_DUPLICATE twice, ignored (the expert's total stays the first count's: a second
    row after the repeats is refused, COUNT_MISMATCH -- a repeat's 5 added to the rows
    allowed would take it)."""
    tb = await make_tb(dut)
    r, extra = row(2, 2, token=7), row(1, 2, token=8)
    sched = [[cnt(2, 2, 1), cnt(2, 2, 5), cnt(0, 2, 0)]]
    sched += serial(chunks(r, tag=0), lanes=[1, 3]) + serial([cnt(2, 2, 0), cnt(1, 2, 0)])
    sched += IDLE + serial(chunks(extra, tag=0), lanes=[0, 2])
    await tb.send_schedule(sched + IDLE + [eos_all({2: 1, 1: 1})])
    model = await finish(tb)
    assert await drops(tb, Reason.COUNT_DUPLICATE) == 2
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1 and await tb.csr_read("ROWS", 2) == 1
    assert model.final[2] and early(tb, model) == [2]


@cocotb.test(**TIMEOUT)
async def test_counts_short_at_the_sweep(dut):
    """Expert 0 announced 3 rows, only 2 come: no early end; the sweep writes its count
    (2) and flags its partial tile, and counts COUNT_MISMATCH once."""
    tb = await make_tb(dut)
    rows = [row(0, 0, token=1), row(1, 0, token=2)]
    sched = serial([cnt(0, 0, 2), cnt(1, 0, 1), cnt(2, 0, 0)], lanes=[2])
    for t, r in enumerate(rows):
        sched += serial(chunks(r, tag=t), lanes=[0, 1])
    await tb.send_schedule(sched + IDLE + [eos_all({0: 1, 1: 1})])
    model = await finish(tb, rows)
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1
    assert not model.final[0] and early(tb, model) == []


@cocotb.test(**TIMEOUT)
async def test_counts_on_all_lanes_at_once(dut):
    """Four count packets in one cycle, and in another cycle: the last count of expert 0
    (its one row complete: it ends there), on the next lane the first chunk of a row to
    expert 0 (refused in the same cycle: COUNT_MISMATCH), a repeat of lane 0's count
    (COUNT_DUPLICATE) and the last count of expert 1 (which ends later, at its row). The
    input takes them one a cycle and ends a group at a count packet (the count gate's
    admission): the row's chunk comes in the cycle after its count."""
    tb = await make_tb(dut)
    a, q, b = row(0, 0, token=1), row(2, 0, token=2), row(2, 1, token=3)
    qc = chunks(q, tag=0)
    sched = [[cnt(0, 0, 1), cnt(1, 0, 0), cnt(0, 1, 0), cnt(1, 1, 0)]]
    sched += serial(chunks(a, tag=0), lanes=[0, 1, 2, 3]) + IDLE
    sched += [[cnt(2, 0, 0), qc[0], cnt(2, 0, 5), cnt(2, 1, 1)]]
    sched += serial(qc[1:] + chunks(b, tag=1), lanes=[3, 2, 1, 0])
    await tb.send_schedule(sched + IDLE + [eos_all({0: 1, 2: 2})])
    model = await finish(tb)
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1
    assert await drops(tb, Reason.COUNT_DUPLICATE) == 1
    assert model.final == [True, True, False] and early(tb, model) == [0, 1]
    assert len(tb.credit_out) == 3 and await tb.csr_read("ROWS", 0) == 1
    took = [c for c, _, p in tb.accepted if p.kind == 2]
    assert len(set(took)) == len(took) == 7, f"count packets taken at {took}"
    assert [c for c, _, p in tb.accepted if p == qc[0]] == [took[4] + 1], "the row's chunk not a cycle behind its count"


@cocotb.test(**TIMEOUT)
async def test_count_of_zero(dut):
    """Every source announces 0 rows for expert 2 (in one cycle): its final count 0 is
    written at once, with no flag; a row sent to it anyway is refused (COUNT_MISMATCH)."""
    tb = await make_tb(dut)
    r = row(1, 2, token=9)
    sched = [[None, cnt(0, 2, 0), cnt(1, 2, 0), cnt(2, 2, 0)]] + IDLE
    sched += serial(chunks(r, tag=1), lanes=[0, 1])
    await tb.send_schedule(sched + IDLE + [eos_all({1: 1})])
    model = await finish(tb)
    words = [w for _, w in tb.ctl_out]
    a = count_addr(CFG, model.layer_count_base, 2)
    assert words[0].kind == CtlKind.COUNT and words[0].addr == a and words[0].data == 0
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1 and await tb.csr_read("ROWS", 2) == 0
    assert early(tb, model) == [2]


@cocotb.test(**TIMEOUT)
async def test_bad_count_packets(dut):
    """A count packet before START (NOT_ARMED), from a source that does not exist
    (BAD_SOURCE), for an expert that does not exist (BAD_EXPERT): each dropped, counted,
    nothing else changes."""
    tb = await make_tb(dut, start=False)
    await tb.send_schedule([[cnt(0, 0, 1)]] + IDLE)
    assert await drops(tb, Reason.NOT_ARMED) == 1
    await tb.start_layer()
    r = row(0, 0, token=4)
    bad = [cnt(S, 0, 1), cnt(0, E, 1)] if E < 1 << CFG.expert_bits else [cnt(S, 0, 1)]
    sched = serial(bad + [cnt(0, 0, 1), cnt(1, 0, 0), cnt(2, 0, 0)] + chunks(r, tag=0))
    await tb.send_schedule(sched + IDLE + [eos_all({0: 1})])
    model = await finish(tb, [r])
    assert await drops(tb, Reason.BAD_SOURCE) == 1
    assert await drops(tb, Reason.BAD_EXPERT) == len(bad) - 1
    assert early(tb, model) == [0]


@cocotb.test(**TIMEOUT)
async def test_rows_after_the_layer_finished(dut):
    """A layer finishes (expert 0's counts, its one row, every end-of-stream; no counts
    for the other experts, so nothing caps their grants); rows sent after it, before the
    next START, are dropped as NOT_ARMED and take nothing: ROWS stays as the layer left it.
    (Two rules keep them out of the requests the allocator counts: the layer is not live,
    and every source's end-of-stream is in with its count reached, so they are POST_EOS
    too; without both, they are granted.)"""
    tb = await make_tb(dut)
    r = row(0, 0, token=1)
    counts = [cnt(s, 0, int(s == 0)) for s in range(S)]
    sched = [counts[k:k + L] for k in range(0, len(counts), L)] + serial(chunks(r, tag=0))
    await tb.send_schedule(sched + IDLE + [eos_all({0: 1})])
    await finish(tb, [r])
    late = [row(1, 1, token=2), row(2, 1, token=3), row(0, E - 1, token=4)]
    await tb.send_schedule([[chunks(x, tag=1)[0] for x in late] + [None] * (L - len(late))] + IDLE)
    await finish(tb)
    assert await drops(tb, Reason.NOT_ARMED) == len(late)
    assert [await tb.csr_read("ROWS", x) for x in range(E)] == [1] + [0] * (E - 1)


@cocotb.test(**TIMEOUT)
async def test_count_and_overflow_in_one_cycle(dut):
    """Expert 0's region holds 1 row, its counts say 2. In one cycle: a row (granted), a
    row (OVERFLOW), the last count, a row: the rows held are 1 (a refused request holds
    none), below the total, so the last row is an OVERFLOW too, not a COUNT_MISMATCH; at
    the sweep the expert is short (COUNT_MISMATCH)."""
    tb = await make_tb(dut, caps=[1] + [CFG.max_rows_per_expert] * (E - 1))
    a, b, c = row(0, 0, token=1), row(0, 0, token=2), row(1, 0, token=3)
    ca, cb, cc = chunks(a, tag=0), chunks(b, tag=1), chunks(c, tag=0)
    sched = serial([cnt(0, 0, 2), cnt(1, 0, 0)]) + [[ca[0], cb[0], cnt(2, 0, 0), cc[0]]]
    sched += serial(ca[1:] + cb[1:] + cc[1:], lanes=[0, 1, 2, 3])
    await tb.send_schedule(sched + IDLE + [eos_all({0: 2, 1: 1})])
    model = await finish(tb)
    assert await drops(tb, Reason.OVERFLOW) == 2 and await tb.csr_read("OVERFLOW", 0) == 2
    assert await drops(tb, Reason.COUNT_MISMATCH) == 1
    assert early(tb, model) == [] and await tb.csr_read("ROWS", 0) == 1


@cocotb.test(**TIMEOUT)
async def test_early_flag_waits_for_its_writes(dut):
    """The data-write ports held: an expert's row completes and its counts are met, so its
    final count may leave, but its last partial tile's flag waits until the row's data
    writes are out (the ordering guard covers the early flag too)."""
    tb = await make_tb(dut)
    await wait_armed(tb)
    r = row(0, 1, token=3)
    tb.hold("wr")
    # (few cycles: the input stops once a held write is GROUP_AGE_LIMIT groups old)
    tb.offer([[cnt(0, 1, 1), cnt(1, 1, 0), cnt(2, 1, 0)]] + wide(chunks(r, tag=0)))
    for _ in range(200):
        await RisingEdge(dut.clk)
    kinds = [w.kind for _, w in tb.ctl_out]
    assert CtlKind.COUNT in kinds and CtlKind.FLAG not in kinds, kinds
    tb.release()
    await tb.send_schedule(IDLE + [eos_all({0: 1})])
    model = await finish(tb, [r])
    assert early(tb, model) == [1]
    flag = next(c for c, w in tb.ctl_out if w.kind == CtlKind.FLAG)
    assert flag > max(c for w in tb.wr_out for c, _, _ in w)


# ---------------------------------------------------------------------------- random
async def random_count_layer(dut, seed: int, *, n_rows: int, errors: bool):
    """One layer of random rows and count packets against the model (print the seed on
    failure: every assertion message carries it)."""
    rng = random.Random(seed)
    tb = HubTB(dut, CFG, seed, bp=rng.choice([0, 0.2, 0.4]))
    await tb.start()
    await tb.configure(tile_rows=rng.choice([2, 4, 8]), epoch=seed & 0xFFFF)
    await tb.start_layer()
    rows = random_rows(CFG, rng, n_rows, skew=rng.choice([0, 0.5]))
    feeder = CountFeeder(CFG, rows, rng, idle=rng.choice([0, 0.3]), early_eos=rng.random() < 0.5,
                         p_count=rng.choice([0.05, 0.3, 0.9]), errors=0.1 if errors else 0.0,
                         count_errors=0.15 if errors else 0.0)
    tb.feed(feeder, credit_delay=rng.randrange(0, 8))
    await tb.wait_idle()
    model = await tb.check()
    assert model.done, f"layer did not finish (seed {seed})"
    if not errors:
        tb.check_invariants(model, rows)
        assert model.final == [True] * E, f"an expert did not end early (seed {seed})"
    else:
        bad = model.drop_counts[Reason.COUNT_MISMATCH] + model.drop_counts[Reason.COUNT_DUPLICATE]
        assert bad > 0, f"no count error was injected (seed {seed})"
    tb.stop()
    return model


@cocotb.test(**limit(400))
async def test_random_counts(dut):
    """Random rows with count packets before and among them (clean: every expert ends
    before the end of the layer), back-pressure, idle lanes, early EOS, credit delay;
    MOEHUB_SEEDS consecutive seeds from MOEHUB_SEED."""
    for k in range(SEEDS):
        seed = SEED * 1000 + k
        cocotb.log.info(f"test_random_counts seed {seed}")
        await random_count_layer(dut, seed, n_rows=48, errors=False)


@cocotb.test(**limit(400))
async def test_random_counts_with_errors(dut):
    """As test_random_counts, with wrong counts (one row off), repeated count packets,
    counts for experts out of range, and v1's bad input (duplicate chunks, ...)."""
    for k in range(SEEDS):
        seed = SEED * 1000 + 500 + k
        cocotb.log.info(f"test_random_counts_with_errors seed {seed}")
        await random_count_layer(dut, seed, n_rows=32, errors=True)
