"""The reference model on its own: each rule of the hub, checked by hand-computed values.

The model is the scoreboard of the RTL, so these tests pin its behaviour independently.
"""
import random

import pytest

from moehub.spec.config import load_hub_config
from moehub.spec.csr_map import CTRL_START
from moehub.spec.formats import CtlKind, Reason, data_addr, flag_addr, meta_addr
from moehub.spec.model import HubModel, Packet
from moehub.verif.traffic import LaneFeeder, random_rows

CFG = load_hub_config("tiny")
C = CFG.chunks_per_row


def armed(caps=None, tile_log2=2):
    """A model programmed through its registers, as software programs the hub."""
    m = HubModel(CFG)
    for e in range(CFG.experts):
        m.write("REGION_BASE", 0x10000 * (e + 1), e)
        m.write("REGION_CAP", CFG.max_rows_per_expert if caps is None else caps[e], e)
    for name, value in (("FLAG_BASE", 0x100000), ("META_BASE", 0x200000),
                        ("COUNT_BASE", 0x300000), ("EPOCH", 7), ("TILE_ROWS_LOG2", tile_log2)):
        m.write(name, value)
    m.write("CTRL", CTRL_START)
    return m


def send_row(m, src, tag, expert, token=0, order=None, lane=0):
    fx = []
    for c in (range(C) if order is None else order):
        fx.append(m.packet(Packet(src=src, tag=tag, expert=expert, token=token, chunk=c, data=c + 1), lane))
    return fx


def eos_all(m, counts):
    for s in range(CFG.sources):
        m.packet(Packet.eos(s, counts.get(s, 0)))


def test_row_allocation_translation_and_metadata():
    m = armed()
    fx = send_row(m, 1, 2, 2, token=9, order=[5] + [c for c in range(C) if c != 5])
    assert fx[0].opened == (2, 0)
    assert fx[0].write == (data_addr(CFG, 0x30000, 0, 5), 6) == (0x30000 + 5 * CFG.chunk_bytes, 6)
    meta = m.ctl[0]
    assert meta.kind == CtlKind.META and meta.addr == meta_addr(CFG, 0x200000, 2, 0)
    assert meta.data == 1 | 9 << CFG.src_bits
    assert fx[-1].credit == (1, 2) and fx[-1].completed == (2, 0)
    assert len(m.writes[0]) == C and m.inflight == 0


def test_rows_dense_per_expert_and_tiles_flag_once():
    m = armed(tile_log2=2)
    for k in range(6):
        send_row(m, k % 3, k // 3, 0, token=k)
    flags = [w for w in m.ctl if w.kind == CtlKind.FLAG]
    assert [f.addr for f in flags] == [flag_addr(CFG, 0x100000, 0, 0)] and flags[0].data == 7
    assert m.rows == [6, 0, 0]
    eos_all(m, {0: 2, 1: 2, 2: 2})
    # sweep: counts, last partial tile (rows 4, 5), done word
    tail = m.ctl[-5:]
    assert [w.kind for w in tail] == [CtlKind.COUNT, CtlKind.FLAG, CtlKind.COUNT, CtlKind.COUNT, CtlKind.DONE]
    assert tail[0].data == 6 and tail[1].addr == flag_addr(CFG, 0x100000, 0, 1)
    assert m.done and not m.armed


def test_overflow_drops_whole_row_and_returns_credit():
    m = armed(caps=[1, 4, 4])
    send_row(m, 0, 0, 0)
    fx = send_row(m, 1, 0, 0)
    assert fx[0].drop == Reason.OVERFLOW and all(f.write is None for f in fx)
    assert fx[-1].credit == (1, 0) and m.overflow[0] == 1 and m.drop_counts[Reason.OVERFLOW] == 1


def test_bad_fields_and_duplicates():
    m = armed()
    assert m.packet(Packet(src=3, tag=0)).drop == Reason.BAD_SOURCE
    assert m.packet(Packet(src=0, tag=3)).drop == Reason.BAD_SOURCE
    assert m.packet(Packet(src=0, tag=0, chunk=C)).drop == Reason.BAD_CHUNK
    fx = send_row(m, 0, 1, 3)
    assert fx[0].drop == Reason.BAD_EXPERT and fx[-1].credit == (0, 1)
    m.packet(Packet(src=1, tag=1, expert=1, chunk=0))
    assert m.packet(Packet(src=1, tag=1, expert=1, chunk=0)).drop == Reason.DUPLICATE
    assert m.packet(Packet(src=1, tag=1, expert=2, chunk=1)).drop == Reason.PROTOCOL
    assert m.drop_counts[Reason.BAD_EXPERT] == 1 and m.errors & (1 << Reason.PROTOCOL)


def test_same_cycle_rule_after_completion():
    m = armed()
    for c in range(C - 1):
        m.packet(Packet(src=0, tag=0, expert=0, chunk=c), 0, cycle=c)
    assert m.packet(Packet(src=0, tag=0, expert=0, chunk=C - 1), 0, cycle=100).credit == (0, 0)
    # same cycle, after completion: duplicate; next cycle: a new row
    assert m.packet(Packet(src=0, tag=0, expert=0, chunk=0), 1, cycle=100).drop == Reason.DUPLICATE
    assert m.packet(Packet(src=0, tag=0, expert=0, chunk=0), 0, cycle=101).opened == (0, 1)


def test_end_of_stream_rules():
    m = armed()
    m.packet(Packet.eos(0, 1))                 # before its row: fine
    send_row(m, 0, 0, 1)
    fx = send_row(m, 0, 1, 1)                  # beyond the count
    assert fx[0].drop == Reason.POST_EOS and m.src_rows[0] == 1
    send_row(m, 1, 0, 1)
    send_row(m, 1, 1, 1)
    m.packet(Packet.eos(1, 1))                 # fewer than received
    m.packet(Packet.eos(1, 2))                 # duplicate
    assert m.drop_counts[Reason.EOS_MISMATCH] == 1 and m.drop_counts[Reason.EOS_DUPLICATE] == 1
    m.packet(Packet.eos(2, 0))
    assert m.done and m.rows[1] == 3


def test_flush_counts_incomplete_rows_and_never_flags_them():
    m = armed(tile_log2=1)
    send_row(m, 0, 0, 0)
    send_row(m, 0, 1, 0, order=range(C - 1))   # incomplete
    out = m.flush(timeout=True)
    assert m.drop_counts[Reason.INCOMPLETE] == 1 and m.drop_counts[Reason.TIMEOUT] == 1
    assert [w.kind for w in out].count(CtlKind.FLAG) == 0
    assert m.done and m.inflight == 0


@pytest.mark.parametrize("seed", range(5))
def test_random_traffic_conserves_rows(seed):
    """Clean random traffic through the feeder: every row allocated once, dense per expert,
    every chunk written once, every tile flagged once, every credit returned."""
    rng = random.Random(seed)
    m = armed(tile_log2=1)
    rows = random_rows(CFG, rng, 60, skew=0.5)
    f = LaneFeeder(CFG, rows, rng, early_eos=True)
    cycle = 0
    while not f.done():
        for lane, p in enumerate(f.offer()):
            if p is not None:
                fx = m.packet(p, lane, cycle)
                f.accepted(lane)
                if fx.credit:
                    f.credit(*fx.credit)
        cycle += 1
    m.end()
    assert m.done and sum(m.rows) == 60 and m.inflight == 0
    writes = [w for lane in m.writes for w in lane]
    assert len(writes) == len(set(a for a, _ in writes)) == 60 * C
    flags = [w.addr for w in m.ctl if w.kind == CtlKind.FLAG]
    assert len(flags) == len(set(flags)) == sum((r + 1) // 2 for r in m.rows)
    assert len(m.credits) == 60
