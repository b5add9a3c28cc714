"""Formal proofs (moehub.verif.formal, ``moehub formal``) with SymbiYosys from PyPI.

Fast: the smoke jobs (every set's shallow proofs and covers; a few, SLOW_SMOKE, in the slow
set and the kill suite), proofs that fail on a
deliberately broken allocator, queue, page pool and packet manager's chunk table, so the
properties are not vacuous, and the command's exit codes. Slow: every set's full jobs,
and broken tracker, packet manager (the full BMC, its queue, dropped-packet, credit and
no-hang proofs), page pool (each plant; its induction without the invariants), admitted
multicast allocator, paged arena (a page handed out twice; its fit) and multicast count
limit (4 s each: the fast set's multicast units plant their own bugs,
tests/test_rtl_multicast_units.py), and the paged arena with pages handed back. Skipped when yowasp-sby or the solver is missing.
"""
from __future__ import annotations

import importlib
import sys
import types

import pytest

from conftest import assert_fails_on, formal_file

from moehub.verif.formal import sby
from moehub.verif.formal.sets import SETS, jobs, run, run_harness

pytestmark = formal_file()


def _id(job):
    s, mode, depth = job
    return f"{s.name}-{mode}-{depth}"


def _check(result):
    assert result.status == "PASS", (f"{result.name} {result.mode} {result.depth}: {result.status} "
                                     f"{result.failed} (log {result.log})")


#: the smoke jobs in the slow set and the mutation kill suite only: a harness's feature
#: variants (the same harness on a hub with paging, count packets or admission), whose base
#: set stays in the fast set, each job's cost mostly its Yosys preparation (3-5 s), not
#: its depth; the reduce path's (9 s: its invariants' logic), whose file runs a cheaper
#: fast check of the same harness (tests/test_reduce_path_formal.py: the pairing's
#: induction at k = 1); the relay egress's k-induction (12 s), whose unit's simulation
#: bench plants its bugs in the fast set (tests/test_rtl_relay_egress.py); and the relay
#: stages' covers (5 s each), whose harnesses the fast set runs with planted bugs
#: (tests/test_stage_formal.py)
SLOW_SMOKE = ("packet-manager-paged", "packet-manager-counts", "allocator-paged", "mcast-allocator-admitted",
              "mcast-allocator-paged", "mcast-allocator-counts", "page-pool-5", "relay-reduce-path",
              "relay-egress", "relay-stage", "relay-partial-stage")


def _smoke_param(job):
    slow = job[0].name in SLOW_SMOKE
    return pytest.param(job, id=_id(job), marks=[pytest.mark.slow, pytest.mark.mutation] if slow else [])


def test_slow_smoke_names_are_sets():
    assert set(SLOW_SMOKE) <= {s for s in SETS}, set(SLOW_SMOKE) - set(SETS)


@pytest.mark.parametrize("job", [_smoke_param(j) for j in jobs(smoke=True)])
def test_smoke(job):
    """Each component's shallow proof or cover passes (covers: reached): the fast set
    runs every set's but :data:`SLOW_SMOKE`'s."""
    _check(run(*job))


@pytest.mark.slow
@pytest.mark.parametrize("job", jobs(), ids=_id)
def test_full(job):
    """The slow set: every job of every property set passes at its full depth."""
    _check(run(*job))


def mutant(module_name: str, old: str, new: str, cls: str):
    """Class ``cls`` of a copy of ``module_name`` whose source has ``old`` replaced by
    ``new`` (exactly once): a deliberately broken component."""
    mod = importlib.import_module(module_name)
    src = open(mod.__file__).read()
    assert src.count(old) == 1, f"{old!r} not found once in {mod.__file__}"
    copy = types.ModuleType(f"{module_name}_mutant")
    copy.__package__ = mod.__package__
    copy.__file__ = mod.__file__
    exec(compile(src.replace(old, new), mod.__file__, "exec"), copy.__dict__)
    return getattr(copy, cls)


def _fails(result, *texts):
    """The run failed, with a trace, on a property whose message holds one of ``texts``."""
    assert_fails_on(result, texts)


def test_broken_allocator_fails():
    """Off by one in the capacity check: a row is granted at the capacity."""
    from moehub.verif.formal.allocator import AllocatorHarness
    from moehub.verif.formal.common import formal_config
    broken = mutant("moehub.rtl.allocator", "room_ge[e][a + 1]", "room_ge[e][a]", "AddressAllocator")
    r = run_harness("broken-allocator", AllocatorHarness(formal_config("tiny/alloc-small"), broken), "bmc", 6)
    _fails(r, "capacity")


def test_broken_paged_allocator_fails():
    """(paged) After a page refusal the tile starts are taken one row off the grants that
    stood."""
    from moehub.verif.formal.allocator import AllocatorHarness
    from moehub.verif.formal.common import formal_config
    broken = mutant("moehub.rtl.allocator", "masked_equal(rows_r, -(a + b), tm1)",
                    "masked_equal(rows_r, -(a + b + 1), tm1)", "AddressAllocator")
    cfg = formal_config("tiny/alloc-small").replace(pool_pages=8)
    r = run_harness("broken-paged-allocator", AllocatorHarness(cfg, broken), "bmc", 6)
    _fails(r, "tile start")


@pytest.mark.slow
def test_broken_admitted_allocator_fails():
    """(multicast, the hub's allocator) The admission's threshold one group short (room
    below 4 x lanes rows is tight, not 5 x): the room the admission counts on is not there
    -- the harness's room floor fails, or a lane taken roomy finds a region full and is
    granted anyway (a 12-step BMC, ~20 s: slow set)."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.multicast_allocator import AdmittedAllocatorHarness
    from moehub.verif.formal.sets import MCAST
    broken = mutant("moehub.rtl.multicast_allocator", "k = ADMISSION_GROUPS * self.cfg.lanes",
                    "k = (ADMISSION_GROUPS - 1) * self.cfg.lanes", "MulticastAllocatorAdmitted")
    cfg = formal_config("tiny/alloc-small").replace(max_rows_per_expert=32, **MCAST)
    r = run_harness("broken-admitted-allocator", AdmittedAllocatorHarness(cfg, broken), "bmc", 12)
    _fails(r, "grant is not exactly", "room below")


def _mcast_v2(kind):
    """The hub's multicast allocator's harness with a v2 feature, on its set's config."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.multicast_v2 import CountsAllocatorHarness, PagedAllocatorHarness
    from moehub.verif.formal.sets import MCAST_COUNTS, MCAST_PAGED
    if kind == "paged":
        return PagedAllocatorHarness(formal_config("tiny/alloc-small").replace(**MCAST_PAGED))
    return CountsAllocatorHarness(formal_config("tiny/alloc-small").replace(**MCAST_COUNTS))


@pytest.mark.slow
def test_broken_paged_arena_fails(monkeypatch):
    """(multicast, paged) A row that starts a tile stays on the current page instead of
    taking the pool's next: that page, in use, is handed out again (step 6)."""
    import moehub.rtl.multicast_allocator as mcast
    broken = mutant("moehub.rtl.paging.arena", "page = [Mux(new[a], pool.page[0], cur) for a in range(L)]",
                    "page = [cur for a in range(L)]", "PagedArena")
    monkeypatch.setattr(mcast, "PagedArena", broken)
    _fails(run_harness("broken-paged-arena", _mcast_v2("paged"), "bmc", 7), "in use handed out again")


@pytest.mark.slow
def test_broken_paged_arena_fit_fails(monkeypatch):
    """(multicast, paged) The risky row's fit reads POOL_FREE (a cycle late: the last take
    still counted) instead of the pool's exact ``avail``: once the pool runs dry (step 13)
    a row that starts a tile is granted with no page left (a 14-step BMC, ~1 min: slow
    set)."""
    import moehub.rtl.multicast_allocator as mcast
    broken = mutant("moehub.rtl.paging.arena", "self.fits.eq(~new[0] | pool.avail[0])",
                    "self.fits.eq(~new[0] | (pool.free != 0))", "PagedArena")
    monkeypatch.setattr(mcast, "PagedArena", broken)
    _fails(run_harness("broken-paged-arena-fit", _mcast_v2("paged"), "bmc", 14), "grant is not exactly")


@pytest.mark.slow
def test_paged_arena_outruns_pool_rows_with_pages_handed_back():
    """(multicast, paged) Two pages of 2-row tiles, pages handed back during the layer: the
    arena passes its ``pool_rows`` (4) rows and the model still places rows while a page is
    free. The allocator's arena counter once kept ``pool_rows`` as its capacity and refused
    the fifth row, a page free (step 10); its capacity is the most rows a layer can place
    (``arena_rows_max``), never reached before a region is full. (An 11-step BMC, 9 s:
    slow set.)"""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.multicast_v2 import PagedAllocatorHarness
    from moehub.verif.formal.sets import MCAST_PAGED
    cfg = formal_config("tiny/alloc-small").replace(**dict(MCAST_PAGED, pool_pages=2, max_tile_rows=2))
    assert cfg.pool_rows == 4
    r = run_harness("paged-arena-pages-back", PagedAllocatorHarness(cfg), "bmc", 11)
    assert r.status == "PASS", r.failed


@pytest.mark.slow
def test_broken_multicast_count_limit_fails(monkeypatch):
    """(multicast, count packets) An expert counts as met only past its total (``lam < 0``
    for ``<= 0``): the count limit's ``dead`` register is off the model's (the invariant
    k-induction uses), or, behind it, a row is granted when the expert has every count in
    and as many rows."""
    import moehub.rtl.multicast_allocator as mcast
    broken = mutant("moehub.rtl.counts.multicast_limit", "self.below(q + s + 1)", "self.below(q + s)",
                    "MulticastCountLimit")
    monkeypatch.setattr(mcast, "MulticastCountLimit", broken)
    _fails(run_harness("broken-mcast-counts", _mcast_v2("counts"), "bmc", 6), "met is not exactly",
           "dead is not done")


def test_broken_queue_fails():
    """After a pop from a queue of one entry the head takes a stale entry."""
    from amaranth.lib import data
    from moehub.verif.formal.queue import QueueHarness
    broken = mutant("moehub.rtl.event_queue", "Mux(level >= 2,", "Mux(level >= 1,", "EventQueue")
    r = run_harness("broken-queue", QueueHarness(data.StructLayout({"v": 2}), 4, 8, broken), "bmc", 8)
    _fails(r, "chosen entry")



def test_queue_whose_halves_read_copies_keeps_its_properties(tmp_path):
    """A multicast hub's event queue: the takes of each half of the entries read a copy of
    the push's valid and rank bits of their own (the producer's copies hold its registers'
    values). Every property holds unbounded (k-induction, k = 1, with the invariants), on
    the reduced queue of ``queue-small``."""
    from amaranth.lib import data
    from moehub.verif.formal.queue import QueueHarness
    h = QueueHarness(data.StructLayout({"v": 2}), 4, 8, take_copies=2)
    assert run_harness("queue-small-halves", h, "prove", 1, out=tmp_path).status == "PASS"

TRACKER_PLANTS = [("flag-one-early", 16, False), ("clear-skips-first", 15, False), ("no-forwarding", 18, True)]


@pytest.mark.slow
@pytest.mark.parametrize("plant,depth,invariants", TRACKER_PLANTS, ids=[x[0] for x in TRACKER_PLANTS])
def test_broken_tracker_fails(plant, depth, invariants):
    """Each planted tracker bug fails a BMC from reset on the property named in
    ``tracker.PLANTS``: a tile flagged one completion early (step 15) and a counter the
    clearing sweep skips (step 14) on the properties alone; the missing forwarding on the
    counter's invariant (step 16: a tile's second completion in a row read its count
    without the first; the flag it then misses is checked only at the sweep, deeper)."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.tracker import PLANTS, TrackerHarness
    h = TrackerHarness(formal_config("tiny/trk-small"), invariants=invariants, plant=plant)
    _fails(run_harness(f"broken-tracker-{plant}", h, "bmc", depth), *PLANTS[plant].fails)


POOL_PLANTS = [("double-return-accepted", 6), ("take-keeps-fifo-head", 8), ("last-fresh-page-lost", 9),
               ("free-misses-fifo", 7)]


def _pool(plant=None, pages=8, invariants=False):
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.page_pool import PagePoolHarness
    return PagePoolHarness(formal_config("tiny").replace(pool_pages=pages), invariants=invariants, plant=plant)


def test_page_pool_plant_fails():
    """(page pool, 8 pages) A take from the FIFO that leaves the page at its head: the
    page, in use, is handed out again (step 7) -- the properties alone, from reset."""
    from moehub.verif.formal.page_pool import PLANTS
    r = run_harness("pool-take-keeps-fifo-head", _pool("take-keeps-fifo-head"), "bmc", 8)
    _fails(r, *PLANTS["take-keeps-fifo-head"].fails)


@pytest.mark.slow
@pytest.mark.parametrize("plant,depth", POOL_PLANTS, ids=[x[0] for x in POOL_PLANTS])
def test_page_pool_plants_fail(plant, depth):
    """(page pool, 8 pages) Each planted bug fails a BMC from reset on the property named
    in ``page_pool.PLANTS`` (the steps measured: 5, 7, 8, 6): a second return accepted,
    a page handed out twice, the last fresh page never offered (none lost), POOL_FREE
    without the FIFO."""
    from moehub.verif.formal.page_pool import PLANTS
    _fails(run_harness(f"pool-{plant}", _pool(plant), "bmc", depth), *PLANTS[plant].fails)


@pytest.mark.slow
def test_page_pool_induction_needs_invariants():
    """(page pool, 4 pages) k-induction at k=1: proven with the invariants; without them
    not (UNKNOWN: a state no run reaches breaks ``avail``); with the double return planted
    not either (the invariant that a good return in W is of a page in use fails)."""
    assert run_harness("pool-4-prove", _pool(pages=4, invariants=True), "prove", 1).status == "PASS"
    r = run_harness("pool-4-prove-bare", _pool(pages=4), "prove", 1)
    assert r.status == "UNKNOWN", r.status
    r = run_harness("pool-4-prove-planted", _pool("double-return-accepted", pages=4, invariants=True), "prove", 1)
    assert r.status in ("FAIL", "UNKNOWN") and any("W of a page not in use" in f for f in r.failed), r.failed


def test_page_pool_refuses_sizes():
    """The harness names the key and value it cannot take."""
    with pytest.raises(ValueError, match="pool_pages = 1"):
        _pool(pages=1)


def test_memory_words_are_the_memory():
    """``common.memory_words``: the harness's signals are the memory's words. A memory
    written at one address a cycle: each word equals a harness register tracking the
    writes to it (BMC 6 passes); the same harness with the connections left out (the words
    free inputs) fails -- so a passing proof read the real words."""
    from amaranth import Array, Elaboratable, Module, ResetSignal, Signal
    from amaranth.lib.memory import Memory
    from moehub.verif.formal.common import Props, any_seq, memory_words, reset_first

    class Probe(Elaboratable):
        def __init__(self, connect=True):
            self.connect, self.messages, self.script = connect, {}, ()

        def elaborate(self, platform):
            m = Module()
            p = Props(m)
            self.messages = p.messages
            reset_first(m)
            m.submodules.dut = mem = Memory(shape=3, depth=4, init=[1, 2, 3, 4])
            wp = mem.write_port()
            addr, data, en = any_seq(m, 2, "w_addr"), any_seq(m, 3, "w_data"), any_seq(m, 1, "w_en")
            rp = mem.read_port(domain="comb")         # (a memory nobody reads is removed)
            m.d.comb += [wp.addr.eq(addr), wp.data.eq(data), wp.en.eq(en), rp.addr.eq(any_seq(m, 2, "r_addr"))]
            p.assume(~(en & ResetSignal()))           # (a reset resets the shadows, not the memory)
            words, connect = memory_words(m, "dut", 4, 3, "word")
            p.check(rp.data == Array(words)[rp.addr], "the read port's word is not a word")
            self.script = ("memory_map", "opt_clean") + (connect if self.connect else ())
            for i in range(4):
                shadow = Signal(3, init=i + 1, name=f"shadow{i}")
                with m.If(en & (addr == i)):
                    m.d.sync += shadow.eq(data)
                p.check(words[i] == shadow, f"word {i} is not its writes")
            return m

    assert run_harness("memory-words", Probe(), "bmc", 6).status == "PASS"
    _fails(run_harness("memory-words-free", Probe(connect=False), "bmc", 6), "is not its writes")


@pytest.mark.slow
def test_broken_packet_manager_fails():
    """A chunk of a dropped row (bad expert, overflow) is written."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PacketManagerHarness
    broken = mutant("moehub.rtl.packet_manager", "b.valid.eq(al.setb & info.alloc)", "b.valid.eq(al.setb)",
                    "PacketManager")
    r = run_harness("broken-pm", PacketManagerHarness(formal_config("tiny/pm-small"), broken), "bmc", 12)
    _fails(r, "dropped packet writes")


@pytest.mark.slow
def test_packet_manager_queues_plant_fails():
    """(packet manager, the queues alone) The event reservations counting half of an
    accepted group's packets: the reservations' invariant fails in the base case of the
    k-induction (a reachable state, step 3), so the proof of "the queues never overflow"
    rests on the real accounting. (The overflow itself needs the 16-entry queue filled: a
    BMC of 16 from reset does not reach it.)"""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PLANTS, PacketManagerHarness
    h = PacketManagerHarness(formal_config("tiny/pm-small"), only="queues", plant="events-half-reserved")
    _fails(run_harness("pm-queues-planted", h, "prove", 4), *PLANTS["events-half-reserved"].fails)


@pytest.mark.slow
def test_packet_manager_dropped_plant_fails():
    """(packet manager, the dropped-packet group, proven alone by k-induction at k=6:
    packet-manager-dropped) B writing a chunk of a row that has no allocation (an expert
    out of range, refused for room): the proof fails -- its base case taken 10 deep
    reaches the chosen packet, dropped, in B as a write (step 9; it leaves the buffer a
    cycle later). (At k=6 itself the base case is too short for any write and the
    induction does not close on the same invariant.) (10 s: slow set, as its siblings.)"""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PLANTS, PacketManagerHarness
    h = PacketManagerHarness(formal_config("tiny/pm-small"), only="dropped", plant="dropped-row-written")
    _fails(run_harness("pm-dropped-planted", h, "prove", 10), *PLANTS["dropped-row-written"].fails)


@pytest.mark.slow
def test_packet_manager_credits_plant_fails():
    """(packet manager, the credit property, proven alone by k-induction at k=5:
    packet-manager-credits) RI gating the credit with the row-info grant, as it gates the
    write: a row of the chosen (source, tag) opened dropped (expert out of range, refused
    for room) returns no credit, and the proof fails -- its base case taken 10 deep reaches
    the missing credit (step 9)."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PLANTS, PacketManagerHarness
    h = PacketManagerHarness(formal_config("tiny/pm-small"), only="credits", plant="dropped-row-no-credit")
    _fails(run_harness("pm-credits-planted", h, "prove", 10), *PLANTS["dropped-row-no-credit"].fails)


@pytest.mark.slow
def test_packet_manager_hang_plant_fails():
    """(packet manager, no hang, proven alone by k-induction at k=5: packet-manager-hang)
    A void slot leaving its write buffer without returning its reservation (every dropped
    packet leaks a slot until the input is never let in again): the proof fails -- its
    base case taken 10 deep reaches the reservations' count off the buffer's slots (step
    8); the hang itself, the input not ready 12 cycles after it stopped, is at step 14."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PLANTS, PacketManagerHarness
    h = PacketManagerHarness(formal_config("tiny/pm-small"), only="hang", plant="void-slot-kept")
    _fails(run_harness("pm-hang-planted", h, "prove", 10), *PLANTS["void-slot-kept"].fails)


def test_packet_manager_harness_refuses():
    """An unknown property group or plant is named with its key and value."""
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PacketManagerHarness
    cfg = formal_config("tiny/pm-small")
    with pytest.raises(ValueError, match="only = 'nonesuch'"):
        PacketManagerHarness(cfg, only="nonesuch")
    with pytest.raises(ValueError, match="plant = 'nonesuch'"):
        PacketManagerHarness(cfg, plant="nonesuch")


def test_chunk_table_open_split_fails(monkeypatch):
    """A chunk table whose lane 1 misses the write-back of the group two ahead: two lanes
    on one row read entries that disagree on ``open`` (the invariant T's row-full relies
    on since T forms each lane's row-full for an open and a closed row and chooses by the
    lane's own entry)."""
    import moehub.rtl.packet_manager as pm_mod
    from moehub.verif.formal.common import formal_config
    from moehub.verif.formal.packet_manager import PacketManagerHarness
    broken = mutant("moehub.rtl.chunk_table",
                    "[(self.hit2[j][k] & self.w_wen[k], self.w_after[k]) for k in range(L)]",
                    "[(self.hit2[j][k] & self.w_wen[k] & (j != 1), self.w_after[k]) for k in range(L)]",
                    "ChunkTable")
    monkeypatch.setattr(pm_mod, "ChunkTable", broken)
    r = run_harness("broken-open-split", PacketManagerHarness(formal_config("tiny/pm-small")), "bmc", 10)
    _fails(r, "disagree on open")


def test_cli(capsys):
    """The command: a table and exit 0; unknown set 2; bad depth 2; missing tools 3."""
    from moehub.scripts.cli import main
    assert main(["formal", "allocator-small", "--mode", "prove"]) == 0
    out = capsys.readouterr().out
    assert "allocator-small" in out and "PASS" in out and "1 passed, 0 failed" in out
    assert main(["formal", "nonesuch"]) == 2
    assert main(["formal", "--depth", "0"]) == 2


def test_cli_tools_missing(monkeypatch, capsys):
    from moehub.scripts.cli import main

    def missing(engine="yices"):
        raise sby.ToolMissing("yowasp-sby not found")
    monkeypatch.setattr(sby, "check_tools", missing)
    assert main(["formal", "allocator-small"]) == 3
    assert "yowasp-sby not found" in capsys.readouterr().err


def test_cli_failure_exit(monkeypatch, capsys):
    """A failed proof: exit 1, the failed property and the trace path printed."""
    from moehub.scripts.cli import main
    from moehub.verif.formal import allocator, common
    broken = mutant("moehub.rtl.allocator", "room_ge[e][a + 1]", "room_ge[e][a]", "AddressAllocator")
    monkeypatch.setattr(allocator, "AddressAllocator", broken)
    monkeypatch.setattr(allocator.AllocatorHarness.__init__, "__defaults__", (broken,))
    assert main(["formal", "allocator-small", "--mode", "bmc", "--depth", "6"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "counterexample" in out and ".vcd" in out and "capacity" in out


@pytest.mark.slow
def test_broken_queue_not_proven():
    """k-induction is not vacuous either: the queue with a stale head after a pop is not
    proven (the induction step fails on the head invariant; its BMC fails at step 3)."""
    from amaranth.lib import data
    from moehub.verif.formal.queue import QueueHarness
    broken = mutant("moehub.rtl.event_queue", "Mux(level >= 2,", "Mux(level >= 1,", "EventQueue")
    r = run_harness("broken-queue-prove", QueueHarness(data.StructLayout({"v": 2}), 4, 8, broken), "prove", 1)
    assert r.status in ("FAIL", "UNKNOWN"), r.status
    assert any("head" in f or "chosen entry" in f for f in r.failed), r.failed
