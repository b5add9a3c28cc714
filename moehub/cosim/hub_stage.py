"""The hub stage of the co-simulation: one destination GPU's arrivals in, tile-ready out.

The interface is deliberately small so that the hub can be the Python reference model
(:func:`run_hub_fast`, :func:`run_hub_reference`) or the hub's Verilog played by cocotb
(:func:`moehub.cosim.hub_rtl.run_hub_rtl`, ``moehub cosim --hub rtl`` or ``--rtl-gpus``):

    backend(cfg: HubConfig, arrivals: HubArrivals) -> HubResult

:class:`HubArrivals` is one destination's arrival schedule, stored per row (the cycle and
lane of each row's first and last packet) so that millions of packets stay cheap;
:meth:`HubArrivals.packets` expands it into the full list of ``(cycle, lane, Packet)`` in
hub order (accept cycle, then lane, then row, then chunk). Middle chunks are placed
strictly between their row's first and last packet in that order, so the vectorised
fast path (:func:`run_hub_fast`: numpy over rows, no per-row Python) and packet-by-packet
:func:`run_hub_reference` (the oracle) see the same sequence of row openings and
completions and produce identical allocations, flags, tile-ready cycles, counts and
credits (tests/test_hub_stage_equal.py, on random schedules).

The expansion is a *demand* schedule: a cycle may name more packets than the hub has
lanes. The network model caps each hub's ingress at ``min(link, lanes x chunk x clock)``,
so such bursts are short; an RTL driver queues them (and reports the difference).

Timing annotation (the RTL's latencies, asserted in cycles by its tests): a packet accepted at cycle t
is written at t + WRITE_LATENCY; a tile flag is written FLAG_LATENCY cycles after the last
chunk of the tile's last row is accepted (both from :mod:`moehub.spec.timing`); the hub
handles at most one per-row control event (metadata write on a row's first packet,
completion on its last) per cycle, so such events queue; the
end-of-layer sweep writes one control word per cycle (count, last partial tile's flag,
..., done) starting ``SWEEP_DELAY`` cycles after the packet that finished the layer, or
after the end of the last queued per-row event's slot if later.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..spec.config import HubConfig
from ..spec.formats import CtlKind, PacketKind
from ..spec.timing import FLAG_LATENCY, WRITE_LATENCY
from ..spec.model import HubModel, Packet
from ..spec.program import layer_program

FLAG_DELAY = FLAG_LATENCY     #: cycles from the accept of a tile's last chunk to its flag write
WRITE_DELAY = WRITE_LATENCY   #: cycles from the accept of a packet to its data write
#: cycles from the accept of the packet that finished the layer -- or from the end of the
#: last per-row event's slot, when events were still queued -- to the sweep's first write
#: (the packet manager waits for its pipeline and the event queue to drain, then the
#: tracker enters its sweep and feeds it through its pipeline: measured on the RTL with
#: moehub.cosim.hub_rtl.compare; one cycle more since the end of a layer is decided a cycle
#: ahead, like START and FLUSH)
SWEEP_DELAY = 14


@dataclass
class HubArrivals:
    """Arrival schedule at one destination hub, one entry per row (arrays of equal length)."""
    cfg: HubConfig
    src: np.ndarray
    tag: np.ndarray
    expert: np.ndarray
    token: np.ndarray
    slot: np.ndarray
    first_cycle: np.ndarray
    first_lane: np.ndarray
    last_cycle: np.ndarray
    last_lane: np.ndarray
    eos: list = field(default_factory=list)   #: (cycle, lane, src, rows sent)
    region_cap: list | None = None             #: rows per expert region (default max_rows_per_expert)
    #: protocol v2 multicast (``cfg.multicast``): one entry per (row, target) -- the row it
    #: belongs to (ascending), its expert and top-k slot, in the order the row names them;
    #: ``expert``/``slot`` then hold each row's first target. None: one target per row
    tgt_row: np.ndarray | None = None
    tgt_expert: np.ndarray | None = None
    tgt_slot: np.ndarray | None = None
    #: protocol v2 count packets (``cfg.count_packets``): (cycle, lane, src, expert, rows)
    counts: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.src)

    @property
    def multicast(self) -> bool:
        return self.tgt_row is not None

    def targets(self) -> tuple:
        """(row, expert, slot) of every target entry: the multicast arrays, or one entry
        per row (its ``expert`` and ``slot``)."""
        if self.tgt_row is not None:
            return (np.asarray(self.tgt_row, np.int64), np.asarray(self.tgt_expert, np.int64),
                    np.asarray(self.tgt_slot, np.int64))
        n = len(self)
        return (np.arange(n), np.asarray(self.expert, np.int64), np.asarray(self.slot, np.int64))

    def packets(self) -> Iterator[tuple]:
        """Every packet, ``(cycle, lane, Packet)``, in hub order (for the RTL and tests)."""
        cfg = self.cfg
        cpr = cfg.chunks_per_row
        keys = []
        n = len(self)
        for r in range(n):
            f, l = int(self.first_cycle[r]), int(self.last_cycle[r])
            fl, ll = int(self.first_lane[r]), int(self.last_lane[r])
            for c in range(cpr):
                if c == 0:
                    cyc, lane = f, fl
                elif c == cpr - 1:
                    cyc, lane = l, ll
                else:
                    cyc = f + (l - f) * c // (cpr - 1)
                    if cyc == f:
                        lane = fl
                    elif cyc == l:
                        lane = ll
                    else:
                        lane = (fl + c) % cfg.lanes
                keys.append((cyc, lane, r, c))
        for i, (cyc, lane, s, cnt) in enumerate(self.eos):
            keys.append((int(cyc), int(lane), n + i, 0))
        ne = len(self.eos)
        for i, (cyc, lane, s, x, cnt) in enumerate(self.counts):
            keys.append((int(cyc), int(lane), n + ne + i, 0))
        targets = [()] * n
        if cfg.multicast:
            targets = [[] for _ in range(n)]
            for r, x, sl in zip(*(v.tolist() for v in self.targets())):
                targets[r].append((x, sl))
            targets = [tuple(t) for t in targets]
        keys.sort()
        for cyc, lane, r, c in keys:
            if r >= n + ne:
                _, _, s, x, cnt = self.counts[r - n - ne]
                yield cyc, lane, Packet.counts(int(s), int(x), int(cnt))
            elif r >= n:
                _, _, s, cnt = self.eos[r - n]
                yield cyc, lane, Packet.eos(int(s), int(cnt))
            else:
                yield cyc, lane, Packet(src=int(self.src[r]), tag=int(self.tag[r]),
                                        expert=int(self.expert[r]), token=int(self.token[r]),
                                        slot=int(self.slot[r]), chunk=c,
                                        data=(r * cpr + c) & ((1 << cfg.data_bits) - 1),
                                        targets=targets[r])


@dataclass
class HubResult:
    """What the GEMM and the sources need from one hub."""
    tile_ready: dict        #: (expert, tile) -> cycle its flag is written
    counts: list            #: final rows per expert
    credits: list           #: (src, tag, cycle) a row's credit leaves the hub, in order
    alloc: dict             #: (src, token, slot) -> (expert, row)
    done_cycle: int         #: cycle of the layer-done write
    drops: int              #: packets/rows dropped (0 for a correct schedule)
    packets: int            #: packets the hub accepted (data + EOS + counts)
    #: expert -> cycle its final count word is written (early with count packets, else
    #: in the end-of-layer sweep)
    count_cycle: dict = field(default_factory=dict)
    pages: int = 0          #: pages of the pool handed out (paged mode)


class _Annotator:
    """Cycle annotation of a model's effects (shared by both paths).

    The control port takes one per-row event a cycle, in hub order: a row's opening takes
    one cycle per metadata write (one per target with multicast), its completion one
    cycle (its credit, the tile counters of all its targets), and a count packet one
    cycle. The flags and final-count words an event raises are written one a cycle from
    ``FLAG_DELAY`` cycles after its slot, in the model's order (protocol v1: at most one,
    the full tile's flag)."""

    def __init__(self, cfg: HubConfig | None = None):
        self.ctl_free = 0
        self.tile_ready: dict = {}
        self.credits: list = []
        self.alloc: dict = {}
        self.count_cycle: dict = {}
        self.done_cycle = -1
        self.prev_cycle = 0
        self._count_expert: dict | None = None
        self.cfg = cfg

    def _expert_of_count(self, model: HubModel, addr: int) -> int:
        """The expert whose final count word a COUNT write at ``addr`` is."""
        if self._count_expert is None:
            from ..spec.formats import count_addr
            self._count_expert = {count_addr(model.cfg, model.layer_count_base, x): x
                                  for x in range(model.cfg.experts)}
        return self._count_expert[addr]

    def apply(self, model: HubModel, fx, pkt: Packet, cycle: int, n_flags_before: int):
        flagged = model.tiles_flagged[n_flags_before:]
        kinds = [w.kind for w in fx.ctl]
        own = fx.ctl
        if CtlKind.DONE in kinds:
            # the layer finished at the end of the previous cycle; its sweep ran first
            k = kinds.index(CtlKind.DONE) + 1
            nf = sum(kd == CtlKind.FLAG for kd in kinds[:k])
            self._sweep(model, fx.ctl[:k], flagged[:nf], self.prev_cycle)
            own, flagged = fx.ctl[k:], flagged[nf:]
        if fx.opened is not None:
            s = max(cycle, self.ctl_free)
            self.ctl_free = s + sum(w.kind == CtlKind.META for w in own)
            e = model.table[pkt.src * model.cfg.tags_per_source + pkt.tag]
            for (x, slot), row in zip(e.dests, e.rows):
                self.alloc[(pkt.src, pkt.token, slot)] = (x, row)
        if fx.credit is not None or (pkt.kind == PacketKind.COUNT and fx.drop is None):
            s = max(cycle, self.ctl_free)
            self.ctl_free = s + 1
            if fx.credit is not None:
                self.credits.append((pkt.src, pkt.tag, s))
            self._words(model, [w for w in own if w.kind in (CtlKind.FLAG, CtlKind.COUNT)],
                        flagged, s + FLAG_DELAY)
        self.prev_cycle = cycle

    def _words(self, model: HubModel, words: list, flagged: list, start: int):
        """Flags and final counts written one a cycle from ``start``."""
        k = 0
        for i, w in enumerate(words):
            if w.kind == CtlKind.FLAG:
                self.tile_ready[flagged[k]] = start + i
                k += 1
            else:
                self.count_cycle[self._expert_of_count(model, w.addr)] = start + i

    def finish(self, model: HubModel, n_flags_before: int):
        """After the last packet: end the last cycle; a finished layer sweeps."""
        out = model.end()
        if any(w.kind == CtlKind.DONE for w in out):
            self._sweep(model, out, model.tiles_flagged[n_flags_before:], self.prev_cycle)

    def _sweep(self, model: HubModel, ctl: list, flagged: list, cycle: int):
        """End-of-layer sweep: counts, last partial tiles' flags (of the experts not yet
        final), done -- one word a cycle."""
        s = max(cycle, self.ctl_free) + SWEEP_DELAY
        k = 0
        for i, w in enumerate(ctl):
            if w.kind == CtlKind.FLAG:
                self.tile_ready[flagged[k]] = s + i
                k += 1
            elif w.kind == CtlKind.COUNT:
                self.count_cycle[self._expert_of_count(model, w.addr)] = s + i
            elif w.kind == CtlKind.DONE:
                self.done_cycle = s + i
                break


def _setup(cfg: HubConfig, caps) -> HubModel:
    """A model hub programmed through its registers as the RTL is, ending with START
    (the same register writes as :func:`moehub.spec.program.csr_program`)."""
    model = HubModel(cfg)
    for name, value, index in layer_program(cfg, caps=caps):
        model.write(name, value, index)
    return model


def _result(model: HubModel, ann: _Annotator, packets: int) -> HubResult:
    return HubResult(tile_ready=ann.tile_ready, counts=list(model.rows), credits=ann.credits,
                     alloc=ann.alloc, done_cycle=ann.done_cycle,
                     drops=sum(model.drop_counts), packets=packets,
                     count_cycle=ann.count_cycle, pages=model.fresh)


def run_hub_reference(cfg: HubConfig, arrivals: HubArrivals) -> HubResult:
    """Plain :meth:`HubModel.packet` on every packet of the expanded schedule (slow)."""
    return run_hub_packets(cfg, arrivals.packets(), arrivals.region_cap)


def run_hub_packets(cfg: HubConfig, packets, region_cap=None) -> HubResult:
    """The hub stage on an explicit schedule: ``packets`` is an iterable of
    ``(cycle, lane, Packet)`` in hub order (what an RTL driver replays)."""
    model = _setup(cfg, region_cap)
    ann = _Annotator()
    n = 0
    for cycle, lane, pkt in packets:
        nf = len(model.tiles_flagged)
        fx = model.packet(pkt, lane=lane, cycle=cycle)
        ann.apply(model, fx, pkt, cycle, nf)
        n += 1
    ann.finish(model, len(model.tiles_flagged))
    return _result(model, ann, n)


def run_hub_fast(cfg: HubConfig, arrivals: HubArrivals) -> HubResult:
    """The hub stage vectorised over rows (numpy, no per-row Python): identical outputs to
    :func:`run_hub_reference` (tests/test_hub_stage_equal.py), at millions of rows per
    second. It covers every schedule on which the hub drops nothing but region overflows
    (what the co-simulation produces); any other schedule -- a field out of range, a row
    whose last packet precedes its first, a tag reused before its row completed, a
    missing, repeated or wrong end-of-stream count -- is replayed by the reference
    (:func:`why_not_vectorised` says why; :data:`FALLBACKS` counts them)."""
    why = _unclean_fields(cfg, arrivals)
    ev = None if why else _Events(cfg, arrivals)
    why = why or ev.unclean
    v2 = cfg.multicast or cfg.count_packets or cfg.paged
    if v2 and not why:
        why = _unclean_v2(cfg, arrivals)
    if why:
        FALLBACKS[why] = FALLBACKS.get(why, 0) + 1
        return run_hub_reference(cfg, arrivals)
    return _vector_result_v2(cfg, arrivals, ev) if v2 else _vector_result(cfg, arrivals, ev)


#: reason -> times :func:`run_hub_fast` handed a schedule to the reference (benchmarks, tests)
FALLBACKS: dict = {}


def why_not_vectorised(cfg: HubConfig, arrivals: HubArrivals) -> str | None:
    """Why :func:`run_hub_fast` would replay this schedule with the reference (None: it
    runs vectorised)."""
    why = _unclean_fields(cfg, arrivals) or _Events(cfg, arrivals).unclean
    if not why and (cfg.multicast or cfg.count_packets or cfg.paged):
        why = _unclean_v2(cfg, arrivals)
    return why


@functools.lru_cache(maxsize=64)
def _layer_registers(cfg: HubConfig, caps: tuple | None) -> tuple:
    """(tile_rows_log2, region caps) a layer latches at START, from the same register
    writes as the reference (so clamps and register widths apply alike); cached: the
    stage runs once per destination GPU with the same config."""
    m = _setup(cfg, None if caps is None else list(caps))
    region = np.array(m.layer_region_cap, dtype=np.int64)
    region.setflags(write=False)
    return m.layer_tile_rows_log2, region


def _unclean_fields(cfg: HubConfig, a: HubArrivals) -> str | None:
    """A field the hub would drop (or the reference reject), or end-of-stream words that
    do not close the layer exactly once per source: the vectorised path assumes neither."""
    fields = [("src", a.src, cfg.sources), ("tag", a.tag, cfg.tags_per_source),
              ("expert", a.expert, cfg.experts), ("token", a.token, 1 << cfg.token_bits),
              ("slot", a.slot, 1 << cfg.slot_bits), ("first_lane", a.first_lane, cfg.lanes),
              ("last_lane", a.last_lane, cfg.lanes)]
    for name, v, hi in fields:
        if len(v) and (int(np.min(v)) < 0 or int(np.max(v)) >= hi):
            return f"{name} outside 0..{hi - 1}"
    e = np.array(a.eos, dtype=np.int64).reshape(-1, 4)
    if sorted(e[:, 2].tolist()) != list(range(cfg.sources)):
        return "not exactly one end-of-stream per source"
    rows = np.bincount(np.asarray(a.src, dtype=np.int64), minlength=cfg.sources)
    if (e[:, 3] != rows[e[:, 2]]).any():
        return "an end-of-stream count differs from the source's rows"
    return None


class _Events:
    """Every row's first and last packet in hub order (cycle, lane, row, chunk): event
    ``2 r`` is row r's first packet, ``2 r + 1`` its last (a row has at least two chunks),
    so a stable sort on (cycle, lane) alone gives the hub's order. Middle chunks are left
    out: on a clean schedule they only set bits of an open row's bitmap."""

    def __init__(self, cfg: HubConfig, a: HubArrivals):
        n, lanes = len(a), cfg.lanes
        fc, fl = np.asarray(a.first_cycle, np.int64), np.asarray(a.first_lane, np.int64)
        lc, ll = np.asarray(a.last_cycle, np.int64), np.asarray(a.last_lane, np.int64)
        key = np.empty(2 * n, dtype=np.int64)
        key[0::2] = fc * lanes + fl
        key[1::2] = lc * lanes + ll
        self.order = np.argsort(key, kind="stable")
        self.cycle = key[self.order] // lanes          #: cycle of each event, in hub order
        self.row = self.order >> 1                     #: its row
        self.is_last = (self.order & 1).astype(bool)   #: it completes its row
        self.opened = self.row[~self.is_last]          #: rows in the order they open
        pos = np.empty(2 * n, dtype=np.int64)
        pos[self.order] = np.arange(2 * n)
        self.pos_last = pos[1::2]                      #: each row's completion, hub order
        self.unclean = self._check(cfg, a, fc, lc, key)

    def _check(self, cfg: HubConfig, a: HubArrivals, fc, lc, key) -> str | None:
        """A row whose last packet precedes its first, or a (source, tag) entry reopened
        in or before the cycle its previous row completed, is a drop on the hub."""
        if (key[1::2] < key[0::2]).any():
            return "a row's last packet precedes its first"
        tags = np.asarray(a.src, np.int64) * cfg.tags_per_source + a.tag
        seq = self.opened[np.argsort(tags[self.opened], kind="stable")]
        same = tags[seq[1:]] == tags[seq[:-1]]
        if (same & (fc[seq[1:]] <= lc[seq[:-1]])).any():
            return "a tag reused in or before the cycle its previous row completed"
        return None


def _control_slots(cycles: np.ndarray) -> np.ndarray:
    """The cycle each per-row control event (metadata write, completion) gets: one per
    cycle, in hub order, none before it arrives -- s_i = max(c_i, s_{i-1} + 1), i.e.
    s_i = i + max(0, max_{j<=i}(c_j - j))."""
    i = np.arange(len(cycles), dtype=np.int64)
    if not len(i):
        return i
    return i + np.maximum(np.maximum.accumulate(cycles - i), 0)


def _vector_result(cfg: HubConfig, a: HubArrivals, ev: _Events) -> "VectorHubResult":
    """Allocation (rank in opening order per expert, overflows past the region cap),
    control-event slots, credits, tile flags and the end-of-layer sweep, all as arrays."""
    n, E = len(a), cfg.experts
    log2t, cap = _layer_registers(cfg, None if a.region_cap is None
                                  else tuple(int(c) for c in a.region_cap))
    x = np.asarray(a.expert, dtype=np.int64)[ev.opened]
    by_x = np.argsort(x, kind="stable")                 # opening order within each expert
    cnt = np.bincount(x, minlength=E)
    rank_g = np.arange(n) - np.repeat(np.cumsum(cnt) - cnt, cnt)   # rank, grouped order
    row = np.empty(n, dtype=np.int64)
    row[ev.opened[by_x]] = rank_g
    ok = row < cap[a.expert] if n else np.zeros(0, bool)
    row[~ok] = -1
    has_ctl = ev.is_last | ok[ev.row]
    slot = np.full(2 * n, -1, dtype=np.int64)
    slot[has_ctl] = _control_slots(ev.cycle[has_ctl])
    rows = np.minimum(cnt, cap)
    tiles = _tile_flags(cfg, ev, slot, ev.opened[by_x], rank_g, cnt, rows, log2t)
    last = max(int(ev.cycle[-1]) if n else -(1 << 62), max(int(e[0]) for e in a.eos))
    ctl_free = int(slot[has_ctl][-1]) + 1 if has_ctl.any() else 0
    done = _sweep_flags(tiles, rows, log2t, max(last, ctl_free) + SWEEP_DELAY)
    return VectorHubResult(a, ev, row, slot, tile_ready=tiles, counts=rows.tolist(),
                           done_cycle=done, drops=int(n - ok.sum()),
                           packets=n * cfg.chunks_per_row + len(a.eos))


def _tile_flags(cfg, ev: _Events, slot, grouped, rank_g, cnt, rows, log2t) -> dict:
    """Full tiles: flagged at the completion of their last row to complete (FLAG_DELAY
    after its control slot), in that order. ``grouped``: rows by expert, then rank."""
    T = 1 << log2t
    full = rows >> log2t
    keep = rank_g < np.repeat(full << log2t, cnt)
    last = ev.pos_last[grouped[keep]].reshape(-1, T).max(axis=1) if keep.any() \
        else np.zeros(0, np.int64)
    xs = np.repeat(np.arange(cfg.experts), full)
    ts = np.arange(len(xs)) - np.repeat(np.cumsum(full) - full, full)
    o = np.argsort(last, kind="stable")
    cyc = slot[last[o]] + FLAG_DELAY
    return dict(zip(zip(xs[o].tolist(), ts[o].tolist()), cyc.tolist()))


def _sweep_flags(tiles: dict, rows, log2t, start: int) -> int:
    """End-of-layer sweep from ``start``, one word a cycle: per expert its count and, if
    its last tile is partial, that tile's flag; then the done word (returns its cycle)."""
    i = 0
    for x, r in enumerate(rows.tolist()):
        i += 1                                          # the count word
        if r & ((1 << log2t) - 1):
            tiles[(x, r >> log2t)] = start + i
            i += 1
    return start + i


# ---------------------------------------------------------------------------- protocol v2
def _unclean_v2(cfg: HubConfig, a: HubArrivals) -> str | None:
    """What the vectorised protocol-v2 path does not cover: a target set the hub rejects,
    a drop of any kind (region, arena or pool full), count packets that are not exactly
    one per (source, expert) with the rows the source sent, or that arrive after their
    source's end-of-stream."""
    row, x, _ = a.targets()
    n, E, S = len(a), cfg.experts, cfg.sources
    per_row = np.bincount(row, minlength=n) if n else np.zeros(0, np.int64)
    if n and (per_row.min() < 1 or per_row.max() > cfg.max_targets):
        return "a row names no target or more than max_targets"
    if len(x) and (x.min() < 0 or x.max() >= E):
        return "a target expert outside 0..experts-1"
    if len(np.unique(row * E + x)) != len(x):
        return "a row names an expert twice"
    _, cap = _layer_registers(cfg, None if a.region_cap is None
                              else tuple(int(c) for c in a.region_cap))
    cnt = np.bincount(x, minlength=E)
    if (cnt > cap).any():
        return "a region overflows (v2)"
    T = 1 << _layer_registers(cfg, None)[0]
    if cfg.paged:
        streams = [n] if cfg.multicast else cnt.tolist()
        if sum(-(-c // T) for c in streams) > cfg.pool_pages:
            return "the page pool runs out"
    elif cfg.multicast and n > min(cfg.pool_rows, cfg.sources << cfg.token_bits):
        return "the arena overflows"
    if cfg.count_packets:
        c = np.array(a.counts, dtype=np.int64).reshape(-1, 5)
        if len(c) != S * E or len(np.unique(c[:, 2] * E + c[:, 3])) != S * E \
                or c[:, 2].min(initial=0) < 0 or c[:, 2].max(initial=0) >= S \
                or c[:, 3].min(initial=0) < 0 or c[:, 3].max(initial=0) >= E:
            return "not exactly one count packet per (source, expert)"
        sent = np.zeros(S * E, np.int64)
        np.add.at(sent, np.asarray(a.src, np.int64)[row] * E + x, 1)
        if (c[:, 4] != sent[c[:, 2] * E + c[:, 3]]).any():
            return "a count packet differs from the rows its source sent"
        eos = {int(s_): int(cy) for cy, _, s_, _ in a.eos}
        if any(int(cy) > eos[int(s_)] for cy, _, s_, _, _ in a.counts):
            return "a count packet after its source's end-of-stream"
    elif a.counts:
        return "count packets to a hub without count_packets"
    return None


def _weighted_slots(cycles: np.ndarray, w: np.ndarray) -> np.ndarray:
    """:func:`_control_slots` for events that hold the port ``w`` cycles each:
    s_i = max(c_i, s_{i-1} + w_{i-1}) = W_i + max(0, max_{j<=i}(c_j - W_j)), W the
    exclusive prefix sum of w."""
    if not len(cycles):
        return np.zeros(0, np.int64)
    W = np.cumsum(w) - w
    return W + np.maximum(np.maximum.accumulate(cycles - W), 0)


def _vector_result_v2(cfg: HubConfig, a: HubArrivals, ev: _Events) -> "VectorHubResult":
    """Protocol v2, vectorised (identical to the reference on clean schedules,
    tests/test_hub_v2_fast.py): a multicast row opens one allocation per target (its
    rank in that expert's opening order) and holds the control port one cycle per
    metadata write; its completion (one cycle) counts the row in every target's tile;
    count packets (one cycle each) make an expert final the moment its counts are in and
    its rows complete: its count word and last partial tile's flag then, not in the
    sweep."""
    n, E, lanes = len(a), cfg.experts, cfg.lanes
    log2t, _ = _layer_registers(cfg, None if a.region_cap is None
                                else tuple(int(c) for c in a.region_cap))
    T = 1 << log2t
    trow, tx, _ = a.targets()
    f = np.bincount(trow, minlength=n)
    # every event in hub order: rows' first/last packets (2n), then the count packets
    cn = np.array(a.counts, dtype=np.int64).reshape(-1, 5)
    m = len(cn)
    key = np.empty(2 * n + m, dtype=np.int64)
    key[0:2 * n:2] = np.asarray(a.first_cycle, np.int64) * lanes + a.first_lane
    key[1:2 * n:2] = np.asarray(a.last_cycle, np.int64) * lanes + a.last_lane
    key[2 * n:] = cn[:, 0] * lanes + cn[:, 1]
    order = np.argsort(key, kind="stable")
    pos = np.empty_like(order)
    pos[order] = np.arange(len(order))
    cyc = key[order] // lanes
    w = np.ones(len(order), np.int64)
    is_open = (order < 2 * n) & (order % 2 == 0)
    w[is_open] = f[order[is_open] >> 1]
    slot = _weighted_slots(cyc, w)
    pos_first, pos_last = pos[0:2 * n:2], pos[1:2 * n:2]
    # allocation: each target's rank in its expert, in opening order
    o = np.lexsort((np.arange(len(tx)), pos_first[trow], tx))        # by expert, then opening
    cnt = np.bincount(tx, minlength=E)
    rank_g = np.arange(len(tx)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    trank = np.empty(len(tx), np.int64)
    trank[o] = rank_g
    # the words each event writes after its slot: (event, target index, sub, kind, x, tile)
    j = np.arange(len(tx)) - (np.cumsum(f) - f)[trow]                # target index in its row
    full = cnt >> log2t
    ev_w, j_w, sub_w, kind_w, x_w, t_w = [], [], [], [], [], []
    keep = rank_g < np.repeat(full << log2t, cnt)
    if keep.any():
        og = o[keep]
        lastp = pos_last[trow[og]].reshape(-1, T)
        arg = lastp.argmax(axis=1)
        who = og.reshape(-1, T)[np.arange(len(arg)), arg]
        xs = np.repeat(np.arange(E), full)
        ts = np.arange(len(xs)) - np.repeat(np.cumsum(full) - full, full)
        ev_w.append(lastp.max(axis=1)); j_w.append(j[who]); sub_w.append(np.zeros(len(xs), np.int64))
        kind_w.append(np.zeros(len(xs), np.int64)); x_w.append(xs); t_w.append(ts)
    final = np.zeros(E, bool)
    if cfg.count_packets:
        lc = np.full(E, -1, np.int64)
        np.maximum.at(lc, tx, pos_last[trow])
        lk = np.full(E, -1, np.int64)
        np.maximum.at(lk, cn[:, 3], pos[2 * n + np.arange(m)])
        trig = np.maximum(lc, lk)
        final[:] = True
        by_row = lc > lk                       # the last row's completion makes it final
        jx = np.zeros(E, np.int64)
        last_t = np.full(E, -1, np.int64)      # the target entry completing last, per expert
        has = cnt > 0
        ent = np.lexsort((pos_last[trow], tx))
        ends = np.cumsum(cnt) - 1
        last_t[has] = ent[ends[has]]
        jx[by_row] = j[last_t[by_row]]
        xs = np.arange(E)
        part = (cnt & (T - 1)) != 0
        ev_w.append(trig); j_w.append(jx); sub_w.append(np.ones(E, np.int64))
        kind_w.append(np.ones(E, np.int64)); x_w.append(xs); t_w.append(np.full(E, -1))
        ev_w.append(trig[part]); j_w.append(jx[part]); sub_w.append(np.full(part.sum(), 2))
        kind_w.append(np.zeros(part.sum(), np.int64)); x_w.append(xs[part])
        t_w.append((cnt >> log2t)[part])
    tiles, count_cycle = {}, {}
    if ev_w:
        ew, jw, sw = (np.concatenate(v) for v in (ev_w, j_w, sub_w))
        kw, xw, tw = (np.concatenate(v) for v in (kind_w, x_w, t_w))
        oo = np.lexsort((sw, jw, ew))
        ew, kw, xw, tw = ew[oo], kw[oo], xw[oo], tw[oo]
        start = np.r_[0, np.nonzero(np.diff(ew))[0] + 1]
        idx = np.arange(len(ew)) - np.repeat(start, np.diff(np.r_[start, len(ew)]))
        wc = slot[ew] + FLAG_DELAY + idx
        fl = kw == 0
        oc = np.argsort(wc[fl], kind="stable")
        tiles = dict(zip(zip(xw[fl][oc].tolist(), tw[fl][oc].tolist()), wc[fl][oc].tolist()))
        count_cycle = dict(zip(xw[~fl].tolist(), wc[~fl].tolist()))
    # end of layer: one word a cycle from the later of the last packet and the port's end
    last = max([int(cyc[-1]) if len(cyc) else -(1 << 62)] + [int(e[0]) for e in a.eos])
    ctl_free = int(slot[-1] + w[-1]) if len(slot) else 0
    i, s0 = 0, max(last, ctl_free) + SWEEP_DELAY
    for x, r in enumerate(cnt.tolist()):
        if final[x]:
            continue
        count_cycle[x] = s0 + i
        i += 1
        if r & (T - 1):
            tiles[(x, r >> log2t)] = s0 + i
            i += 1
    pages = 0
    if cfg.paged:
        pages = -(-n // T) if cfg.multicast else int((-(-cnt // T)).sum())
    rows_slot = slot[pos_last]
    return VectorHubResultV2(a, trow, tx, trank, pos_last, rows_slot, tile_ready=tiles,
                             counts=cnt.tolist(), done_cycle=s0 + i, drops=0,
                             packets=n * cfg.chunks_per_row + len(a.eos) + m,
                             count_cycle=count_cycle, pages=pages)


class VectorHubResultV2(HubResult):
    """The protocol-v2 vectorised result: per target entry its allocation (arrays), the
    ``alloc`` dict and the ``credits`` built on first read."""

    def __init__(self, a: HubArrivals, trow, tx, trank, pos_last, rows_slot, **fields):
        for k, v in fields.items():
            setattr(self, k, v)
        self._a = a
        self.target_rows = (trow, tx, trank)   #: (row, expert, its row in the expert)
        self._pos_last, self._rows_slot = pos_last, rows_slot

    @functools.cached_property
    def alloc(self) -> dict:
        a = self._a
        trow, tx, trank = self.target_rows
        _, _, tslot = a.targets()
        keys = zip(a.src[trow].tolist(), a.token[trow].tolist(), tslot.tolist())
        return dict(zip(keys, zip(tx.tolist(), trank.tolist())))

    @functools.cached_property
    def credits(self) -> list:
        a = self._a
        r = np.argsort(self._pos_last, kind="stable")
        return list(zip(a.src[r].tolist(), a.tag[r].tolist(), self._rows_slot[r].tolist()))


def target_alloc(result: HubResult, arrivals: HubArrivals) -> tuple:
    """(row, expert, its row in that expert; -1 not allocated) of every target entry of
    the arrivals (:meth:`HubArrivals.targets`), from any backend's result."""
    if isinstance(result, VectorHubResultV2) and result._a is arrivals:
        return result.target_rows
    trow, tx, tslot = arrivals.targets()
    if not arrivals.multicast:
        e, r = alloc_rows(result, arrivals)
        return trow, tx, np.where(e == tx, r, -1)
    rank = np.full(len(tx), -1, np.int64)
    src, tok = np.asarray(arrivals.src)[trow].tolist(), np.asarray(arrivals.token)[trow].tolist()
    for i, k in enumerate(zip(src, tok, tslot.tolist())):
        hit = result.alloc.get(k)
        if hit is not None and hit[0] == tx[i]:
            rank[i] = hit[1]
    return trow, tx, rank


class VectorHubResult(HubResult):
    """A :class:`HubResult` whose per-row outputs stay arrays until read: ``alloc`` and
    ``credits`` are built on first access (a dict of a million tuples costs more than the
    whole vectorised stage); :attr:`row_of` is the array the co-simulation reads."""

    def __init__(self, a: HubArrivals, ev: _Events, row, slot, **fields):
        for k, v in fields.items():
            setattr(self, k, v)
        self.row_of = row                 #: per arrival row: its row in its expert, -1 dropped
        self._a, self._ev, self._slot = a, ev, slot

    @functools.cached_property
    def alloc(self) -> dict:
        a, r = self._a, self._ev.opened
        r = r[self.row_of[r] >= 0]
        keys = zip(a.src[r].tolist(), a.token[r].tolist(), a.slot[r].tolist())
        return dict(zip(keys, zip(a.expert[r].tolist(), self.row_of[r].tolist())))

    @functools.cached_property
    def credits(self) -> list:
        a, ev = self._a, self._ev
        r = ev.row[ev.is_last]
        return list(zip(a.src[r].tolist(), a.tag[r].tolist(), self._slot[ev.is_last].tolist()))


def _same_rows(a: HubArrivals, b: HubArrivals) -> bool:
    """The same rows in the same order (a cached result may come from an equal schedule)."""
    return a is b or (len(a) == len(b) and all(
        np.array_equal(getattr(a, k), getattr(b, k)) for k in ("src", "token", "slot", "expert")))


def alloc_rows(result: HubResult, arrivals: HubArrivals) -> tuple:
    """(expert, row) of each arrival row's allocation (row -1: not allocated), from any
    backend's result (the vectorised one keeps them as arrays already)."""
    if isinstance(result, VectorHubResult) and _same_rows(result._a, arrivals):
        return np.asarray(arrivals.expert, dtype=np.int64), result.row_of
    n = len(arrivals)
    expert, row = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    keys = zip(arrivals.src.tolist(), arrivals.token.tolist(), arrivals.slot.tolist())
    for i, k in enumerate(keys):
        hit = result.alloc.get(k)
        if hit is not None:
            expert[i], row[i] = hit
    return expert, row


#: a hub backend: (cfg, arrivals) -> HubResult
HubBackend = Callable[[HubConfig, HubArrivals], HubResult]
BACKENDS: dict[str, HubBackend] = {"model": run_hub_fast, "reference": run_hub_reference}


def register_backend(name: str, backend: HubBackend) -> None:
    """Make a hub stage selectable as ``moehub cosim --hub <name>`` (e.g. the RTL's, see
    :mod:`moehub.cosim.hub_rtl`). It must return the same :class:`HubResult` fields;
    tile-ready cycles are compared against ``model`` by the caller."""
    BACKENDS[name] = backend


def backend_available(name: str) -> bool:
    """Backends beyond model/reference live in ``moehub.cosim.hub_<name>`` as
    ``run_hub_<name>(cfg, arrivals)`` and are registered on first use (e.g. ``rtl``)."""
    if name in BACKENDS:
        return True
    try:
        mod = importlib.import_module(f"moehub.cosim.hub_{name}")
    except ImportError:
        return False
    fn = getattr(mod, f"run_hub_{name}", None)
    if fn is None:
        return False
    register_backend(name, fn)
    return True


def known_backends() -> list:
    """Every hub backend: the built-in ones and each ``cosim/hub_<name>.py`` that defines
    ``run_hub_<name>`` (imported to find out: only asked for when listing them)."""
    here = [str(Path(__file__).resolve().parent)]
    found = [m.name[4:] for m in pkgutil.iter_modules(here) if m.name.startswith("hub_")]
    return list(BACKENDS) + sorted(n for n in found if n not in BACKENDS and backend_available(n))
