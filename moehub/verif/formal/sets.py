"""The property sets: which harness, on which config, in which modes, to which depth.

A set is one harness on one config. ``modes`` gives the depth of each mode the full
(slow) set runs: ``prove`` where k-induction closes (its depth is k, and the base case is
a BMC to the same depth), ``bmc`` where it does not (or as well, deeper than k),
``cover`` always (every cover statement must be reached within the depth). ``smoke``
gives the few shallow jobs of the fast set. Depths are cycles from reset; the why of
each is in ``note`` (and in docs/verification.md, "Formal proofs").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from amaranth.back import rtlil
from amaranth.lib import data

from ...paths import output_dir
from ...rtl.layouts import HubLayouts
from .common import formal_config
from .sby import MODES, JobResult, run_job


@dataclass(frozen=True)
class PropertySet:
    """One harness on one config (see the module docstring)."""
    name: str
    component: str
    config: str
    build: Callable[[], object]
    modes: dict
    smoke: dict = field(default_factory=dict)
    script: tuple = ()
    note: str = ""


def _alloc(cfg_name, **changes):
    from .allocator import AllocatorHarness
    return lambda: AllocatorHarness(formal_config(cfg_name).replace(**changes))


def _queue(kind, cfg_name=None, slots=None, depth=None, bits=None):
    """An event or credit queue of a config's layout and size, or a reduced one."""
    from .queue import QueueHarness

    def build():
        if cfg_name is None:
            return QueueHarness(data.StructLayout({"v": bits}), slots, depth)
        cfg = formal_config(cfg_name)
        lay = HubLayouts(cfg)
        layout, d = ((lay.event, cfg.event_queue_depth) if kind == "event"
                     else (lay.credit, cfg.credit_queue_depth))
        return QueueHarness(layout, cfg.lanes, d)
    return build


def _tracker(cfg_name, **changes):
    from .tracker import TrackerHarness
    return lambda: TrackerHarness(formal_config(cfg_name).replace(**changes))


def _pm(cfg_name, only=None, **changes):
    from .packet_manager import PacketManagerHarness
    return lambda: PacketManagerHarness(formal_config(cfg_name).replace(**changes), only=only)


def _pm_group(group: str, k: int, note: str, counts_note: str, counts_k: int | None = None) -> list:
    """The packet manager's property ``group`` proven alone by k-induction at ``k``: on
    ``tiny/pm-small``, in paged mode (the page gate free) and with count packets (at
    ``counts_k``, else ``k``)."""
    name = f"packet-manager-{group}"
    return [
        PropertySet(name, "packet manager", "tiny/pm-small", _pm("tiny/pm-small", group),
                    {"prove": k}, note=note),
        PropertySet(f"{name}-paged", "packet manager", "tiny/pm-small, 8 pages",
                    _pm("tiny/pm-small", group, pool_pages=8), {"prove": k},
                    note=f"protocol v2: as {name} in paged mode, the page gate free"),
        PropertySet(f"{name}-counts", "packet manager", "tiny/pm-small, count packets",
                    _pm("tiny/pm-small", group, count_packets=True), {"prove": counts_k or k},
                    note=f"protocol v2: as {name} with count packets {counts_note}"),
    ]


def _page_pool(pages):
    from .page_pool import PagePoolHarness
    return lambda: PagePoolHarness(formal_config("tiny").replace(pool_pages=pages))


def _page_supply(pages, **changes):
    from .page_supply import PageSupplyHarness
    return lambda: PageSupplyHarness(formal_config("tiny").replace(pool_pages=pages, **changes))


def _page_gate(cfg_name, **changes):
    from .page_gate import PageGateHarness
    return lambda: PageGateHarness(formal_config(cfg_name).replace(**changes))


def _mcast_alloc(cfg_name, **changes):
    from .multicast_allocator import MulticastAllocatorHarness
    return lambda: MulticastAllocatorHarness(formal_config(cfg_name).replace(**changes))


def _mcast_admitted(cfg_name, **changes):
    from .multicast_allocator import AdmittedAllocatorHarness
    return lambda: AdmittedAllocatorHarness(formal_config(cfg_name).replace(**changes))


def _mcast_v2(kind, cfg_name, **changes):
    """The hub's multicast allocator with a v2 feature: ``paged`` or ``counts``."""
    from .multicast_v2 import CountsAllocatorHarness, PagedAllocatorHarness
    cls = {"paged": PagedAllocatorHarness, "counts": CountsAllocatorHarness}[kind]
    return lambda: cls(formal_config(cfg_name).replace(**changes))


#: the multicast allocator's reduced config: alloc-small (4 lanes, 3 experts, regions of 8
#: rows, so a 24-row arena) with rows naming up to all 3 experts
MCAST = dict(topk=3, max_targets=3)
#: ... as the hub's (admitted) with a v2 feature: 2 lanes (4 made a BMC step ~3x dearer:
#: the pool did not run dry within an affordable depth), regions of 16 rows (tight below
#: 5 groups x 2 lanes = 10 rows); paged: 8 pages of 2- or 4-row tiles (the hub needs tiles
#: of at least ``lanes`` rows); count packets: 2 sources (an expert's counts in 2 packets)
MCAST_PAGED = dict(MCAST, lanes=2, max_rows_per_expert=16, pool_pages=8, min_tile_rows=2, tile_rows=2, max_tile_rows=4)
#: the unicast page gate's: alloc-small's 3 experts and regions of 8 rows, 2 lanes (2 takes a
#: cycle), 4 pages of 2- or 4-row tiles (the pool runs dry within the cover's depth)
PAGE_GATE = dict(lanes=2, pool_pages=4)
MCAST_COUNTS = dict(MCAST, lanes=2, max_rows_per_expert=16, count_packets=True, sources=2)


def _sets() -> list[PropertySet]:
    from .tracker import SCRIPT as TRACKER_SCRIPT
    from .reduce import property_sets as reduce_sets
    from .reduce_path import property_set as reduce_path_set
    from .egress import property_set as egress_set
    from .ingress import property_set as ingress_set
    from .join import property_set as join_set
    from .partial import property_set as partial_set
    from .relay import property_set as relay_set
    from .stage import property_sets as stage_sets
    return [
        PropertySet("allocator", "allocator", "tiny", _alloc("tiny"),
                    {"prove": 3, "bmc": 10, "cover": 8},
                    note="k-induction closes at k=2 (rows + room == latched capacity)"),
        PropertySet("allocator-small", "allocator", "tiny/alloc-small", _alloc("tiny/alloc-small"),
                    {"prove": 3, "cover": 8}, smoke={"prove": 3, "cover": 8},
                    note="regions of 8 rows: a region fills within the cover depth"),
        PropertySet("allocator-paged", "allocator", "tiny/alloc-small, 8 pages", _alloc("tiny/alloc-small", pool_pages=8),
                    {"prove": 3, "cover": 8}, smoke={"bmc": 5},
                    note="protocol v2: the page gate's refusals (counters set a cycle later to the grants "
                         "that stood) and the registered tile starts, every tile size"),
        PropertySet("queue-small", "event/credit queue", "4 slots x 8 entries, 2-bit data",
                    _queue("any", slots=4, depth=8, bits=2), {"prove": 1, "bmc": 12, "cover": 12},
                    smoke={"prove": 1, "cover": 12},
                    note="k-induction closes at k=1 with the invariants (queue.py: level, rp1 = rp + 1, "
                         "write pointer = rp + level, head = store[rp], the chosen entry's slot holds its "
                         "data); the cover fills (2 cycles), wraps and drains (8) the chosen entry"),
        PropertySet("event-queue", "event queue", "tiny (4 slots x 32)", _queue("event", "tiny"),
                    {"prove": 1, "bmc": 10, "cover": 16},
                    note="unbounded on the full tiny config: k-induction closes at k=1 with the queue's "
                         "invariants; the cover fills (8 cycles) and pops while full"),
        PropertySet("credit-queue", "credit queue", "tiny (4 slots x 32)", _queue("credit", "tiny"),
                    {"prove": 1, "bmc": 10, "cover": 16}, note="as the event queue"),
        PropertySet("tracker", "tracker", "tiny/trk-small", _tracker("tiny/trk-small"),
                    {"prove": 3, "cover": 26}, smoke={"bmc": 8}, script=TRACKER_SCRIPT,
                    note="k-induction closes at k=3 with the invariants of tracker.py (the counter memory's "
                         "words as flops named by the harness); the cover: reset, START, clearing (8 "
                         "counters), a tile's events, flag, sweep"),
        PropertySet("tracker-3", "tracker", "tiny/trk-small, 3 experts", _tracker("tiny/trk-small", experts=3),
                    {"prove": 3},
                    note="as tracker with tiny's 3 experts: 12 counters (not a power of two: the clearing "
                         "sweep ends at 11, clear_addr left at 12), an expert code (3) out of range"),
        PropertySet("tracker-mid", "tracker", "tiny/trk-mid (tiny, regions of 32 rows)", _tracker("tiny/trk-mid"),
                    {"prove": 3},
                    note="the largest config the tracker's k-induction closes on (570 s at load ~12): tiny's 3 "
                         "experts, all its tile sizes (2-16 rows) and 32-bit addresses (the output address "
                         "added in 4 chunks), regions of 32 rows (48 counters) instead of 256 (384)"),
        PropertySet("mcast-allocator", "multicast allocator", "tiny/alloc-small, max_targets 3",
                    _mcast_alloc("tiny/alloc-small", **MCAST), {"prove": 3, "cover": 8},
                    smoke={"cover": 8},
                    note="protocol v2: k-induction closes at k=3 (rows + room == latched capacity, room > a "
                         "registered, lagged counts one-hot; the same for the arena); regions of 8 rows fill within "
                         "the cover depth"),
        PropertySet("mcast-allocator-admitted", "multicast allocator (the hub's)",
                    "tiny/alloc-small, max_targets 3, regions of 32 rows",
                    _mcast_admitted("tiny/alloc-small", max_rows_per_expert=32, **MCAST),
                    {"bmc": 10, "prove": 3, "cover": 8}, smoke={"bmc": 5},
                    note="protocol v2: the exact allocator's properties under the input admission "
                         "(tight = room below 5 x lanes = 20 rows, so regions of 21-32 rows turn tight "
                         "within the depth); k-induction closes at k=2 with the room floors while tight "
                         "was clear d cycles ago"),
        PropertySet("mcast-allocator-paged", "multicast allocator (the hub's), paged arena",
                    "tiny/alloc-small, max_targets 3, 2 lanes, 8 pages of 2/4 rows",
                    _mcast_v2("paged", "tiny/alloc-small", **MCAST_PAGED), {"prove": 3, "bmc": 14, "cover": 14},
                    smoke={"bmc": 6},
                    note="protocol v2: the admitted allocator's properties with the arena in pages (a row "
                         "starting a tile with no page free refused, its place in its tile's page, a page "
                         "in use never handed out, returns' verdicts, POOL_FREE); 2 lanes (4 cost ~3x a "
                         "step: BMC 11 took 9 min loaded); the pool runs dry at step 13, a returned page is "
                         "handed out again at 10; k-induction closes at k=3 (324 s at load 7) with the page "
                         "supply's invariants (page_supply.supply_invariants), the arena's registers against "
                         "the model's stream, the arena counter within the regions' rows and the admission's "
                         "page floor (multicast_v2.PagedArenaRef._arena_invariants)"),
        PropertySet("mcast-allocator-counts", "multicast allocator (the hub's), count packets",
                    "tiny/alloc-small, max_targets 3, 2 lanes, 2 sources, regions of 16 rows",
                    _mcast_v2("counts", "tiny/alloc-small", **MCAST_COUNTS), {"bmc": 11, "prove": 3, "cover": 12},
                    smoke={"bmc": 6},
                    note="protocol v2: the admitted allocator's properties with count packets (met and over "
                         "exactly the model's, a refused row takes nothing); met from step 4, over 6, every "
                         "lane granted after an expert's counts are in 11; k-induction closes at k=3 with "
                         "the count limit's registers against the model's totals and rows, and lam's floors "
                         "while tight was clear d cycles ago"),
        PropertySet("page-gate", "page gate (unicast)", "tiny/alloc-small, 2 lanes, 4 pages of 2/4 rows",
                    _page_gate("tiny/alloc-small", **PAGE_GATE), {"prove": 3, "cover": 12}, smoke={"bmc": 5},
                    note="protocol v2, paged regions: the page gate and the allocator as the hub wires them; "
                         "grant exactly the model's (room, a page for a tile start, not held after a refusal), "
                         "a row on its tile's page, a page in use never handed out, POOL_FREE; k-induction "
                         "closes at k=3 with the page supply's invariants, the allocator's counters and the "
                         "refusal registers (page_gate.py)"),
        PropertySet("page-gate-4", "page gate (unicast)", "tiny/alloc-small, 4 lanes, 4 pages of 2/4 rows",
                    _page_gate("tiny/alloc-small", pool_pages=4), {"prove": 3},
                    note="protocol v2: as page-gate with alloc-small's 4 lanes (4 takes a cycle, an expert "
                         "starting two tiles in one cycle, three lanes behind a refusal)"),
        PropertySet("page-pool", "page pool", "tiny, 8 pages", _page_pool(8),
                    {"prove": 1, "bmc": 16, "cover": 20}, smoke={"bmc": 10, "cover": 16},
                    note="protocol v2: a page handed out at most once until returned, a returned-twice "
                         "page refused, none lost (avail exact, POOL_FREE); k-induction closes at k=1 "
                         "with the FIFO's invariants (page_pool.py: its words as flops, every page exactly "
                         "one of in use, in the FIFO once, never handed out; pointers and level); the "
                         "cover: hand out, return (3 cycles to the verdict), hand out again (~8 cycles)"),
        PropertySet("page-pool-5", "page pool", "tiny, 5 pages", _page_pool(5),
                    {"prove": 1}, smoke={"prove": 1},
                    note="protocol v2: as page-pool with a pool that is not a power of two (a 3-bit page "
                         "number 5-7 written to PAGE_FREE is out of range) and a FIFO memory of 4 words"),
        PropertySet("page-supply", "page supply (pool and ring)", "tiny, 4 pages (4 takes a cycle)",
                    _page_supply(4), {"prove": 3, "bmc": 12, "cover": 14}, smoke={"prove": 3},
                    note="protocol v2: a page handed out at most once until returned, a returned-twice "
                         "page refused, none lost (avail exact, POOL_FREE); k-induction closes at k=3 with "
                         "the ring's and the counts' invariants (page_supply.py); the BMC takes every page "
                         "at step 1, returns them and hands them out again through the ring (it wraps)"),
        PropertySet("page-supply-5", "page supply (pool and ring)", "tiny, 2 lanes, 5 pages (2 takes a cycle)",
                    _page_supply(5, lanes=2), {"prove": 3, "bmc": 12, "cover": 14},
                    note="protocol v2: as page-supply, with a pool that is not a power of two (a 3-bit "
                         "page number 5-7 written to PAGE_FREE is out of range) and a 5-register ring"),
        PropertySet("packet-manager", "packet manager", "tiny/pm-small", _pm("tiny/pm-small"),
                    {"bmc": 16, "cover": 14}, smoke={"bmc": 8},
                    note="bounded: BMC 16 = START (3), the 5 stages to B, the credit, the write (6), the "
                         "drain, every property asserted together; each is also unbounded alone "
                         "(packet-manager-queues, -dropped, -credits, -hang)"),
        *_pm_group("queues", 4, counts_k=6,
                   note="the queues never overflow, alone (no other property asserted or assumed): "
                        "k-induction closes at k=4 with the reservations' invariants (packet_manager.py: "
                        "avail + the pop counted late + level + packets after A = depth, n_acc = packets "
                        "in A, B's returned reservations)",
                   counts_note="(closes at k=6, not 4: a count packet's event from AL's lanes with no "
                               "packet takes two more steps to rule out)"),
        *_pm_group("dropped", 6,
                   note="a dropped packet never writes, alone (no other property asserted or assumed): "
                        "k-induction closes at k=6 with the layer's invariants (no end-of-stream of the "
                        "chosen source seen or pending, so finished stays low; one START: started = "
                        "armed or START pending), the chunk table's (R's entry = the table after W, "
                        "others_open) and its own (the write buffers, the chosen packet down the "
                        "pipeline and in its slot, a row opened with an expert out of range never "
                        "allocated) (packet_manager.py)",
                   counts_note="(a dropped packet includes a count packet)"),
        *_pm_group("credits", 5,
                   note="every accepted row of the chosen (source, tag) returns exactly one credit, "
                        "EVENT_LATENCY cycles after its last chunk, and none otherwise (and the lanes on "
                        "one row in R agree on open), alone: "
                        "k-induction closes at k=5 with the layer's and the chunk table's invariants "
                        "(as packet-manager-dropped; without the table's it needs k=7) and its own: "
                        "the row's chunks in A..AL among those sent, once, with its expert; its entry "
                        "(after W) open exactly while part of it is past R, holding those chunks and "
                        "its expert; credit_due one-hot, set exactly while the row is full, at A / R "
                        "only with the row's last group there (packet_manager.py)",
                   counts_note="on the lanes"),
        *_pm_group("hang", 5,
                   note="no hang (no push 6 cycles, no write 14 cycles, the input ready 12 cycles after "
                        "the input stops), alone: k-induction closes at k=5 with the layer's, the write "
                        "buffers' and the queues' invariants and its own on the quiet-cycle count (the "
                        "stages empty one by one, buffers and queues draining one a cycle after, nothing "
                        "live or queued before START, a slot filled since the input stopped at most n + 1 "
                        "groups old) (packet_manager.py)",
                   counts_note="(the admission holds lanes behind a count packet; lane 0 is always "
                               "admitted)"),
        PropertySet("packet-manager-paged", "packet manager", "tiny/pm-small, 8 pages",
                    _pm("tiny/pm-small", pool_pages=8), {"bmc": 16}, smoke={"bmc": 6},
                    note="protocol v2: the properties above with pages (a row placed in its page), "
                         "the page gate free; bounded for the same reason as packet-manager"),
        PropertySet("packet-manager-counts", "packet manager", "tiny/pm-small, count packets",
                    _pm("tiny/pm-small", count_packets=True), {"bmc": 16}, smoke={"bmc": 6},
                    note="protocol v2: the properties above with count packets on the lanes; bounded "
                         "for the same reason as packet-manager"),
        PropertySet(**relay_set()),
        PropertySet(**partial_set()),
        PropertySet(**ingress_set()),
        PropertySet(**egress_set()),
        PropertySet(**join_set()),
        *(PropertySet(**s) for s in stage_sets()),
        *(PropertySet(**s) for s in reduce_sets()),
        PropertySet(**reduce_path_set()),
    ]


SETS = {s.name: s for s in _sets()}


def jobs(names=None, mode="all", depth=None, smoke=False) -> list[tuple[PropertySet, str, int]]:
    """(set, mode, depth) of each job to run. ``names``: sets or components (all if
    empty); ``mode``: one of MODES or ``all``; ``depth`` overrides every depth; ``smoke``
    takes each set's smoke jobs (sets without any are left out)."""
    chosen = []
    for n in names or list(SETS):
        found = [s for s in SETS.values() if n in (s.name, s.component)]
        if not found:
            raise KeyError(n)
        chosen += [s for s in found if s not in chosen]
    out = []
    for s in chosen:
        table = s.smoke if smoke else s.modes
        for md, d in table.items():
            if mode in ("all", md):
                out.append((s, md, depth or d))
        if mode not in ("all", "cover", *table) and not smoke:
            # (a mode the set does not list, e.g. prove where k-induction does not close:
            # a shallow try; not a cover, whose depth is its scenario's: a set without one
            # leaves its covers to a sibling set of the component on a smaller config)
            out.append((s, mode, depth or min(max(table.values()), 8)))
    return out


def run(s: PropertySet, mode: str, depth: int, out: Path | None = None) -> JobResult:
    """Build the set's harness and run it (:func:`run_harness`)."""
    return run_harness(s.name, s.build(), mode, depth, script=s.script, out=out)


def run_harness(name: str, harness, mode: str, depth: int, script: tuple = (),
                out: Path | None = None) -> JobResult:
    """Write ``harness``'s RTLIL and run sby in ``<build>/formal/<name>-<mode>`` (or under
    ``out``); the failed properties are named by the harness's messages. ``script``: Yosys
    commands after ``prep``, unless the harness has its own (``harness.script``)."""
    if mode not in MODES:
        raise ValueError(f"mode = {mode!r}: must be one of {', '.join(MODES)}")
    il = rtlil.convert(harness, name="top", ports=[])
    # (a harness that names a memory's words makes its script as it elaborates)
    script = getattr(harness, "script", None) or script
    workdir = (out or output_dir("formal")) / f"{name}-{mode}"
    result = run_job(name, il, mode, depth, workdir, script=script)
    result.failed = list(dict.fromkeys(_describe(f, harness.messages) for f in result.failed))
    return result


def _describe(line: str, messages: dict) -> str:
    """A failed property's sby line with the harness's message for its source line."""
    for key, texts in messages.items():
        if key in line:
            return f"{key}: {' / '.join(texts)}"
    return line
