"""The relay hub's staging and credit join alone (moehub/rtl/relay/stage.py,
credit_join.py), directed, in the Amaranth simulator: the fast set's checks of the
relay side (the whole relay hub on a layer: tests/test_rtl_relay_hub_whole.py, slow set).

Staging (hub node 0, rank 1 of 2 nodes x 2 GPUs, tags 0 and 1 of the remote GPU 3):
a row's chunks in any order, one twice and one past the row among them -- each new chunk
of a row naming another GPU written once at RELAY_STAGE_BASE + slot x stride + chunk x
chunk_bytes, the duplicate and the stray counted and not written, the row's first chunk
marked (its slot, whether it names this GPU), the whole row handed on with its last chunk;
a row naming only this GPU tracked but not written; a dropped row's credit owed once it
is whole (its slot's next row after the credit's round trip: a chunk of the slot in the
cycle after its row was whole counts as a duplicate of that row). Both stagings take a
stream of chunks one a cycle while their outputs are ready (the input's ready a register).

Credit join: a relay row naming this GPU is credited once both its forwards (``fu``) and
the packet manager's credit of its own targets are in, whichever comes first; one naming
no target here on its forwards alone; a dropped row's at once; a direct source's and a
forward row's (a remote source of another rank) passed through unchanged.
"""
import pytest

from conftest import run_testbench

from moehub.rtl.relay.credit_join import RelayCredits
from moehub.rtl.relay.stage import PartialStage, RelayStage
from moehub.spec.formats import RelayPorts, pack_fields
from moehub.verif.formal.plant import broken_class
from test_rtl_relay_ingress import R22, R33

BASE = 0x3000_0000


def stage_word(cfg, tag, chunk, gpus, drop=0, local=0, data=None):
    """A relay chunk for the staging: source GPU 3 (node 1, rank 1), ``gpus`` its targets'."""
    T = cfg.relay_targets
    return pack_fields(RelayPorts(cfg).stage, dict(
        src_node=1, src_rank=1, tag=tag, token=7, valid=(1 << len(gpus)) - 1,
        gpu=list(gpus) + [0] * (T - len(gpus)), expert=list(range(T)), slot=list(range(T)), weight=[0] * T,
        chunk=chunk, data=chunk + 100 * tag if data is None else data, drop=drop, local=local))


def run_stage(cfg, words, unit=RelayStage):
    """Feed ``words`` one a cycle (waiting for ready); returns the writes, rows, marks, dones
    and the drop counter."""
    dut = unit(cfg)
    seen = {"wr": [], "row": [], "mark": [], "done": [], "drops": None}

    async def bench(ctx):
        ctx.set(dut.node, 0)
        ctx.set(dut.rank, 1)
        ctx.set(dut.base, BASE)
        ctx.set(dut.wr.ready, 1)
        ctx.set(dut.row.ready, 1)
        queue = list(words)
        for cycle in range(len(words) * 3 + 20):
            ctx.set(dut.i.valid, bool(queue) and queue[0] is not None)
            if queue and queue[0] is not None:
                ctx.set(dut.i.payload.as_value(), queue[0])
            if ctx.get(dut.wr.valid):
                seen["wr"].append((ctx.get(dut.wr.payload.addr), ctx.get(dut.wr.payload.data)))
            if ctx.get(dut.row.valid):
                seen["row"].append((ctx.get(dut.row.payload.tag), ctx.get(dut.row.payload.token)))
                seen["row_at"] = cycle
            if ctx.get(dut.mark_valid):
                seen["mark"].append((ctx.get(dut.mark_node), ctx.get(dut.mark_tag), ctx.get(dut.mark_local)))
            if ctx.get(dut.done.valid):
                seen["done"].append((ctx.get(dut.done.payload.src), ctx.get(dut.done.payload.tag)))
            if queue and (queue[0] is None or ctx.get(dut.i.ready)):
                queue.pop(0)
            await ctx.tick()
        seen["drops"] = ctx.get(dut.drops)

    run_testbench(dut, bench)
    return seen


def test_staging():
    cfg = R22
    C = cfg.chunks_per_row
    order = [3, 0, 5, 3] + [c for c in range(C) if c not in (0, 3, 5)] + [C]   # chunk 3 twice, C past the row
    words = [stage_word(cfg, 1, c, (0, 1)) for c in order]                  # tag 1: GPUs 0 (forwarded) and 1 (here)
    words += [stage_word(cfg, 0, c, (1,), local=1) for c in range(C)]     # tag 0: this GPU only
    words += [None] * 4                                                   # (its credit's round trip)
    words += [stage_word(cfg, 0, c, (0,), drop=1) for c in range(C)]      # tag 0 again: a dropped row
    seen = run_stage(cfg, words)
    # slot of (GPU 3, tag t) = t (one other node); the tag-1 row written once per chunk
    assert sorted(seen["wr"]) == [(BASE + 1 * cfg.stride_bytes + c * cfg.chunk_bytes, c + 100) for c in range(C)]
    assert seen["mark"] == [(1, 1, 0), (1, 0, 1)]           # (first chunks of the good rows: node, tag, here)
    assert seen["row"] == [(1, 7), (0, 7)] and seen["done"] == [(3, 0)] and seen["drops"] == 2, seen


def credit_bench(events, unit=RelayCredits):
    """``events``: per cycle a dict of inputs (mark=(tag, local) of GPU 3, fu=(src, tag),
    pm=(src, tag), done=(src, tag)); returns the credits out with their cycle."""
    cfg = R22
    dut = unit(cfg)
    out = []

    async def bench(ctx):
        ctx.set(dut.node, 0)
        ctx.set(dut.rank, 1)
        ctx.set(dut.credit.ready, 1)
        for cycle, ev in enumerate(events + [{}] * 6):
            ctx.set(dut.mark_valid, "mark" in ev)
            if "mark" in ev:
                ctx.set(dut.mark_node, 1)                # (GPU 3's node)
                ctx.set(dut.mark_tag, ev["mark"][0])
                ctx.set(dut.mark_local, ev["mark"][1])
            for name in ("fu", "pm", "done"):
                port = getattr(dut, name)
                ctx.set(port.valid, name in ev)
                if name in ev:
                    ctx.set(port.payload.src, ev[name][0])
                    ctx.set(port.payload.tag, ev[name][1])
            if ctx.get(dut.credit.valid):
                out.append((cycle, ctx.get(dut.credit.payload.src), ctx.get(dut.credit.payload.tag)))
            for name in ("fu", "pm"):
                assert name not in ev or ctx.get(getattr(dut, name).ready), (cycle, name)
            await ctx.tick()

    run_testbench(dut, bench)
    return out


def test_credit_join():
    """Hub (node 0, rank 1) of 2 x 2: GPU 3 is the remote GPU of its rank."""
    ev = [{"mark": (0, 1)}, {}, {"fu": (3, 0)}, {}, {}, {"pm": (3, 0)},     # forwards first: waits
          {"mark": (1, 1)}, {"pm": (3, 1)}, {}, {"fu": (3, 1)},              # own targets first: waits
          {"mark": (0, 0)}, {"fu": (3, 0)},                                   # no target here: at once
          {"pm": (0, 1)}, {"pm": (2, 1)}, {"done": (3, 1)}]                   # direct, a forward row's, dropped
    # (each a cycle after its second half: fu and pm pass a register; a dropped row's credit through
    # its slot's bit and two registers, three cycles)
    assert credit_bench(ev) == [(6, 3, 0), (10, 3, 1), (12, 3, 0), (13, 0, 1), (14, 2, 1), (17, 3, 1)]


def test_credit_join_keeps_every_dropped_rows_credit_while_the_port_waits():
    """Hub (node 0, rank 1) of 3 x 3 GPUs, 3 tags: every slot of its window (GPUs 4 and 7,
    tags 0-2) holds a dropped row whose credit is owed while the credit port is held back
    for 20 cycles: once it is ready, each of the six credits leaves exactly once, one a
    cycle (a FIFO of 4 in front of the port lost the fifth and sixth)."""
    cfg = R33
    dut = RelayCredits(cfg)
    slots = [(s, t) for s in (4, 7) for t in range(cfg.tags_per_source)]
    out = []

    async def bench(ctx):
        ctx.set(dut.node, 0)
        ctx.set(dut.rank, 1)
        for cycle in range(40):
            ctx.set(dut.credit.ready, cycle >= 20)
            k = cycle - 2                   # (node and rank are set before any row: a cycle to register)
            ctx.set(dut.done.valid, 0 <= k < len(slots))
            if 0 <= k < len(slots):
                ctx.set(dut.done.payload.src, slots[k][0])
                ctx.set(dut.done.payload.tag, slots[k][1])
            if ctx.get(dut.credit.valid) and ctx.get(dut.credit.ready):
                out.append((cycle, (ctx.get(dut.credit.payload.src), ctx.get(dut.credit.payload.tag))))
            await ctx.tick()

    run_testbench(dut, bench)
    assert sorted(c for _, c in out) == slots
    assert [cycle for cycle, _ in out] == list(range(20, 26))


@pytest.mark.plants
def test_planted_bugs_are_caught():
    """The join crediting a row on its forwards alone, the staging handing a row on at its
    first chunk: each fails its check."""
    early = broken_class("moehub.rtl.relay.credit_join", "f_now = ((~need | pm_in) & fu.oh).any()",
                         "f_now = fu.oh.any()", "RelayCredits")
    ev = [{"mark": (0, 1)}, {}, {"fu": (3, 0)}, {}, {}, {"pm": (3, 0)}]
    assert credit_bench(ev, early) != credit_bench(ev) == [(6, 3, 0)]
    first = broken_class("moehub.rtl.relay.stage", "m.d.comb += [self.row.valid.eq(whole & ~s4.drop),",
                         "m.d.comb += [self.row.valid.eq(first & ~s4.drop),", "RelayStage")
    words = [stage_word(R22, 1, c, (0,)) for c in range(R22.chunks_per_row)]
    assert run_stage(R22, words, first)["row_at"] < run_stage(R22, words)["row_at"]


def take_cycles(dut, words):
    """Offer ``words`` back to back with every output ready; the cycle each is taken."""
    taken = []

    async def bench(ctx):
        if hasattr(dut, "node"):
            ctx.set(dut.node, 0)
            ctx.set(dut.rank, 1)
        ctx.set(dut.base, BASE)
        ctx.set(dut.wr.ready, 1)
        ctx.set(dut.row.ready, 1)
        for cycle in range(3 * len(words) + 10):
            if len(taken) == len(words):
                break
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.as_value(), words[len(taken)])
            if ctx.get(dut.i.ready):
                taken.append(cycle)
            await ctx.tick()

    run_testbench(dut, bench)
    return taken


def partial_word(cfg, sender, ptag, chunk):
    return pack_fields(RelayPorts(cfg).pstage, dict(sender=sender, ptag=ptag, src_node=0, token=5, slot=0,
                                                    chunk=chunk, data=chunk, drop=0))


def test_stagings_take_a_stream_one_chunk_a_cycle():
    """Six whole rows back to back (every chunk written to HBM; the partial staging's rows
    into its row queue): each staging takes a chunk every cycle from cycle 1 (its ready, a
    register, is first set then). Its FIFOs hold the bound its ready keeps beside the two
    cycles a chunk spends in each; with a write FIFO one entry shorter the partial staging
    took 96 chunks in 113 cycles."""
    cfg, C = R22, R22.chunks_per_row
    relay = [stage_word(cfg, r % 2, c, (0,)) for r in range(6) for c in range(C)]
    pairs = [(s, t) for s in range(cfg.node_gpus) for t in range(cfg.partial_span)]
    partial = [partial_word(cfg, *pairs[r % len(pairs)], c) for r in range(6) for c in range(C)]
    for unit, words in ((RelayStage, relay), (PartialStage, partial)):
        assert take_cycles(unit(cfg), words) == list(range(1, len(words) + 1)), unit.__name__
