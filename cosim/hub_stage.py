"""The hub stage of the co-simulation: one destination GPU's arrivals in, tile-ready out.

The interface is deliberately small so that the hub can be the Python reference model
(:func:`run_hub_fast`, :func:`run_hub_reference`) or the hub's Verilog played by cocotb
(:func:`moehub.cosim.hub_rtl.run_hub_rtl`, ``moehub cosim --hub rtl`` or ``--rtl-gpus``):

    backend(cfg: HubConfig, arrivals: HubArrivals) -> HubResult

:class:`HubArrivals` is one destination's arrival schedule, stored per row (the cycle and
lane of each row's first and last packet) so that millions of packets stay cheap;
:meth:`HubArrivals.packets` expands it into the full list of ``(cycle, lane, Packet)`` in
hub order (accept cycle, then lane, then row, then chunk). Middle chunks are placed
strictly between their row's first and last packet in that order, so the row-level fast
path (:func:`run_hub_fast`) and packet-by-packet :func:`run_hub_reference` see the same
sequence of row openings and completions and produce identical allocations, flags,
tile-ready cycles, counts and credits (tested in tests/test_cosim_hub.py).

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
#: moehub.cosim.hub_rtl.compare)
SWEEP_DELAY = 13


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

    def _event_order(self):
        """Row openings and completions (and EOS) in hub order: keys (cycle, lane, id, chunk)."""
        n = len(self)
        cpr = self.cfg.chunks_per_row
        ids = np.arange(n)
        if cpr == 1:
            cyc, lane, rid, chunk = self.first_cycle, self.first_lane, ids, np.zeros(n, int)
        else:
            cyc = np.concatenate([self.first_cycle, self.last_cycle])
            lane = np.concatenate([self.first_lane, self.last_lane])
            rid = np.concatenate([ids, ids])
            chunk = np.concatenate([np.zeros(n, int), np.full(n, cpr - 1)])
        if self.eos:
            e = np.array(self.eos, dtype=np.int64).reshape(-1, 4)
            cyc = np.concatenate([cyc, e[:, 0]])
            lane = np.concatenate([lane, e[:, 1]])
            rid = np.concatenate([rid, n + np.arange(len(e))])
            chunk = np.concatenate([chunk, np.zeros(len(e), int)])
        order = np.lexsort((chunk, rid, lane, cyc))
        return cyc[order], lane[order], rid[order], chunk[order]

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
    """Row-level fast path: two :meth:`HubModel.packet` calls per row, plus
    :meth:`HubModel.absorb_middle_chunks` for the chunks in between (they only set bits of
    the row's chunk bitmap; their data writes are not recorded: the co-simulation needs
    timing only)."""
    model = _setup(cfg, arrivals.region_cap)
    ann = _Annotator()
    cpr = cfg.chunks_per_row
    n = len(arrivals)
    cyc, lane, rid, chunk = arrivals._event_order()
    src, tag, exp = arrivals.src.tolist(), arrivals.tag.tolist(), arrivals.expert.tolist()
    tok, slot = arrivals.token.tolist(), arrivals.slot.tolist()
    for c, l, r, k in zip(cyc.tolist(), lane.tolist(), rid.tolist(), chunk.tolist()):
        if r >= n:
            _, _, s, cnt = arrivals.eos[r - n]
            pkt = Packet.eos(int(s), int(cnt))
        else:
            pkt = Packet(src=src[r], tag=tag[r], expert=exp[r], token=tok[r], slot=slot[r],
                         chunk=k)
        nf = len(model.tiles_flagged)
        fx = model.packet(pkt, lane=l, cycle=c)
        if r < n and k == 0 and cpr > 2:
            model.absorb_middle_chunks(src[r], tag[r])
        ann.apply(model, fx, pkt, c, nf)
    ann.finish(model, len(model.tiles_flagged))
    packets = n * cpr + len(arrivals.eos)
    return _result(model, ann, packets)


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
