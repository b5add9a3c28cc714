"""Protocol v2 in the reference model: multicast rows (one data write, a metadata word in
every target, the static arena's overflow, bad target sets), per-expert count packets (an
expert final the moment its counts are met, count errors), the page pool (a page per
tile, pages returned through PAGE_FREE, bad returns), the v2 registers and reasons only
with a v2 feature, the v2 config checks -- each rule checked by hand-computed values,
then random traffic that must conserve rows and finish every expert.

The model is the scoreboard the v2 RTL is checked against, so these tests pin its
behaviour independently of the RTL.
"""
import random

import pytest

from moehub.spec.config import load_hub_config
from moehub.spec.csr_map import CTRL_START, CsrMap
from moehub.spec.formats import (V2_REASONS, CtlKind, HubFormats, PacketKind, Reason,
                                config_reasons, count_addr, data_addr, flag_addr, meta_addr)
from moehub.spec.model import HubModel, Packet

TINY = load_hub_config("tiny")
C = TINY.chunks_per_row
POOL = 0x800000


def hub(cfg, tile_log2=1, pool_cap=64, caps=None):
    """A model programmed through its registers (tiles of 2 rows by default)."""
    m = HubModel(cfg)
    for e in range(cfg.experts):
        m.write("REGION_BASE", 0x10000 * (e + 1), e)
        m.write("REGION_CAP", cfg.max_rows_per_expert if caps is None else caps[e], e)
    regs = [("FLAG_BASE", 0x100000), ("META_BASE", 0x200000), ("COUNT_BASE", 0x300000),
            ("EPOCH", 7), ("TILE_ROWS_LOG2", tile_log2)]
    if cfg.multicast or cfg.paged:
        regs += [("POOL_BASE", POOL), ("POOL_CAP", pool_cap)]
    for name, value in regs:
        m.write(name, value)
    m.write("CTRL", CTRL_START)
    return m


def row(m, src, tag, targets=(), expert=0, token=0, lane=0):
    """Every chunk of one row, in order; returns the effects."""
    return [m.packet(Packet(src=src, tag=tag, expert=expert, token=token, chunk=c, data=c + 1,
                            targets=tuple(targets)), lane) for c in range(C)]


def ctl(m, kind):
    return [w for w in m.ctl if w.kind == kind]


# ---------------------------------------------------------------- multicast
MC = TINY.replace(topk=3, max_targets=3)


def test_a_multicast_row_lands_once_and_is_indexed_in_every_target():
    m = hub(MC)
    fx = row(m, 1, 2, targets=[(0, 0), (2, 1)], token=9)
    fmt = HubFormats(MC)
    metas = ctl(m, CtlKind.META)
    assert [w.addr for w in metas] == [meta_addr(MC, 0x200000, 0, 0), meta_addr(MC, 0x200000, 2, 0)]
    assert [fmt.meta_word.unpack(w.data) for w in metas] == [
        dict(src=1, token=9, slot=0, loc=0), dict(src=1, token=9, slot=1, loc=0)]
    assert m.writes[0] == [(data_addr(MC, POOL, 0, c), c + 1) for c in range(C)]   # once, in the pool
    assert [f.credit for f in fx if f.credit] == [(1, 2)] and m.rows == [1, 0, 1]
    fx = row(m, 0, 0, targets=[(2, 0)], token=3)
    assert m.rows == [1, 0, 2] and fmt.meta_word.unpack(ctl(m, CtlKind.META)[-1].data)["loc"] == 1
    assert m.writes[0][-1] == (data_addr(MC, POOL, 1, C - 1), C)
    # expert 2's tile 0 (rows 0, 1) is full: flagged once, at the completion of its last row
    assert m.tiles_flagged == [(2, 0)] and fx[-1].tile_ready == (2, 0)


def test_a_multicast_row_completes_a_tile_in_each_target():
    m = hub(MC)
    row(m, 0, 0, targets=[(0, 0), (1, 1)])
    fx = row(m, 1, 0, targets=[(0, 1), (1, 0)])
    assert m.tiles_flagged == [(0, 0), (1, 0)]
    assert [w.addr for w in ctl(m, CtlKind.FLAG)] == [flag_addr(MC, 0x100000, 0, 0), flag_addr(MC, 0x100000, 1, 0)]
    assert fx[-1].credit == (1, 0) and m.credits == [(0, 0), (1, 0)]


@pytest.mark.parametrize("targets", [(), ((3, 0),), ((1, 0), (1, 1)), ((0, 0), (1, 1), (2, 2), (0, 1))],
                         ids=["empty", "out-of-range", "expert-twice", "too-many"])
def test_a_bad_target_set_drops_the_row(targets):
    m = hub(MC)
    fx = row(m, 1, 1, targets=targets)
    assert fx[0].drop == Reason.BAD_EXPERT and m.drop_counts[Reason.BAD_EXPERT] == 1
    assert m.rows == [0, 0, 0] and not any(m.writes) and not m.ctl
    assert fx[-1].credit == (1, 1) and m.inflight == 0                 # its credit still returns
    row(m, 1, 1, targets=[(0, 0)])                                     # the next row is fine
    assert m.rows == [1, 0, 0]


def test_a_chunk_naming_another_set_is_a_protocol_error():
    m = hub(MC)
    m.packet(Packet(src=0, tag=0, chunk=0, targets=((0, 0), (1, 1))))
    fx = m.packet(Packet(src=0, tag=0, chunk=1, targets=((0, 0),)))
    assert fx.drop == Reason.PROTOCOL and fx.write is None
    fx = m.packet(Packet(src=0, tag=0, chunk=1, targets=((0, 0), (1, 1))))
    assert fx.drop is None and fx.write is not None


def test_the_static_arena_overflows_whole_rows():
    m = hub(MC, pool_cap=1)
    row(m, 0, 0, targets=[(0, 0)])
    fx = row(m, 1, 0, targets=[(1, 0), (2, 1)])
    assert fx[0].drop == Reason.OVERFLOW and m.overflow == [0, 1, 1] and m.rows == [1, 0, 0]
    assert m.drop_counts[Reason.OVERFLOW] == 1 and fx[-1].credit == (1, 0)


def test_one_full_target_region_drops_the_whole_row():
    m = hub(MC, caps=[8, 0, 8])
    fx = row(m, 0, 0, targets=[(0, 0), (1, 1)])
    assert fx[0].drop == Reason.OVERFLOW and m.rows == [0, 0, 0] and m.overflow == [1, 1, 0]


# ---------------------------------------------------------------- count packets
CNT = TINY.replace(count_packets=True)


def counts(m, per_source):
    """Count packets: ``per_source[s][x]`` rows from s to x."""
    for s, cs in enumerate(per_source):
        for x, n in enumerate(cs):
            m.packet(Packet.counts(s, x, n))


def test_an_expert_is_final_the_moment_its_counts_are_met():
    m = hub(CNT)
    counts(m, [[3, 1, 0], [0, 0, 0], [0, 0, 0]])
    # expert 2 announced 0 rows from every source: final at its last count packet already
    assert [(w.kind, w.addr, w.data) for w in m.ctl] == [(CtlKind.COUNT, count_addr(CNT, 0x300000, 2), 0)]
    n = len(m.ctl)
    for k in range(3):
        row(m, 0, k, expert=0, token=k)
    # expert 0: 3 rows of 3 announced, all complete -> its count and its partial tile now
    words = [(w.kind, w.addr) for w in m.ctl[n:] if w.kind != CtlKind.META]
    assert words == [(CtlKind.FLAG, flag_addr(CNT, 0x100000, 0, 0)),
                     (CtlKind.COUNT, count_addr(CNT, 0x300000, 0)),
                     (CtlKind.FLAG, flag_addr(CNT, 0x100000, 0, 1))]
    assert m.ctl[-2].data == 3 and not m.done
    assert m.final == [True, False, True]
    row(m, 0, 0, expert=1)
    assert m.final == [True, True, True]
    n = len(m.ctl)
    for s in range(3):
        m.packet(Packet.eos(s, [4, 0, 0][s]))
    # the sweep writes only what is left: the done word
    assert [w.kind for w in m.ctl[n:]] == [CtlKind.DONE] and m.done


def test_counts_after_the_rows_complete_the_expert_at_the_last_count():
    m = hub(CNT)
    row(m, 2, 0, expert=1)
    counts(m, [[0, 0, 0], [0, 0, 0]])
    assert not m.final[1]
    fx = m.packet(Packet.counts(2, 1, 1))
    assert [w.kind for w in fx.ctl] == [CtlKind.COUNT, CtlKind.FLAG] and m.final[1]


def test_count_packet_errors_are_counted_and_change_nothing_else():
    m = hub(CNT)
    m.packet(Packet.counts(0, 0, 1))
    m.packet(Packet.counts(0, 0, 5))                                  # repeated: ignored
    assert m.drop_counts[Reason.COUNT_DUPLICATE] == 1 and m.expected[0] == 1
    fx = m.packet(Packet.counts(0, 3, 1))                             # no expert 3
    assert fx.drop == Reason.BAD_EXPERT and m.expected == [1, 0, 0]
    counts(m, [[], [0, 0, 0], [0, 0, 0]])
    row(m, 0, 0, expert=0)
    fx = row(m, 0, 1, expert=0)                                       # one row past the count
    assert fx[0].drop == Reason.COUNT_MISMATCH and m.rows[0] == 1 and fx[-1].credit == (0, 1)
    assert m.drop_counts[Reason.COUNT_MISMATCH] == 1


def test_counts_below_the_rows_already_in_and_counts_never_met_are_flagged():
    m = hub(CNT)
    row(m, 0, 0, expert=1)
    row(m, 0, 1, expert=1)
    counts(m, [[0, 1, 0], [0, 0, 0]])
    m.packet(Packet.counts(2, 1, 0))                                  # 2 rows in, 1 announced
    assert m.drop_counts[Reason.COUNT_MISMATCH] == 1 and not m.final[1]
    m.packet(Packet.counts(2, 0, 1))                                  # expert 0: 1 row announced ...
    m.packet(Packet.counts(2, 2, 0))
    for s in range(3):
        m.packet(Packet.eos(s, [2, 0, 0][s]))                         # ... that never comes
    assert m.done and m.drop_counts[Reason.COUNT_MISMATCH] == 2
    # (in write order: expert 2 final at its last count, then the sweep's experts 0 and 1)
    assert [(w.addr, w.data) for w in ctl(m, CtlKind.COUNT)] == [
        (count_addr(CNT, 0x300000, 2), 0), (count_addr(CNT, 0x300000, 0), 0), (count_addr(CNT, 0x300000, 1), 2)]


def test_a_count_packet_without_the_feature_is_a_protocol_error():
    m = hub(TINY)
    fx = m.packet(Packet.counts(0, 0, 1))
    assert fx.drop == Reason.PROTOCOL and m.drop_counts[Reason.PROTOCOL] == 1


# ---------------------------------------------------------------- the page pool
PAGED = TINY.replace(pool_pages=3)


def test_paged_rows_fill_one_page_per_tile_and_flags_name_the_page():
    m = hub(PAGED)
    fmt = HubFormats(PAGED)
    row(m, 0, 0, expert=0)            # expert 0 tile 0 -> page 0
    row(m, 1, 0, expert=1)            # expert 1 tile 0 -> page 1
    row(m, 2, 0, expert=0)            # page 0, full: flagged
    row(m, 0, 1, expert=0)            # expert 0 tile 1 -> page 2
    stride = PAGED.stride_bytes
    assert m.writes[0][C * 3] == (POOL + (2 * 2 + 0) * stride, 1)
    assert m.writes[0][C * 2] == (POOL + 1 * stride, 1)
    assert m.pages_free() == 0 and m.read("POOL_FREE") == 0
    fx = row(m, 1, 1, expert=2)       # expert 2 needs a page: the pool is empty
    assert fx[0].drop == Reason.OVERFLOW and m.overflow == [0, 0, 1]
    row(m, 2, 1, expert=1)            # expert 1's page 1 still has room
    assert m.rows == [3, 2, 0]
    flags = {(w.addr, fmt.flag_word.unpack(w.data)["page"]) for w in ctl(m, CtlKind.FLAG)}
    assert flags == {(flag_addr(PAGED, 0x100000, 0, 0), 0), (flag_addr(PAGED, 0x100000, 1, 0), 1)}
    for s in range(3):
        m.packet(Packet.eos(s, 2))
    last = ctl(m, CtlKind.FLAG)[-1]
    assert last.addr == flag_addr(PAGED, 0x100000, 0, 1) and fmt.flag_word.unpack(last.data) == dict(epoch=7, page=2)


def test_pages_come_back_through_the_csrs_and_bad_returns_are_flagged():
    m = hub(PAGED)
    row(m, 0, 0, expert=0)
    row(m, 0, 1, expert=1)
    assert m.read("POOL_FREE") == 1
    m.write("PAGE_FREE", 1)
    assert m.read("POOL_FREE") == 2 and m.drop_counts[Reason.PAGE_BAD] == 0
    m.write("PAGE_FREE", 1)           # twice
    m.write("PAGE_FREE", 2)           # never handed out
    assert m.drop_counts[Reason.PAGE_BAD] == 2 and m.read("POOL_FREE") == 2
    assert m.read("ERRORS") >> Reason.PAGE_BAD & 1
    for s in range(3):
        m.packet(Packet.eos(s, [2, 0, 0][s]))
    m.write("CTRL", CTRL_START)       # the next layer takes the returned page first
    row(m, 1, 0, expert=2)
    assert m.writes[0][-C] == (POOL + 1 * 2 * PAGED.stride_bytes, 1)


def test_paged_multicast_fills_the_arena_page_by_page():
    cfg = MC.replace(pool_pages=2)
    m = hub(cfg)
    fmt = HubFormats(cfg)
    locs = []
    for k in range(5):
        fx = row(m, k % 3, k // 3, targets=[(k % 3, 0)])
        locs.append(None if fx[0].drop else fmt.meta_word.unpack(m.ctl[-1].data)["loc"]
                    if m.ctl[-1].kind == CtlKind.META else fmt.meta_word.unpack(
                        [w for w in m.ctl if w.kind == CtlKind.META][-1].data)["loc"])
    assert locs == [0, 1, 2, 3, None]            # 2 pages of 2 rows, then the pool is empty
    assert m.drop_counts[Reason.OVERFLOW] == 1


# ---------------------------------------------------------------- registers
def test_v2_registers_and_reasons_exist_only_with_a_v2_feature():
    assert "POOL_BASE" not in CsrMap(TINY).registers and len(config_reasons(TINY)) == len(Reason) - 3
    for cfg in (MC, CNT, PAGED):
        assert len(config_reasons(cfg)) == len(Reason) and CsrMap(cfg)["DROPS"].count == len(Reason)
    assert set(CsrMap(PAGED).registers) >= {"POOL_BASE", "POOL_CAP", "PAGE_FREE", "POOL_FREE"}
    assert "POOL_BASE" not in CsrMap(CNT).registers
    assert set(V2_REASONS) == {Reason.COUNT_MISMATCH, Reason.COUNT_DUPLICATE, Reason.PAGE_BAD}
    m = HubModel(MC)
    m.write("POOL_CAP", (1 << CsrMap(MC)["POOL_CAP"].width) - 1)
    assert m.read("POOL_CAP") == MC.pool_rows         # clamped to what the pool addresses
    assert HubFormats(CNT).packet.widths["kind"] == 2 and HubFormats(TINY).packet.widths["kind"] == 1
    assert PacketKind.COUNT == 2


# ---------------------------------------------------------------- random traffic
@pytest.mark.parametrize("seed", range(6))
def test_random_v2_traffic_conserves_rows_and_finishes_every_expert_early(seed):
    """Random multicast rows from every source, counts announced first, chunks interleaved
    across sources: every (row, target) is allocated once, with its metadata; every
    expert is final before the first end-of-stream; the sweep writes only the done word."""
    rng = random.Random(seed)
    cfg = TINY.replace(topk=3, max_targets=3, count_packets=True, pool_pages=64)
    m = hub(cfg, pool_cap=0)
    fmt = HubFormats(cfg)
    rows = {s: [tuple(sorted(rng.sample(range(cfg.experts), rng.randint(1, 3))))
                for _ in range(rng.randint(0, 12))] for s in range(cfg.sources)}
    for s, rs in rows.items():
        for x in range(cfg.experts):
            m.packet(Packet.counts(s, x, sum(x in r for r in rs)))
    streams = {s: [(t, c) for t in range(len(rs)) for c in range(C)] for s, rs in rows.items()}
    tags = {s: 0 for s in rows}
    while any(streams.values()):          # one row in flight per source, sources interleaved
        s = rng.choice([s for s in streams if streams[s]])
        t, c = streams[s].pop(0)
        m.packet(Packet(src=s, tag=t % cfg.tags_per_source, token=t, chunk=c, data=c,
                        targets=tuple((x, i) for i, x in enumerate(rows[s][t]))), rng.randrange(4))
        tags[s] = t
    assert all(m.final), f"seed {seed}: experts not final before the EOS: {m.final}"
    n = len(m.ctl)
    for s, rs in rows.items():
        m.packet(Packet.eos(s, len(rs)))
    assert [w.kind for w in m.ctl[n:]] == [CtlKind.DONE], f"seed {seed}"
    want = sorted((x, s, t, i) for s, rs in rows.items() for t, r in enumerate(rs) for i, x in enumerate(r))
    got = []
    for w in ctl(m, CtlKind.META):
        f = fmt.meta_word.unpack(w.data)
        x = (w.addr - 0x200000) // cfg.meta_word_bytes // cfg.max_rows_per_expert
        got.append((x, f["src"], f["token"], f["slot"]))
    assert sorted(got) == want, f"seed {seed}"
    assert sum(m.drop_counts) == 0 and m.inflight == 0, f"seed {seed}: {m.drop_counts}"
    assert sum(len(w) for w in m.writes) == C * sum(len(rs) for rs in rows.values())   # data once per row


@pytest.mark.parametrize("key, value, words", [
    ("max_targets", 0, "1..min"), ("max_targets", 3, "min(experts, topk) = 2"),
    ("pool_pages", -1, ">= 0"), ("pool_pages", 1 << 16, "16 bits")])
def test_v2_config_values_are_checked(key, value, words):
    from moehub.spec.config import ConfigError
    with pytest.raises(ConfigError, match=f"{key}.*{value}.*" + words.replace("(", r"\(").replace(")", r"\)")):
        TINY.replace(**{key: value})
