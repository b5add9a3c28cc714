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
chunk of the tile's last row is accepted (both from :mod:`moehub.rtl.timing`); the hub
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
from typing import Callable, Iterator

import numpy as np

from ..config.schema import HubConfig
from ..rtl.formats import CtlKind
from ..rtl.timing import FLAG_LATENCY, WRITE_LATENCY
from ..verif.model import HubModel, Packet
from ..verif.player import layer_program

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

    def __len__(self) -> int:
        return len(self.src)

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
        keys.sort()
        for cyc, lane, r, c in keys:
            if r >= n:
                _, _, s, cnt = self.eos[r - n]
                yield cyc, lane, Packet.eos(int(s), int(cnt))
            else:
                yield cyc, lane, Packet(src=int(self.src[r]), tag=int(self.tag[r]),
                                        expert=int(self.expert[r]), token=int(self.token[r]),
                                        slot=int(self.slot[r]), chunk=c,
                                        data=(r * cpr + c) & ((1 << cfg.data_bits) - 1))


@dataclass
class HubResult:
    """What the GEMM and the sources need from one hub."""
    tile_ready: dict        #: (expert, tile) -> cycle its flag is written
    counts: list            #: final rows per expert
    credits: list           #: (src, tag, cycle) a row's credit leaves the hub, in order
    alloc: dict             #: (src, token, slot) -> (expert, row)
    done_cycle: int         #: cycle of the layer-done write
    drops: int              #: packets/rows dropped (0 for a correct schedule)
    packets: int            #: packets the hub accepted (data + EOS)


class _Annotator:
    """Cycle annotation of a model's effects (shared by both paths)."""

    def __init__(self):
        self.ctl_free = 0
        self.tile_ready: dict = {}
        self.credits: list = []
        self.alloc: dict = {}
        self.done_cycle = -1
        self.prev_cycle = 0

    def apply(self, model: HubModel, fx, pkt: Packet, cycle: int, n_flags_before: int):
        flagged = model.tiles_flagged[n_flags_before:]
        if any(w.kind == CtlKind.COUNT for w in fx.ctl):
            # the layer finished at the end of the previous cycle; its sweep ran first
            self._sweep(fx.ctl, flagged, self.prev_cycle)
        if fx.opened is not None:
            s = max(cycle, self.ctl_free)
            self.ctl_free = s + 1
            self.alloc[(pkt.src, pkt.token, pkt.slot)] = fx.opened
        if fx.credit is not None:
            s = max(cycle, self.ctl_free)
            self.ctl_free = s + 1
            self.credits.append((pkt.src, pkt.tag, s))
            if fx.tile_ready is not None:
                self.tile_ready[fx.tile_ready] = s + FLAG_DELAY
        self.prev_cycle = cycle

    def finish(self, model: HubModel, n_flags_before: int):
        """After the last packet: end the last cycle; a finished layer sweeps."""
        out = model.end()
        if any(w.kind == CtlKind.COUNT for w in out):
            self._sweep(out, model.tiles_flagged[n_flags_before:], self.prev_cycle)

    def _sweep(self, ctl: list, flagged: list, cycle: int):
        """End-of-layer sweep: counts, last partial tiles' flags, done -- one word a cycle."""
        kinds = [w.kind for w in ctl]
        sweep = ctl[kinds.index(CtlKind.COUNT):]
        sweep_flags = flagged[:sum(w.kind == CtlKind.FLAG for w in sweep)]
        s = max(cycle, self.ctl_free) + SWEEP_DELAY
        k = 0
        for i, w in enumerate(sweep):
            if w.kind == CtlKind.FLAG:
                self.tile_ready[sweep_flags[k]] = s + i
                k += 1
            if w.kind == CtlKind.DONE:
                self.done_cycle = s + i
                break


def _setup(cfg: HubConfig, caps) -> HubModel:
    """A model hub programmed through its registers as the RTL is, ending with START
    (the same register writes as :func:`moehub.verif.player.csr_program`)."""
    model = HubModel(cfg)
    for name, value, index in layer_program(cfg, caps=caps):
        model.write(name, value, index)
    return model


def _result(model: HubModel, ann: _Annotator, packets: int) -> HubResult:
    return HubResult(tile_ready=ann.tile_ready, counts=list(model.rows), credits=ann.credits,
                     alloc=ann.alloc, done_cycle=ann.done_cycle,
                     drops=sum(model.drop_counts), packets=packets)


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
    if why:
        FALLBACKS[why] = FALLBACKS.get(why, 0) + 1
        return run_hub_reference(cfg, arrivals)
    return _vector_result(cfg, arrivals, ev)


#: reason -> times :func:`run_hub_fast` handed a schedule to the reference (benchmarks, tests)
FALLBACKS: dict = {}


def why_not_vectorised(cfg: HubConfig, arrivals: HubArrivals) -> str | None:
    """Why :func:`run_hub_fast` would replay this schedule with the reference (None: it
    runs vectorised)."""
    return _unclean_fields(cfg, arrivals) or _Events(cfg, arrivals).unclean


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
    import moehub.cosim
    found = [m.name[4:] for m in pkgutil.iter_modules(moehub.cosim.__path__) if m.name.startswith("hub_")]
    return list(BACKENDS) + sorted(n for n in found if n not in BACKENDS and backend_available(n))
