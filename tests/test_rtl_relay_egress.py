"""The relay hub's forward egress alone (moehub/rtl/relay/egress.py), directed, in the
Amaranth simulator (hub node 0 of 2 nodes x 2 GPUs; the staging's memory answers each
read a fixed number of cycles later, the read's address as its data).

* Each forward reads its staged row (at RELAY_STAGE_BASE + slot x stride + chunk x
  chunk_bytes, the slot of its original source and R tag) chunk by chunk and sends every
  chunk to its destination as a forward row with the forward's header; a relay row's
  credit leaves only after every chunk of the forwards before it is out. (The slot is
  written out here, not taken from the RTL's ``stage_slot``.)
* Commands are taken one a cycle while the egress drains them (a stream of credits), and
  with its reads stalled it holds five: four in its FIFO, one in the register in front of
  it (the forward unit's pick ends at that register; its ready is a register, set a cycle
  ahead from the room there will be).
"""
import pytest

from conftest import run_testbench

from moehub.rtl.relay.egress import COMMANDS, ForwardEgress
from moehub.spec.formats import RelayFormats, RelayPorts, RowClass, pack_fields
from moehub.verif.formal.plant import broken_class
from test_rtl_relay_ingress import R22

BASE = 0x3000_0000
#: cycles from a read's handshake to its answer
LATENCY = 3


def forward(cfg, dst, tag, token, ftag=0):
    """A forward command: source GPU 3 (node 1, rank 1), R tag ``tag``, one target."""
    ports = RelayPorts(cfg)
    return ("fwd", pack_fields(ports.fwd, dict(dst=dst, fwd=1, ftag=ftag, src_node=1, src_rank=1, token=token,
                                               valid=1, expert=[dst, 0, 0], slot=[0, 0, 0])), tag)


def credit(cfg, src, tag):
    return ("credit", pack_fields(RelayPorts(cfg).rcredit, dict(src=src, tag=tag)), 0)


def run_egress(cfg, commands, cycles=80, read_ready=True, dut=None):
    """Offer ``commands`` in order (each until taken); returns the cycle each was taken, the
    forward words out as (cycle, dst, fields) and the credits out as (cycle, payload)."""
    dut = dut or ForwardEgress(cfg)
    seen = {"taken": [], "out": [], "credit": []}
    fmt = RelayFormats(cfg).forward_row

    async def bench(ctx):
        ctx.set(dut.node, 0)
        ctx.set(dut.base, BASE)
        ctx.set(dut.rd.ready, int(read_ready))
        ctx.set(dut.out.ready, 1)
        ctx.set(dut.credit.ready, 1)
        queue, reads = list(commands), []
        for cycle in range(cycles):
            kind, payload, tag = queue[0] if queue else (None, 0, 0)
            ctx.set(dut.fwd.valid, kind == "fwd")
            ctx.set(dut.rcredit.valid, kind == "credit")
            ctx.set(dut.fwd.payload.as_value() if kind == "fwd" else dut.rcredit.payload.as_value(), payload)
            ctx.set(dut.fwd_tag, tag)
            ctx.set(dut.rdata.valid, bool(reads) and reads[0][0] <= cycle)
            ctx.set(dut.rdata.payload, reads[0][1] if reads else 0)
            if kind and ctx.get(dut.fwd.ready if kind == "fwd" else dut.rcredit.ready):
                seen["taken"].append(cycle)
                queue.pop(0)
            if ctx.get(dut.rd.valid) and ctx.get(dut.rd.ready):
                addr = ctx.get(dut.rd.payload)
                reads.append((cycle + LATENCY, addr & ((1 << cfg.data_bits) - 1)))
            if ctx.get(dut.rdata.valid) and ctx.get(dut.rdata.ready):
                reads.pop(0)
            if ctx.get(dut.out.valid):
                word = fmt.unpack(ctx.get(dut.out.payload.word))
                seen["out"].append((cycle, ctx.get(dut.out.payload.dst), word))
            if ctx.get(dut.credit.valid):
                seen["credit"].append((cycle, ctx.get(dut.credit.payload.as_value())))
            await ctx.tick()

    run_testbench(dut, bench)
    return seen


def test_forwards_read_their_staged_rows_and_credits_wait_for_them():
    cfg, C = R22, R22.chunks_per_row
    cmds = [forward(cfg, 0, 0, 5), forward(cfg, 1, 1, 6, ftag=0), credit(cfg, 3, 0)]
    seen = run_egress(cfg, cmds)
    assert len(seen["out"]) == 2 * C
    for i, (dst, tag, token) in enumerate(((0, 0, 5), (1, 1, 6))):
        words = seen["out"][i * C:(i + 1) * C]
        slot = 0 * cfg.tags_per_source + tag     # source node 1 is node 0's first other node
        for c, (_, d, w) in enumerate(words):
            assert d == dst
            assert (w["cls"], w["src_node"], w["src_rank"], w["token"], w["fwd"]) == (RowClass.FORWARD, 1, 1, token, 1)
            assert w["chunk"] == c
            addr = BASE + slot * cfg.stride_bytes + c * cfg.chunk_bytes
            assert w["data"] == addr & ((1 << cfg.data_bits) - 1), (i, c)
    assert [p for _, p in seen["credit"]] == [pack_fields(RelayPorts(cfg).rcredit, dict(src=3, tag=0))]
    assert seen["credit"][0][0] > seen["out"][-1][0]


def test_commands_are_taken_one_a_cycle():
    """Eight credits back to back leave in order, taken in cycles 0-7; with the staging's
    reads stalled, eight forwards: the first five taken in cycles 0-4 (the FIFO's four and
    the register's one), then none."""
    cfg = R22
    credits = [credit(cfg, s, t) for s in (0, 2, 3, 1) for t in (0, 1)]
    seen = run_egress(cfg, credits, cycles=30)
    assert seen["taken"] == list(range(8))
    assert [p for _, p in seen["credit"]] == [c[1] for c in credits]
    stalled = run_egress(cfg, [forward(cfg, 0, t % 2, t) for t in range(8)], cycles=30, read_ready=False)
    assert stalled["taken"] == list(range(COMMANDS + 1))


@pytest.mark.plants
def test_planted_bug_is_caught():
    """The ready register cleared behind each command taken (a command every other cycle):
    the credit stream's cycles catch it."""
    slow = broken_class("moehub.rtl.relay.egress", "ready.eq(Mux(accept, pending < COMMANDS, pending <= COMMANDS))",
                        "ready.eq(Mux(accept, pending < COMMANDS, pending <= COMMANDS) & ~accept)", "ForwardEgress")
    credits = [credit(R22, s, 0) for s in range(4)]
    assert run_egress(R22, credits, cycles=20, dut=slow(R22))["taken"] != list(range(4))
