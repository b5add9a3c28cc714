"""Functional coverage of the hub regression: bins and crosses, sampled in the testbench's
monitors, one JSON file per test, merged into a report per config.

Why: a regression that passes says nothing about what it exercised. Each group below is a
boundary or an interaction the hub's rules depend on (docs/hub.md: the blocks, bad input); a bin
that no test hits is a rule that no test checked at that boundary.

How it is collected. :class:`Collector` is attached to every :class:`~moehub.verif.tb.env.HubTB`
(``MOEHUB_COVERAGE=0`` turns it off). Two parts:

* a *cycle monitor* (:meth:`Collector.cycle`, called by the testbench's per-cycle loop):
  stalls of every output and of the input lanes (run lengths), the event and credit
  queues full, the cycle the watchdog fires (the last two read hub-internal signals when the
  simulator shows them; a netlist or a ports-only build leaves those bins unsampled);
* a *replay monitor* (:meth:`Collector.sample`, called by ``HubTB.check``): the logged run
  (packets in accept order, CSR writes, resets, watchdog) is replayed into a fresh reference
  model, and every packet's effects (opened, completed, dropped and why, tile flagged) are
  binned. It is recomputed from the log at every check, per reset segment, so nothing is
  counted twice.

Each check writes ``<sim build folder>/coverage/<test>-s<seed>-<n>.json``
(``MOEHUB_COVERAGE_DIR`` overrides the folder). :func:`merge_files` sums them;
``python -m moehub.verif.coverage report [BUILD]`` prints the table per config (bins hit /
total per group, and what was missed) and writes ``BUILD/coverage/report.txt`` and
``BUILD/coverage/<config>.json``.

Why not cocotb-coverage: its ``coverage_db`` is one global per simulator process, its merge
works on XML exports, and its bins are declared by decorating sampling functions. Here the
bins depend on the hub config (lanes, tile sizes), the report must run without a simulator
(pytest, the command line), and most bins are sampled from the replayed log rather than
from calls in the test, so a small collector with plain dictionaries is simpler.

Nothing here imports cocotb at module level.
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

from ..spec.config import HubConfig, load_hub_config
from ..spec.csr_map import CTRL_FLUSH, CTRL_START
from ..spec.formats import CtlKind, PacketKind, Reason

#: chunk index class: 0, 1 .. C-2, C-1 (plus "out" for >= C and "eos" for an end-of-stream)
CHUNK = ("first", "middle", "last")
#: arrival order of a chunk within its row: opened it, neither, completed it
ORDER = ("first", "middle", "last")
#: position of a packet in its layer: which third of the layer's accepted packets
POS = ("early", "middle", "late")
#: a stall of at least this many cycles is "long" (longer than a lane's 8-slot write buffer)
LONG_STALL = 16
#: a packet accepted this many cycles before a FLUSH/START is still in the hub's pipeline
PIPELINE_CYCLES = 8

ROW_REASONS = (Reason.BAD_SOURCE, Reason.BAD_EXPERT, Reason.OVERFLOW, Reason.POST_EOS,
               Reason.DUPLICATE, Reason.PROTOCOL)
EOS_REASONS = (Reason.EOS_MISMATCH, Reason.EOS_DUPLICATE)
CONTROL_STATES = {"flush": ("not_armed", "idle", "rows_open", "traffic", "sweep"),
                  "timeout": ("idle", "rows_open", "traffic"),
                  "start": ("not_armed", "idle", "rows_open", "traffic", "sweep")}
EOS_BINS = ("eos/before_rows", "eos/between_rows", "eos/after_rows", "eos/count0",
            "eos/same_cycle_row", "end/by_eos", "end/by_row", "end/by_post_eos_row")


# ---------------------------------------------------------------------------- the bins
def tile_sizes(cfg: HubConfig) -> list[int]:
    """Every tile size TILE_ROWS_LOG2 can select (powers of two, min..max)."""
    out, t = [], cfg.min_tile_rows
    while t <= cfg.max_tile_rows:
        out.append(t)
        t *= 2
    return out


def output_ports(cfg: HubConfig) -> list[str]:
    """Ports that can stall: every write lane, ctl, credit, and the input lanes ("in")."""
    return [f"wr{j}" for j in range(cfg.lanes)] + ["ctl", "credit", "in"]


def _drop_bins() -> list[str]:
    bins = [f"{r.name}/{c}/{p}" for r in ROW_REASONS for c in CHUNK for p in POS]
    bins += [f"BAD_SOURCE/eos/{p}" for p in POS] + [f"BAD_CHUNK/out/{p}" for p in POS]
    bins += [f"NOT_ARMED/{c}/{w}" for c in CHUNK + ("eos",) for w in ("before_start", "after_end")]
    bins += [f"{r.name}/eos/{p}" for r in EOS_REASONS for p in POS]
    return bins


def _tile_bins(cfg: HubConfig) -> list[str]:
    bins = [f"flag/tr{t}/{p}" for t in tile_sizes(cfg) for p in ("first", "middle", "last")
            if not (t == 2 and p == "middle")]
    bins += [f"last/{f}/{s}" for f in ("one", "middle", "allbut1") for s in ("flagged", "unflagged")]
    return bins + ["last/exact", "last/empty"]


def bin_definitions(cfg: HubConfig) -> dict[str, tuple[str, list[str]]]:
    """group -> (why it matters, bin labels). Labels are crosses written ``a/b/c``."""
    L = cfg.lanes
    lanes_k = [f"lane{j}/x{k}" for j in range(L) for k in range(1, L + 1)]
    return {
        "contention": ("lane x how many lanes carry data for one expert in the cycle", lanes_k),
        "alloc_contention": ("lane x how many rows of one expert are allocated in the cycle "
                             "(the allocator's grants in lane order)", list(lanes_k)),
        "chunk_order": ("chunk index (first/middle/last) x arrival order in its row "
                        "(opened it / neither / completed it) x lane",
                        [f"{c}/{o}/lane{j}" for c in CHUNK for o in ORDER for j in range(L)]),
        "drops": ("every drop reason x chunk index class x position in the layer "
                  "(thirds of its packets; NOT_ARMED: before START or after the layer)",
                  _drop_bins()),
        "tiles": ("tile flagged during the layer by its first/middle/last row, per tile size; "
                  "the last partial tile at the layer's end (1, middle, all but 1 rows; "
                  "flagged, or not after a flush), exact multiple, empty region", _tile_bins(cfg)),
        "backpressure": (f"every output and the input stalled 1..{LONG_STALL - 1} (short) and "
                         f">= {LONG_STALL} (long) cycles in a row",
                         [f"{p}/{r}" for p in output_ports(cfg) for r in ("short", "long")]),
        "queues": ("event queue and credit queue full: fewer free entries than two groups of "
                   "lanes packets, the input reservations' limit, so the input is held "
                   "(hub-internal levels; the reservations never let a queue reach its depth)",
                   ["events/full", "credits/full"]),
        "layer_control": ("FLUSH, watchdog TIMEOUT and START x the hub's state then: not armed, "
                          "armed and idle, rows open, packets in flight, end-of-layer sweep",
                          [f"{k}/{s}" for k, ss in CONTROL_STATES.items() for s in ss]),
        "capacity": ("a row allocated within one tile below the region's capacity, the row "
                     "that fills it exactly, a row refused for overflow; for a programmed "
                     "capacity and for the whole region (max_rows_per_expert); one cycle both "
                     "granting and refusing an expert's rows; a row index with its top bit set",
                     [f"{k}/{s}" for k in ("programmed", "full") for s in ("near", "at", "overflow")]
                     + ["split", "row_top_bit"]),
        "eos": ("end-of-stream before / between / after its source's rows, count 0, in the "
                "same cycle as a row of its source; what finished the layer", list(EOS_BINS)),
    }


class Coverage:
    """Hit counts of every bin of one config (see :func:`bin_definitions`)."""

    def __init__(self, cfg: HubConfig):
        self.config = cfg.name
        self.defs = bin_definitions(cfg)
        self.hits: dict[str, dict[str, int]] = {g: {} for g in self.defs}
        self.unknown: dict[str, int] = {}

    def hit(self, group: str, label: str, n: int = 1):
        """Count a sample; a label that is not a bin is kept apart (a sampling bug shows)."""
        if label in self._bins(group):
            self.hits[group][label] = self.hits[group].get(label, 0) + n
        else:
            key = f"{group}:{label}"
            self.unknown[key] = self.unknown.get(key, 0) + n

    def _bins(self, group: str) -> set:
        cache = self.__dict__.setdefault("_binsets", {})
        if group not in cache:
            cache[group] = set(self.defs[group][1])
        return cache[group]

    def merge(self, other: "Coverage | dict"):
        d = other.to_dict() if isinstance(other, Coverage) else other
        for g, bins in d.get("groups", {}).items():
            for label, n in bins.items():
                if g in self.defs:
                    self.hit(g, label, n)
        for k, n in d.get("unknown", {}).items():
            self.unknown[k] = self.unknown.get(k, 0) + n
        return self

    def to_dict(self) -> dict:
        return {"config": self.config, "groups": {g: dict(h) for g, h in self.hits.items()},
                "unknown": dict(self.unknown)}

    def summary(self) -> dict:
        """Per group and in total: bins hit, bins, percent, missed labels."""
        out, hit_all, tot_all = {}, 0, 0
        for g, (why, bins) in self.defs.items():
            hit = [b for b in bins if self.hits[g].get(b)]
            out[g] = {"hit": len(hit), "bins": len(bins), "percent": _pct(len(hit), len(bins)),
                      "missed": [b for b in bins if not self.hits[g].get(b)], "why": why}
            hit_all, tot_all = hit_all + len(hit), tot_all + len(bins)
        return {"config": self.config, "hit": hit_all, "bins": tot_all,
                "percent": _pct(hit_all, tot_all), "groups": out}


def _pct(a: int, b: int) -> float:
    return round(100.0 * a / b, 1) if b else 100.0


# ---------------------------------------------------------------------------- classifiers
def chunk_class(cfg: HubConfig, pkt) -> str:
    if pkt.kind == PacketKind.EOS:
        return "eos"
    if pkt.chunk >= cfg.chunks_per_row:
        return "out"
    return "first" if pkt.chunk == 0 else "last" if pkt.chunk == cfg.chunks_per_row - 1 else "middle"


def tile_position(row: int, tile_rows: int) -> str:
    k = row % tile_rows
    return "first" if k == 0 else "last" if k == tile_rows - 1 else "middle"


def last_tile_fill(n: int, tile_rows: int) -> list[str]:
    """Fill classes of an expert's last tile with ``n`` rows (tile size 2: 1 row is both)."""
    if n == 0:
        return ["empty"]
    f = n % tile_rows
    if f == 0:
        return ["exact"]
    out = (["one"] if f == 1 else []) + (["allbut1"] if f == tile_rows - 1 else [])
    return out or ["middle"]


def capacity_state(row: int, cap: int, tile_rows: int) -> Optional[str]:
    """Where an allocated row lies below its region's capacity."""
    if row == cap - 1:
        return "at"
    if cap - tile_rows <= row < cap - 1:
        return "near"
    return None


# ---------------------------------------------------------------------------- collection
def enabled() -> bool:
    return os.environ.get("MOEHUB_COVERAGE", "1") != "0"


def _test_name() -> str:
    """The running cocotb test (its task carries the test's name)."""
    try:
        from cocotb.task import current_task
        return current_task().get_name().split()[-1]   # ("Test <name>" in cocotb 2.1)
    except Exception:       # outside a test (a harness building a TB by hand)
        return "unknown"


_INSTANCES: dict = defaultdict(int)   # (test, seed) -> collectors made in this process

#: hub-internal signals the cycle monitor reads when the simulator shows them
INTERNAL = {"events": "events.level", "credits": "credits.level", "fire": "pm.flush_timeout"}


class Collector:
    """Coverage of one testbench (see the module docstring): :meth:`cycle` every cycle,
    :meth:`sample` at every check, which also writes the test's JSON file."""

    def __init__(self, tb):
        self.tb, self.cfg = tb, tb.cfg
        self.live = Coverage(tb.cfg)              # cycle monitor: never recomputed
        self.segments: dict[int, Coverage] = {}   # reset segment -> replay coverage
        self.test = _test_name()
        key = (self.test, tb.seed)
        self.path = _out_dir() / f"{self.test}-s{tb.seed}-{_INSTANCES[key]}.json"
        _INSTANCES[key] += 1
        self.runs = {p: 0 for p in output_ports(tb.cfg)}
        self.in_stalls: list[tuple] = []          # (first, last) cycles the input was refused
        self.fires: list[int] = []                # cycles the watchdog fired
        self._stalled_last = {"ctl": False, "credit": False}
        self._fire_last = 0
        self._last_cyc = -1
        self._internal: Optional[dict] = None

    # ---- cycle monitor
    def cycle(self, cyc: int):
        """Sample cycle ``cyc`` (just ended): stalls, full queues, the watchdog firing."""
        tb = self.tb
        self._last_cyc = cyc
        rd = tb._ready_driven
        for j in range(self.cfg.lanes):
            self._run(f"wr{j}", not rd["wr"][j] and int(tb.wr_valid[j].value), cyc)
        ctl = bool(not rd["ctl"] and int(tb.dut.ctl__valid.value))
        credit = bool(not rd["credit"] and int(tb.dut.credit__valid.value))
        self._run("ctl", ctl, cyc)
        self._run("credit", credit, cyc)
        offered = any(p is not None for p in tb._driven)
        self._run("in", offered and not int(tb.i_ready[0].value), cyc)
        sig = self._signals()
        for q, port, stalled in (("events", "ctl", ctl), ("credits", "credit", credit)):
            # a queue fills only while its port stalls: read its level only then
            if sig.get(q) is not None and (stalled or self._stalled_last[port]):
                depth = self.cfg.event_queue_depth if q == "events" else self.cfg.credit_queue_depth
                if sig[q].value.to_unsigned() > depth - 2 * self.cfg.lanes:
                    self.live.hit("queues", f"{q}/full")
            self._stalled_last[port] = stalled
        if sig.get("fire") is not None:
            fire = int(sig["fire"].value)
            if fire and not self._fire_last:
                self.fires.append(cyc)
            self._fire_last = fire

    def _run(self, port: str, stalled, cyc: int):
        if stalled:
            self.runs[port] += 1
        elif self.runs[port]:
            self._end_run(port, cyc)

    def _end_run(self, port: str, cyc: int, ongoing: bool = False):
        n = self.runs[port]
        self.live.hit("backpressure", f"{port}/{'long' if n >= LONG_STALL else 'short'}")
        if port == "in" and not ongoing:
            self.in_stalls.append((cyc - n, cyc - 1))
        if not ongoing:
            self.runs[port] = 0

    def _signals(self) -> dict:
        """Hub-internal handles (None where the build does not show them), found once."""
        if self._internal is None:
            self._internal = _find_internal(self.tb.dut)
        return self._internal

    # ---- replay monitor
    def sample(self):
        """Recompute the coverage of the log since the last reset and write the JSON."""
        for port in self.runs:
            if self.runs[port]:
                self._end_run(port, self.tb.cycle, ongoing=True)
        entries = sorted(self.tb.log, key=lambda e: (e[0], e[2] != "packet", e[1]))
        resets = [i for i, e in enumerate(entries) if e[2] == "reset"]
        start = resets[-1] if resets else 0
        cov = Coverage(self.cfg)
        _Replay(self, cov).run(entries[start:])
        self.segments[len(resets)] = cov
        self.write()

    def total(self) -> Coverage:
        cov = Coverage(self.cfg).merge(self.live)
        for seg in self.segments.values():
            cov.merge(seg)
        return cov

    def write(self):
        d = self.total().to_dict()
        d.update(test=self.test, seed=self.tb.seed)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(d, indent=0, sort_keys=True))
        tmp.replace(self.path)

    def stall_at(self, cyc: int) -> bool:
        """Was the input refused (packets offered, not accepted) in cycle ``cyc``?"""
        if self.runs["in"] and self._last_cyc - self.runs["in"] < cyc <= self._last_cyc:
            return True
        return any(a <= cyc <= b for a, b in self.in_stalls)


def _out_dir() -> Path:
    return Path(os.environ.get("MOEHUB_COVERAGE_DIR") or Path.cwd() / "coverage")


_INTERNAL_CACHE: dict = {}


def _find_internal(dut) -> dict:
    """Handles of :data:`INTERNAL`, None where the build does not show them. Yosys keeps
    the hierarchy in flattened, escaped names (``\\events.level``); ``_get`` is cocotb's
    lookup of an optional signal. Cached per top."""
    if id(dut) not in _INTERNAL_CACHE:
        found = {}
        for key, name in INTERNAL.items():
            h = None
            for form in ("\\" + name, name):
                try:
                    h = dut._get(form)
                except Exception:
                    h = None
                if h is not None:
                    break
            found[key] = h
        _INTERNAL_CACHE[id(dut)] = found
    return _INTERNAL_CACHE[id(dut)]


class _Layer:
    """What the replay keeps of the running layer: its packets (for positions), its drops
    waiting for the layer's length, each source's end-of-stream (count, rows before it)."""

    def __init__(self, cycle: int):
        self.start, self.n = cycle, 0
        self.drops: list[tuple] = []
        self.eos: dict[int, tuple] = {}


#: drop reason -> the chunk classes its bins have
_DROP_CLASSES = {Reason.BAD_CHUNK: ("out",), Reason.EOS_MISMATCH: ("eos",),
                 Reason.EOS_DUPLICATE: ("eos",), Reason.BAD_SOURCE: CHUNK + ("eos",),
                 Reason.NOT_ARMED: CHUNK + ("eos",)}
_ROW_OPENING = (Reason.BAD_EXPERT, Reason.OVERFLOW, Reason.POST_EOS)


class _Replay:
    """One reset segment of a testbench's log replayed into a fresh reference model, in the
    scoreboard's order (accept cycle, packets before CSR writes, log order); every packet's
    effects, every CTRL write and watchdog entry and every layer end are binned."""

    def __init__(self, col: Collector, cov: Coverage):
        from ..spec.model import HubModel
        self.col, self.cov, self.cfg, self.tb = col, cov, col.cfg, col.tb
        self.model = HubModel(self.cfg)
        self.ctrl_addr = self.tb.map["CTRL"].addr(0, 0)
        self.accepts = sorted(c for c, _, k, _ in self.tb.log if k == "packet")
        self.dones = sorted(c for c, w in self.tb.ctl_out if w.kind == CtlKind.DONE)
        self.cur: Optional[int] = None
        self.cycle_pkts: list[tuple] = []
        self.layer: Optional[_Layer] = None
        self.layer_ends: list[int] = []
        self.row_reason: dict[tuple, Reason] = {}

    def run(self, entries: Iterable[tuple]):
        for cyc, _, kind, args in entries:
            if cyc != self.cur:
                self._end_cycle()
                self.cur = cyc
            if kind == "packet":
                self._packet(*args)
            elif kind == "reset":
                self.model.reset()
                self.layer = None
            elif kind == "csr":
                self._csr(cyc, *args)
            elif kind == "timeout":
                self._timeout(cyc)
        self._end_cycle()
        if self.layer is not None:
            self._close_drops()

    # ---- model calls
    def _apply(self, fn, cyc: int, flushed: bool = False):
        """Call the model; bin the EOS mismatches it applied and a layer that ended."""
        m = self.model
        was, before = m.armed, list(m.drop_counts)
        fn()
        if m.drop_counts[Reason.EOS_MISMATCH] > before[Reason.EOS_MISMATCH] and self.layer:
            self.layer.drops.append((Reason.EOS_MISMATCH.name + "/eos", max(self.layer.n - 1, 0)))
        if was and not m.armed:
            self._layer_end(cyc, flushed)

    def _end_cycle(self):
        if self.cur is None:
            return
        self._apply(self.model.end, self.cur)
        self._cycle_bins()
        self.cycle_pkts = []

    def _packet(self, pkt, lane: int, cyc: int):
        m = self.model
        done_before, before = m.done, list(m.drop_counts)
        idx = None
        if m.armed and self.layer is not None:
            idx, self.layer.n = self.layer.n, self.layer.n + 1
        fx = m.packet(pkt, lane, cyc)
        self.cycle_pkts.append((lane, pkt, fx))
        for r in Reason:
            if m.drop_counts[r] > before[r] and r != Reason.EOS_MISMATCH:
                self._drop(r, pkt, idx, done_before)
        self._row_bins(pkt, fx)
        if pkt.kind == PacketKind.EOS and fx.drop is None and self.layer is not None \
                and pkt.src not in self.layer.eos and m.drop_counts[Reason.EOS_DUPLICATE] == before[Reason.EOS_DUPLICATE]:
            self.layer.eos[pkt.src] = (pkt.count, m.src_rows[pkt.src])

    def _csr(self, cyc: int, addr: int, data: int):
        m = self.model
        if addr != self.ctrl_addr or not data & (CTRL_START | CTRL_FLUSH):
            m.write_addr(addr, data)
            return
        self._apply(m.end, cyc)                     # this cycle's packets came first
        if data & CTRL_START:
            self.cov.hit("layer_control", f"start/{self._state(cyc)}")
            if self.layer is not None:
                self._close_drops()                  # the running layer is abandoned
            m.write_addr(addr, data)
            self.layer = _Layer(cyc) if m.armed else None
        else:
            self.cov.hit("layer_control", f"flush/{self._state(cyc)}")
            self._apply(lambda: m.write_addr(addr, data), cyc, flushed=True)

    def _timeout(self, cyc: int):
        """A watchdog entry (logged by the test after the fact): classified at the cycle
        the hub's watchdog fired when the cycle monitor saw it."""
        self._apply(self.model.end, cyc)
        start = self.layer.start if self.layer else -1
        fires = [f for f in self.col.fires if start <= f <= cyc]
        fire = fires[-1] if fires else cyc
        if self.model.armed:
            self.cov.hit("layer_control", f"timeout/{self._state(fire)}")
        self._apply(lambda: self.model.flush(timeout=True), cyc, flushed=True)

    # ---- classification
    def _state(self, cyc: int) -> str:
        m = self.model
        if not m.armed:
            return "sweep" if self._in_sweep(cyc) else "not_armed"
        i = bisect.bisect_right(self.accepts, cyc)
        if (i and self.accepts[i - 1] > cyc - PIPELINE_CYCLES) or self.col.stall_at(cyc):
            return "traffic"
        return "rows_open" if m.inflight else "idle"

    def _in_sweep(self, cyc: int) -> bool:
        """Between a layer's end and its done word leaving the hub."""
        if not self.layer_ends:
            return False
        end = self.layer_ends[-1]
        i = bisect.bisect_left(self.dones, end)
        return end <= cyc and (i == len(self.dones) or cyc <= self.dones[i])

    def _drop(self, r: Reason, pkt, idx: Optional[int], done_before: bool):
        cls = chunk_class(self.cfg, pkt)
        if cls not in _DROP_CLASSES.get(r, CHUNK):
            return
        if r == Reason.NOT_ARMED:
            self.cov.hit("drops", f"NOT_ARMED/{cls}/{'after_end' if done_before else 'before_start'}")
        elif self.layer is not None and idx is not None:
            self.layer.drops.append((f"{r.name}/{cls}", idx))

    def _row_bins(self, pkt, fx):
        cfg, m = self.cfg, self.model
        if fx.opened:
            x, row = fx.opened
            st = capacity_state(row, m.layer_region_cap[x], m.tile_rows)
            if st:
                self.cov.hit("capacity", f"{self._cap_kind(x)}/{st}")
            if row >= cfg.max_rows_per_expert // 2:
                self.cov.hit("capacity", "row_top_bit")
        if fx.drop == Reason.OVERFLOW:
            self.cov.hit("capacity", f"{self._cap_kind(pkt.expert)}/overflow")
        if fx.tile_ready and fx.completed:
            tr = m.tile_rows
            self.cov.hit("tiles", f"flag/tr{tr}/{tile_position(fx.completed[1], tr)}")
        if pkt.kind == PacketKind.DATA and fx.drop in _ROW_OPENING:
            self.row_reason[(pkt.src, pkt.tag)] = fx.drop
        if fx.credit:
            fx.post_eos_row = self.row_reason.pop(fx.credit, None) == Reason.POST_EOS

    def _cap_kind(self, x: int) -> str:
        full = self.model.layer_region_cap[x] == self.cfg.max_rows_per_expert
        return "full" if full else "programmed"

    def _cycle_bins(self):
        """Bins over one cycle's packets: contention, chunk order, a split grant, an EOS in
        the same cycle as a row of its source."""
        per_x, alloc, refused = defaultdict(list), defaultdict(list), set()
        eos_src, row_src = set(), set()
        for lane, pkt, fx in self.cycle_pkts:
            if pkt.kind == PacketKind.EOS:
                if fx.drop is None:
                    eos_src.add(pkt.src)
                continue
            if fx.drop not in (Reason.NOT_ARMED, Reason.BAD_SOURCE, Reason.BAD_CHUNK) \
                    and pkt.expert < self.cfg.experts:
                per_x[pkt.expert].append(lane)
            if fx.opened:
                alloc[fx.opened[0]].append(lane)
            if fx.opened or fx.drop in _ROW_OPENING:
                row_src.add(pkt.src)
            if fx.drop == Reason.OVERFLOW:
                refused.add(pkt.expert)
            if fx.write is not None:
                order = "first" if fx.opened else "last" if fx.completed else "middle"
                self.cov.hit("chunk_order", f"{chunk_class(self.cfg, pkt)}/{order}/lane{lane}")
        for group, d in (("contention", per_x), ("alloc_contention", alloc)):
            for lanes in d.values():
                for j in lanes:
                    self.cov.hit(group, f"lane{j}/x{len(lanes)}")
        if refused & set(alloc):
            self.cov.hit("capacity", "split")
        if eos_src & row_src:
            self.cov.hit("eos", "eos/same_cycle_row")

    # ---- end of a layer
    def _layer_end(self, cyc: int, flushed: bool):
        m, cfg = self.model, self.cfg
        tr = m.tile_rows
        flagged = set(m.tiles_flagged)
        for x in range(cfg.experts):
            n = m.rows[x]
            for f in last_tile_fill(n, tr):
                tail = "" if f in ("exact", "empty") else \
                    "/flagged" if (x, n // tr) in flagged else "/unflagged"
                self.cov.hit("tiles", f"last/{f}{tail}")
        if not flushed:
            self.cov.hit("eos", f"end/{self._finish_cause()}")
        if self.layer is not None:
            self._eos_bins()
            self._close_drops()
        self.layer = None
        self.layer_ends.append(cyc)

    def _finish_cause(self) -> str:
        pk = self.cycle_pkts
        if any(p.kind == PacketKind.EOS and fx.drop is None for _, p, fx in pk):
            return "by_eos"
        if any(getattr(fx, "post_eos_row", False) for _, _, fx in pk):
            return "by_post_eos_row"
        return "by_row"

    def _eos_bins(self):
        for s, (count, before) in self.layer.eos.items():
            total = self.model.src_rows[s]
            if count == 0:
                label = "count0"
            elif before == 0:
                label = "before_rows"
            else:
                label = "between_rows" if before < total else "after_rows"
            self.cov.hit("eos", f"eos/{label}")

    def _close_drops(self):
        n = max(self.layer.n, 1)
        for prefix, idx in self.layer.drops:
            self.cov.hit("drops", f"{prefix}/{POS[min(2, 3 * idx // n)]}")
        self.layer.drops = []


# ---------------------------------------------------------------------------- merge and report
def coverage_files(paths: Iterable[Path]) -> list[Path]:
    """Per-test JSON files under ``paths`` (a build folder: ``sim/*/coverage/``; a sim
    folder; a coverage folder; or files)."""
    out = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(p)
        elif (p / "sim").is_dir() or any(p.glob("test-*/sim")):
            # (pytest-xdist workers each have a build folder of their own: test-<worker>/)
            out += sorted(p.glob("sim/*/coverage/*.json")) + sorted(p.glob("test-*/sim/*/coverage/*.json"))
        elif (p / "coverage").is_dir():
            out += sorted((p / "coverage").glob("*.json"))
        else:
            out += sorted(p.glob("*.json"))
    return out


def merge_files(files: Iterable[Path]) -> dict[str, Coverage]:
    """config name -> the merged coverage of every file of that config."""
    merged: dict[str, Coverage] = {}
    for f in files:
        d = json.loads(Path(f).read_text())
        name = d["config"]
        if name not in merged:
            merged[name] = Coverage(load_hub_config(name))
        merged[name].merge(d)
        merged[name].__dict__.setdefault("tests", set()).add(d.get("test", "?"))
    return merged


def format_table(summary: dict, missed: int = 8) -> str:
    """Text table of one config: a line per group and the total; missed bins listed."""
    s = summary
    lines = [f"coverage {s['config']}: {s['hit']}/{s['bins']} bins ({s['percent']} %)",
             f"  {'group':<18} {'hit':>5} {'bins':>5} {'%':>6}  missed"]
    for g, d in s["groups"].items():
        miss = d["missed"]
        shown = ", ".join(miss[:missed]) + (f", ... (+{len(miss) - missed})" if len(miss) > missed else "")
        lines.append(f"  {g:<18} {d['hit']:>5} {d['bins']:>5} {d['percent']:>6}  {shown}")
    return "\n".join(lines)


def report(paths: Iterable[Path], out_dir: Optional[Path] = None, configs=None,
           missed: int = 8) -> dict[str, dict]:
    """Merge, print the table per config, write ``report.txt`` and ``<config>.json`` into
    ``out_dir``; returns config -> summary."""
    files = coverage_files(paths)
    merged = merge_files(files)
    sums, text = {}, []
    for name in sorted(merged):
        if configs and name not in configs:
            continue
        cov = merged[name]
        s = cov.summary()
        s["tests"] = sorted(cov.__dict__.get("tests", ()))
        s["unknown"] = cov.unknown
        sums[name] = s
        text.append(format_table(s, missed))
    body = "\n\n".join(text) if text else f"no coverage files under {', '.join(map(str, paths))}"
    print(body)
    if out_dir is not None and sums:
        out_dir.mkdir(parents=True, exist_ok=True)
        name = "report.txt" if not configs else f"report-{'-'.join(sorted(sums))}.txt"
        (out_dir / name).write_text(body + "\n")
        for name, s in sums.items():
            (out_dir / f"{name}.json").write_text(json.dumps(s, indent=1))
    return sums


def main(argv: Optional[list] = None) -> int:
    from ..paths import build_root
    ap = argparse.ArgumentParser(prog="python -m moehub.verif.coverage",
                                 description="Functional coverage of the cocotb regression.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("report", help="merge every test's coverage file and print the table")
    rp.add_argument("paths", nargs="*", type=Path,
                    help="build folder(s), sim folder(s) or JSON files (default: the build folder)")
    rp.add_argument("--config", action="append", help="only this hub config (repeatable)")
    rp.add_argument("--missed", type=int, default=8, help="missed bins listed per group")
    rp.add_argument("--min", type=float, default=None,
                    help="exit 1 when a config's total is below this percentage")
    a = ap.parse_args(argv)
    paths = a.paths or [build_root()]
    is_build = (paths[0] / "sim").is_dir() or any(paths[0].glob("test-*/sim"))
    out = (paths[0] if is_build else build_root()) / "coverage"
    sums = report(paths, out, a.config, a.missed)
    if not sums:
        return 1
    print(f"(written to {out}/report.txt and {out}/<config>.json)", file=sys.stderr)
    if a.min is not None and any(s["percent"] < a.min for s in sums.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
