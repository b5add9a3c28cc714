"""Pure-Python reference model of the MoE-Hub receive hub.

This is both the scoreboard of every RTL test and the hub of the fast co-simulation, so
its core is cycle-free: packets are applied one at a time, in the order the hub accepted
them (accept cycle, then lane index), and every effect is returned and recorded:

* ``writes[lane]``  data writes (addr, data), in order, on the lane the chunk arrived on;
* ``ctl``           the ordered control writes (metadata, tile flags, final counts, done);
* ``credits``       (src, tag) returned to sources when a row is complete;
* ``drops``         (reason, packet) for every dropped packet or row;
* the CSR-visible status (rows per expert, drop counters, errors, ...).

The one place cycles matter is the *same-cycle rules*, because the hardware updates its
table and counters at the end of a cycle: (1) a packet accepted in the same cycle as, and
after, the packet that completed its row finds the row closed and is a duplicate; (2) a
layer that finishes (last EOS in, no row in flight) ends at the end of that cycle, so
later packets of the same cycle still belong to it; (3) an end-of-stream takes effect at
the end of its cycle: rows opened in the same cycle still count toward the source (an
EOS count below the source's rows at that point is an EOS_MISMATCH). Passing ``cycle`` to
:meth:`HubModel.packet` applies these rules (call :meth:`HubModel.end` after the last
packet); without ``cycle`` the model is fully sequential.

Nothing here imports cocotb or Amaranth.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .config import HubConfig
from .csr_map import (CSR_DATA_BITS, CTRL_CLEAR_ERRORS, CTRL_FLUSH, CTRL_START,
                      STATUS_ARMED, STATUS_DONE, STATUS_ERROR, CsrMap)
from .formats import (CtlKind, PacketKind, Reason, HubFormats, data_addr, meta_addr,
                           flag_addr, count_addr)

FREE, ALLOC, DROP = 0, 1, 2


@dataclass(frozen=True)
class Packet:
    """One packet on a hub input lane. ``count`` is meaningful for EOS only."""
    kind: int = PacketKind.DATA
    src: int = 0
    tag: int = 0
    expert: int = 0
    token: int = 0
    slot: int = 0
    chunk: int = 0
    count: int = 0
    data: int = 0
    #: protocol v2 multicast (``max_targets > 1``): the experts of this GPU the row goes
    #: to, each with its top-k slot, as ``((expert, slot), ...)``; ``expert``/``slot`` unused
    targets: tuple = ()

    @classmethod
    def eos(cls, src: int, count: int) -> "Packet":
        return cls(kind=PacketKind.EOS, src=src, count=count)

    @classmethod
    def counts(cls, src: int, expert: int, count: int) -> "Packet":
        """Protocol v2 count packet: ``src`` sends ``count`` rows to ``expert`` this layer."""
        return cls(kind=PacketKind.COUNT, src=src, expert=expert, count=count)

    def fields(self) -> dict:
        f = dict(kind=int(self.kind), src=self.src, tag=self.tag, expert=self.expert,
                 token=self.token, slot=self.slot, chunk=self.chunk, count=self.count,
                 data=self.data)
        for i, (x, sl) in enumerate(self.targets):        # (the multicast format's entries)
            f.update({f"valid{i}": 1, f"expert{i}": x, f"slot{i}": sl})
        if self.kind == PacketKind.COUNT:
            f.update(valid0=1, expert0=self.expert)
        return f


@dataclass
class Entry:
    """One row-table entry (indexed by source and tag)."""
    state: int = FREE
    expert: int = 0
    row: int = 0
    bitmap: int = 0
    closed_cycle: Optional[int] = None  # the cycle its row completed (same-cycle rule)
    dests: tuple = ()                   # the ((expert, slot), ...) its first chunk named
    rows: tuple = ()                    # its row in each target expert (v2: one per target)
    loc: int = 0                        # where its data lands: region row, or place in the pool
    page: int = -1                      # (paged, unicast) the page of its tile


@dataclass(frozen=True)
class CtlWrite:
    kind: CtlKind
    addr: int
    data: int


@dataclass
class Effects:
    """What one packet (or one sweep) did."""
    write: Optional[tuple] = None           #: (addr, data) data write
    drop: Optional[Reason] = None           #: the packet was dropped (or opened a dropped row)
    ctl: list = field(default_factory=list)  #: CtlWrite in order
    credit: Optional[tuple] = None          #: (src, tag)
    opened: Optional[tuple] = None          #: (expert, row) when this packet allocated a row
    completed: Optional[tuple] = None       #: (expert, row) when this packet completed a row
    tile_ready: Optional[tuple] = None      #: (expert, tile) when a tile flag was written


class HubModel:
    """Reference behaviour of one hub. See the module docstring and docs/hub.md.

    Software sees the hub through its registers: :meth:`write` and :meth:`read` (by
    register name and array index) and :meth:`write_addr` and :meth:`read_addr` (by word
    address, as on the register bus) follow the RTL's CSR bank (:mod:`moehub.rtl.csr`) bit
    for bit:

    * a write keeps the register's low ``width`` bits, then is clamped to the register's
      :attr:`~moehub.spec.csr_map.Register.clamp` (TILE_ROWS_LOG2 to
      ``[log2(min_tile_rows), log2(max_tile_rows)]``, REGION_CAP to ``max_rows_per_expert``,
      POOL_CAP to ``pool_rows``; registers wider than a word are written a word at a time,
      low word first, without clamps); after reset each holds its ``reset`` value;
    * a write to CTRL acts on its strobe bits: CLEAR_ERRORS clears the sticky errors;
      START arms a new layer (FLUSH in the same write is then ignored, as the hub's START
      supersedes a pending flush); FLUSH alone ends the running layer. Other bits are
      ignored;
    * writes to read-only or unmapped addresses are ignored; reads of CTRL (write-only)
      and of unmapped addresses return 0;
    * read-only registers read the model's state, cut to the register's width (the RTL's
      counters wrap there). STATUS has ARMED, DONE and ERROR; CLEARING and SWEEPING are
      states of a few cycles the model has no time for, and read 0;
    * EPOCH, TILE_ROWS_LOG2, FLAG_BASE, META_BASE, COUNT_BASE and REGION_CAP take effect at
      START (see :meth:`start`): the hub latches them when the START takes effect, once its
      pipeline has drained, the model (no pipeline) at the START write, so software leaves
      them alone until STATUS shows the layer ARMED. REGION_BASE and TIMEOUT act at once
      (the model has no watchdog: a harness calls ``flush(timeout=True)`` where it fires).

    A name not in the map raises ``KeyError``, an index outside the register's array
    ``IndexError``, and a value or address the bus cannot carry ``ValueError``.

    Parameters
    ----------
    cfg : HubConfig
        The hub configuration. A configuration the RTL does not build (more than 32
        sources, see :class:`~moehub.spec.csr_map.CsrMap`) still gets a register map, with
        EOS_SEEN spanning several words.

    Attributes
    ----------
    cfg : HubConfig
    fmt : HubFormats
        Packet and output formats of the configuration.
    csr_map : CsrMap
        The register map (addresses, widths, access).
    epoch, tile_rows_log2, timeout, flag_base, meta_base, count_base : int
        Register values as written (after the clamps).
    region_base, region_cap : list of int
        Per-expert register values as written (after the clamp).
    layer_epoch, layer_tile_rows_log2, layer_flag_base, layer_meta_base, layer_count_base : int
        The values latched at the last START, which the running layer uses.
    layer_region_cap : list of int
        Per-expert capacities latched at the last START.
    armed, done : bool
        A layer is running; the last layer ended and its done word was written.
    errors : int
        Sticky error bits, one per :class:`~moehub.spec.formats.Reason`.
    rows, overflow, src_rows, src_eos, drop_counts : list of int
        The counters software reads (ROWS, OVERFLOW, SRC_ROWS, SRC_EOS, DROPS).
    inflight : int
        Rows open in the row table (INFLIGHT).
    eos_seen : list of bool
        End-of-stream received, per source (EOS_SEEN).
    writes : list of list of tuple
        Data writes ``(addr, data)`` per lane, in order.
    ctl : list of CtlWrite
        Control writes in order.
    credits : list of tuple
        ``(src, tag)`` credits in order.
    drops : list of tuple
        ``(reason, packet)`` for every dropped packet or row.
    tiles_flagged : list of tuple
        ``(expert, tile)`` of every tile flag of the layer, in order.
    """

    #: register name -> attribute holding a read-write register's value
    _RW_ATTR = {"EPOCH": "epoch", "TILE_ROWS_LOG2": "tile_rows_log2", "TIMEOUT": "timeout",
                "FLAG_BASE": "flag_base", "META_BASE": "meta_base", "COUNT_BASE": "count_base",
                "REGION_BASE": "region_base", "REGION_CAP": "region_cap",
                "POOL_BASE": "pool_base", "POOL_CAP": "pool_cap"}

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.fmt = HubFormats(cfg)
        self.csr_map = CsrMap(cfg, strict=False)
        self.reset()

    # ------------------------------------------------------------------ control
    def reset(self):
        """Hardware reset: all CSRs to defaults, no layer armed, outputs forgotten."""
        cfg = self.cfg
        for name, attr in self._RW_ATTR.items():      # the map's reset values (0 if absent)
            r = self.csr_map.registers.get(name)
            reset = r.reset if r else 0
            setattr(self, attr, [reset] * r.count if r and r.array else reset)
        self.layer_region_cap = [0] * cfg.experts
        # the page pool (paged mode) lives across layers: pages never handed out are taken
        # in order (``fresh``), returned pages first, oldest first; ``in_use`` guards returns
        self.fresh, self.returned, self.in_use = 0, [], set()
        self.errors = 0
        self.armed = False
        self.done = False
        self._cycle = None
        self._finish_pending = False
        self.layer_tile_rows_log2 = self.tile_rows_log2
        self.layer_pool_cap = 0
        self.layer_epoch, self.layer_flag_base, self.layer_meta_base, self.layer_count_base = 0, 0, 0, 0
        self._clear_layer()
        self._clear_outputs()

    def _clear_layer(self):
        cfg = self.cfg
        self.table = [Entry() for _ in range(cfg.entries)]
        self.rows = [0] * cfg.experts
        self.overflow = [0] * cfg.experts
        self.src_rows = [0] * cfg.sources       # rows opened (not post-EOS)
        self.src_eos = [0] * cfg.sources
        self.eos_seen = [False] * cfg.sources
        self._eos_pending: dict = {}              # EOS of this cycle, applied at its end
        self.drop_counts = [0] * len(Reason)
        self.tile_count: dict[tuple, int] = {}
        self.last_page: dict[tuple, int] = {}    # (expert, tile) -> its page (paged unicast)
        self.row_loc: dict[tuple, int] = {}      # (expert, row) -> its place in the pool (paged, multicast)
        self.inflight = 0
        self.tiles_flagged: list[tuple] = []
        # protocol v2: count packets (per source and expert), rows completed, experts whose
        # final count is written; the current page of each expert (or of the arena)
        S, E = cfg.sources, cfg.experts
        self.count_seen = [[False] * E for _ in range(S)]
        self.expected = [0] * E
        self.count_sources = [0] * E
        self.completed = [0] * E
        self.final = [False] * E
        self.cur_page = [-1] * (1 if cfg.multicast else E)
        self.pool_rows = 0                      # rows placed in the pool (multicast)

    def _clear_outputs(self):
        """Forget the output history (at reset; a new layer keeps it)."""
        self.writes = [[] for _ in range(self.cfg.lanes)]
        self.ctl: list[CtlWrite] = []
        self.credits: list[tuple] = []
        self.drops: list[tuple] = []

    def start(self):
        """CTRL.START: arm a new layer with the current configuration registers (a layer
        that has just finished is swept first; a running one is abandoned)."""
        self.end()
        self._clear_layer()
        # Registers that shape the layer's outputs take effect at START (the hub latches them).
        self.layer_tile_rows_log2 = self.tile_rows_log2
        self.layer_epoch = self.epoch
        self.layer_flag_base, self.layer_meta_base = self.flag_base, self.meta_base
        self.layer_count_base = self.count_base
        self.layer_region_cap = list(self.region_cap)
        self.layer_pool_cap = self.pool_cap
        self.armed = True
        self.done = False
        self._check_finished([])  # a layer nobody sends to still ends once every EOS is in

    def clear_errors(self):
        self.errors = 0

    @property
    def tile_rows(self) -> int:
        return 1 << self.layer_tile_rows_log2

    def _count(self, reason: Reason, n: int = 1):
        self.drop_counts[reason] += n
        self.errors |= 1 << reason

    # ------------------------------------------------------------------ packets
    def packet(self, pkt: Packet, lane: int = 0, cycle: Optional[int] = None) -> Effects:
        """Apply one accepted packet; returns (and records) its effects."""
        cfg = self.cfg
        fx = Effects()
        if cycle is None or cycle != self._cycle:
            self._cycle = cycle
            self.end(fx.ctl)
        self._finish_pending = cycle is not None
        if not self.armed:
            return self._drop(fx, pkt, Reason.NOT_ARMED)
        if pkt.src >= cfg.sources or (pkt.kind == PacketKind.DATA and pkt.tag >= cfg.tags_per_source):
            return self._drop(fx, pkt, Reason.BAD_SOURCE)
        if pkt.kind == PacketKind.EOS:
            self._eos(pkt)
            self._check_finished(fx.ctl)
            return fx
        if pkt.kind == PacketKind.COUNT:
            return self._count_packet(pkt, fx)
        if pkt.chunk >= cfg.chunks_per_row:
            return self._drop(fx, pkt, Reason.BAD_CHUNK)

        idx = pkt.src * cfg.tags_per_source + pkt.tag
        e = self.table[idx]
        if e.state != FREE and e.closed_cycle is not None:
            raise AssertionError("closed entry left in table")
        if e.state == FREE and cycle is not None and e.closed_cycle == cycle:
            return self._drop(fx, pkt, Reason.DUPLICATE)  # same-cycle rule
        if e.state == FREE:
            self._open(e, pkt, fx)
        elif self._experts(e.dests) != self._experts(self._dests(pkt)):
            return self._drop(fx, pkt, Reason.PROTOCOL)
        elif e.bitmap >> pkt.chunk & 1:
            return self._drop(fx, pkt, Reason.DUPLICATE)

        e.bitmap |= 1 << pkt.chunk
        if e.state == ALLOC:
            base = self.pool_base if cfg.multicast or cfg.paged else self.region_base[e.expert]
            fx.write = (data_addr(cfg, base, e.loc, pkt.chunk), pkt.data)
            self.writes[lane].append(fx.write)
        if e.bitmap == (1 << cfg.chunks_per_row) - 1:
            self._complete(idx, e, pkt, fx, cycle)
        self._check_finished(fx.ctl)
        return fx

    def absorb_middle_chunks(self, src: int, tag: int):
        """Mark every chunk of an open row but its first and last as arrived, without data
        writes: the co-simulation's fast path, which applies only a row's first and last
        packet one by one (nothing in the hub depends on the middle chunks of a clean row)."""
        e = self.table[src * self.cfg.tags_per_source + tag]
        if e.state in (ALLOC, DROP):
            e.bitmap |= ((1 << self.cfg.chunks_per_row) - 1) & ~1 & ~(1 << (self.cfg.chunks_per_row - 1))

    def _drop(self, fx: Effects, pkt: Packet, reason: Reason) -> Effects:
        self._count(reason)
        self.drops.append((reason, pkt))
        fx.drop = reason
        return fx

    def _eos(self, pkt: Packet):
        """An end-of-stream takes effect at the end of its cycle: rows opened in the same
        cycle (on any lane) still count toward the source."""
        s = pkt.src
        if self.eos_seen[s] or s in self._eos_pending:
            self._count(Reason.EOS_DUPLICATE)
            return
        self._eos_pending[s] = pkt.count
        if not self._finish_pending:      # no cycles: every packet is a cycle of its own
            self._apply_eos()

    def _apply_eos(self):
        for s, count in self._eos_pending.items():
            self.eos_seen[s] = True
            self.src_eos[s] = count
            if count < self.src_rows[s]:
                self._count(Reason.EOS_MISMATCH)
        self._eos_pending = {}

    def _dests(self, pkt: Packet) -> tuple:
        """The ((expert, slot), ...) a data packet names: its target set with multicast,
        else its one expert."""
        return tuple(pkt.targets) if self.cfg.multicast else ((pkt.expert, pkt.slot),)

    @staticmethod
    def _experts(dests: tuple) -> tuple:
        """What a row's later chunks must repeat (else PROTOCOL): its experts, in order (a
        slot is read from the first chunk only, as the metadata is written then)."""
        return tuple(x for x, _ in dests)

    def _bad_dests(self, dests: tuple) -> bool:
        """Empty, too many, an expert out of range or named twice: BAD_EXPERT."""
        xs = [x for x, _ in dests]
        return not xs or len(xs) > self.cfg.max_targets or len(set(xs)) < len(xs) \
            or any(not 0 <= x < self.cfg.experts for x in xs)

    def _open(self, e: Entry, pkt: Packet, fx: Effects):
        """The first chunk of a row: check it, then allocate its row in every target expert
        (and, multicast or paged, its place in the pool) and write each target's metadata."""
        cfg, s = self.cfg, pkt.src
        dests = self._dests(pkt)
        e.dests, e.bitmap, e.closed_cycle = dests, 0, None
        e.expert = dests[0][0] if dests else pkt.expert
        self.inflight += 1
        reason = self._open_verdict(s, dests)
        if reason != Reason.POST_EOS:
            self.src_rows[s] += 1
        if reason is not None:
            if reason == Reason.OVERFLOW:
                for x, _ in dests:
                    self.overflow[x] += 1
            e.state = DROP
            self._count(reason)
            self.drops.append((reason, pkt))
            fx.drop = reason
            return
        e.state = ALLOC
        e.rows = tuple(self.rows[x] for x, _ in dests)
        e.row = e.rows[0]
        e.loc, e.page = self._place(dests[0][0], e.row)
        for (x, slot), row in zip(dests, e.rows):
            if cfg.paged or cfg.multicast:
                self.row_loc[(x, row)] = e.loc
            self.rows[x] += 1
            fields = dict(src=s, token=pkt.token, slot=slot)
            if cfg.multicast:
                fields["loc"] = e.loc
            self._ctl(fx, CtlKind.META, meta_addr(cfg, self.layer_meta_base, x, row),
                      self.fmt.meta_word.pack(**fields))
        fx.opened = (e.expert, e.row)

    def _open_verdict(self, s: int, dests: tuple) -> Optional[Reason]:
        """Why a new row is dropped (None: it is allocated), first reason first."""
        if self._bad_dests(dests):
            return Reason.BAD_EXPERT
        if self.eos_seen[s] and self.src_rows[s] >= self.src_eos[s]:
            return Reason.POST_EOS
        if any(self._counts_met(x) for x, _ in dests):
            return Reason.COUNT_MISMATCH
        if any(self.rows[x] >= self.layer_region_cap[x] for x, _ in dests) or not self._room(dests[0][0]):
            return Reason.OVERFLOW
        return None

    def _counts_met(self, x: int) -> bool:
        """Every source's count for expert x is in and that many rows are allocated."""
        return self.count_sources[x] == self.cfg.sources and self.rows[x] >= self.expected[x]

    # ------------------------------------------------------------------ the pool
    def _stream(self, x: int) -> tuple:
        """(stream, its rows so far): the pool fills one stream per expert (paged unicast)
        or one arena for all rows (multicast)."""
        return (0, self.pool_rows) if self.cfg.multicast else (x, self.rows[x])

    def _room(self, x: int) -> bool:
        """The pool can place one more row of expert x: the static arena is below its
        capacity, or (paged) the stream's page has room or a page is free."""
        cfg = self.cfg
        if cfg.paged:
            return self._stream(x)[1] % self.tile_rows != 0 or self.pages_free() > 0
        return not cfg.multicast or self.pool_rows < self.layer_pool_cap

    def _place(self, x: int, row: int) -> tuple:
        """(loc, page) of a new row: its row in expert x's region (static unicast), or its
        place in the pool -- the next arena row (multicast), in its stream's page (paged)."""
        cfg = self.cfg
        if not (cfg.multicast or cfg.paged):
            return row, -1
        stream, n = self._stream(x)
        if cfg.multicast:
            self.pool_rows += 1
        if not cfg.paged:
            return n, -1
        T = self.tile_rows
        if n % T == 0:
            self.cur_page[stream] = self._take_page()
        page = self.cur_page[stream]
        return page * T + n % T, page

    def pages_free(self) -> int:
        return len(self.returned) + self.cfg.pool_pages - self.fresh

    def _take_page(self) -> int:
        if self.returned:
            p = self.returned.pop(0)
        else:
            p, self.fresh = self.fresh, self.fresh + 1
        self.in_use.add(p)
        return p

    def return_page(self, page: int) -> None:
        """Software hands a page back (PAGE_FREE): one not handed out is PAGE_BAD, ignored."""
        if page not in self.in_use:
            self._count(Reason.PAGE_BAD)
            return
        self.in_use.discard(page)
        self.returned.append(page)

    # ------------------------------------------------------------------ counts (v2)
    def _count_packet(self, pkt: Packet, fx: Effects) -> Effects:
        """A source's row count for one expert: once every source's is in, the expert is
        complete the moment that many rows are; more rows are COUNT_MISMATCH."""
        s, x = pkt.src, pkt.expert
        if not self.cfg.count_packets:
            return self._drop(fx, pkt, Reason.PROTOCOL)
        if not 0 <= x < self.cfg.experts:
            return self._drop(fx, pkt, Reason.BAD_EXPERT)
        if self.count_seen[s][x]:
            self._count(Reason.COUNT_DUPLICATE)
            return fx
        self.count_seen[s][x] = True
        self.expected[x] += pkt.count
        self.count_sources[x] += 1
        if self.count_sources[x] == self.cfg.sources and self.rows[x] > self.expected[x]:
            self._count(Reason.COUNT_MISMATCH)
        self._final_if_complete(fx, x)
        self._check_finished(fx.ctl)
        return fx

    def _final_if_complete(self, fx: Effects, x: int):
        """Expert x's counts are in and met, every row of it complete: its final count and
        its last partial tile's flag now, not at the end-of-layer sweep."""
        if self.final[x] or self.count_sources[x] < self.cfg.sources \
                or not self.completed[x] == self.rows[x] == self.expected[x]:
            return
        self.final[x] = True
        self._final_words(fx, x)

    def _final_words(self, fx: Effects, x: int):
        """Expert x's final count and, if its last tile is partial and complete, its flag."""
        cfg = self.cfg
        self._ctl(fx, CtlKind.COUNT, count_addr(cfg, self.layer_count_base, x), self.rows[x])
        mask = self.tile_rows - 1
        if self.rows[x] & mask:
            tile = self.rows[x] >> self.layer_tile_rows_log2
            if self.tile_count.get((x, tile), 0) == self.rows[x] & mask:
                self._flag(fx, x, tile, self.last_page.get((x, tile), -1))

    def _complete(self, idx: int, e: Entry, pkt: Packet, fx: Effects, cycle):
        fx.credit = (pkt.src, pkt.tag)
        self.credits.append(fx.credit)
        self.inflight -= 1
        if e.state == ALLOC:
            fx.completed = (e.expert, e.row)
            for (x, _), row in zip(e.dests, e.rows):
                tile = row >> self.layer_tile_rows_log2
                key = (x, tile)
                n = self.tile_count.get(key, 0) + 1
                self.last_page[key] = e.page
                if n == self.tile_rows:
                    n = 0
                    self._flag(fx, x, tile, e.page)
                self.tile_count[key] = n
                self.completed[x] += 1
                if self.cfg.count_packets:
                    self._final_if_complete(fx, x)
        self.table[idx] = Entry(closed_cycle=cycle)

    def _ctl(self, fx: Effects, kind: CtlKind, addr: int, data: int):
        w = CtlWrite(kind, addr, data)
        fx.ctl.append(w)
        self.ctl.append(w)

    def _flag(self, fx: Effects, expert: int, tile: int, page: int = -1):
        """A tile's flag: the epoch, and (paged unicast) the page holding the tile."""
        fields = {"epoch": self.layer_epoch}
        if "page" in self.fmt.flag_word.widths:
            fields = {"epoch": self.layer_epoch & 0xFFFF, "page": max(page, 0)}
        self._ctl(fx, CtlKind.FLAG, flag_addr(self.cfg, self.layer_flag_base, expert, tile),
                  self.fmt.flag_word.pack(**fields))
        self.tiles_flagged.append((expert, tile))
        fx.tile_ready = (expert, tile)

    # ------------------------------------------------------------------ end of layer
    def finished(self) -> bool:
        """Every source's end-of-stream is in and its count reached, and no row is in
        flight (a row opened past a source's count, dropped, still holds the layer open
        until it completes -- or until the watchdog flushes it)."""
        return self.inflight == 0 and all(self.eos_seen[s] and self.src_rows[s] >= self.src_eos[s]
                                          for s in range(self.cfg.sources))

    def _check_finished(self, ctl_out: list):
        if self._finish_pending:
            return   # cycle mode: checked at the end of the cycle (see end())
        if self.armed and self.finished():
            self._sweep(ctl_out)

    def end(self, ctl_out: Optional[list] = None) -> list:
        """End of the current cycle (cycle mode): a layer that finished now sweeps."""
        out = [] if ctl_out is None else ctl_out
        self._apply_eos()
        self._finish_pending = False
        self._check_finished(out)
        return out

    def flush(self, timeout: bool = False) -> list:
        """CTRL.FLUSH or the watchdog: drop rows in flight as INCOMPLETE and end the layer."""
        out = self.end()
        if not self.armed:
            return out
        if timeout:
            self._count(Reason.TIMEOUT)
        if self.inflight:
            self._count(Reason.INCOMPLETE, self.inflight)
        self.table = [Entry() for _ in range(self.cfg.entries)]
        self.inflight = 0
        self._sweep(out)
        return out

    def _sweep(self, out: list):
        """End of layer: final counts, the last partial tile of each expert, the done word."""
        cfg = self.cfg
        fx = Effects()
        for x in range(cfg.experts):
            if self.final[x]:
                continue                    # (written the moment its counts were met)
            if self.count_sources[x] == cfg.sources and self.rows[x] < self.expected[x]:
                self._count(Reason.COUNT_MISMATCH)      # rows announced that never came
            self._final_words(fx, x)
        self._ctl(fx, CtlKind.DONE, count_addr(cfg, self.layer_count_base, cfg.experts),
                  self.layer_epoch)
        out.extend(fx.ctl)
        self.armed = False
        self.done = True

    # ------------------------------------------------------------------ registers (CSR view)
    def write(self, name: str, value: int, index: int = 0) -> None:
        """Write ``value`` to register ``name[index]`` as software does: one bus write per
        word, low word first (see the class docstring for what each register does)."""
        for addr, data in self.csr_map.word_writes(name, value, index):
            self.write_addr(addr, data)

    def read(self, name: str, index: int = 0) -> int:
        """Read register ``name[index]`` (all its words)."""
        r = self.csr_map[name]
        return sum(self.read_addr(r.addr(index, w)) << (CSR_DATA_BITS * w) for w in range(r.words))

    def write_addr(self, addr: int, value: int) -> None:
        """One register-bus write of the 32-bit ``value`` at word address ``addr``."""
        self._check_bus(addr, value)
        hit = self.csr_map.decode(addr)
        if hit is None:
            return
        r, index, word = hit
        if r.name == "CTRL":
            self._ctrl(value)
        elif r.name == "PAGE_FREE":
            self.return_page(value & 0xFFFF)
        elif r.access == "rw":
            lo = word * CSR_DATA_BITS
            bits = min(r.width, lo + CSR_DATA_BITS) - lo
            value &= (1 << bits) - 1
            if r.words == 1:
                self._set_rw(r.name, index, r.clamped(value))
            else:
                old = self._get_rw(r.name, index)
                self._set_rw(r.name, index, old & ~(((1 << bits) - 1) << lo) | value << lo)

    def read_addr(self, addr: int) -> int:
        """One register-bus read at word address ``addr``: the 32-bit word returned."""
        self._check_bus(addr, 0)
        hit = self.csr_map.decode(addr)
        if hit is None:
            return 0
        r, index, word = hit
        if r.access == "wo":
            return 0
        if r.access == "rw":
            value = self._get_rw(r.name, index)
        else:
            value = self._ro_value(r.name, index) & ((1 << r.width) - 1)
        return value >> (CSR_DATA_BITS * word) & ((1 << CSR_DATA_BITS) - 1)

    def _check_bus(self, addr: int, value: int):
        if not 0 <= addr < 1 << self.csr_map.addr_bits:
            raise ValueError(f"CSR address {addr:#x} is outside the {self.csr_map.addr_bits}-bit bus")
        if not 0 <= value < 1 << CSR_DATA_BITS:
            raise ValueError(f"CSR write data {value:#x} is not a {CSR_DATA_BITS}-bit word")

    def _ctrl(self, value: int):
        """CTRL strobes. CLEAR_ERRORS acts in its write cycle; START and FLUSH wait for the
        pipeline to drain, and a START supersedes a FLUSH requested with it."""
        if value & CTRL_CLEAR_ERRORS:
            self.clear_errors()
        if value & CTRL_START:
            self.start()
        elif value & CTRL_FLUSH:
            self.flush()

    def _get_rw(self, name: str, index: int) -> int:
        v = getattr(self, self._RW_ATTR[name])
        return v[index] if self.csr_map[name].array else v

    def _set_rw(self, name: str, index: int, value: int):
        attr = self._RW_ATTR[name]
        if self.csr_map[name].array:
            getattr(self, attr)[index] = value
        else:
            setattr(self, attr, value)

    def _ro_value(self, name: str, index: int) -> int:
        """A read-only register's value from the model's state (not yet cut to width);
        a constant's is its reset value."""
        if self.csr_map[name].const:
            return self.csr_map[name].reset
        if name == "STATUS":
            return self.status_word()
        if name == "ERRORS":
            return self.errors
        if name == "INFLIGHT":
            return self.inflight
        if name == "POOL_FREE":
            return self.pages_free()
        if name == "EOS_SEEN":
            return sum(1 << s for s, seen in enumerate(self.eos_seen) if seen)
        counters = {"ROWS": self.rows, "OVERFLOW": self.overflow, "SRC_ROWS": self.src_rows,
                    "SRC_EOS": self.src_eos, "DROPS": self.drop_counts}
        return counters[name][index]

    def status_word(self) -> int:
        """The STATUS register: ARMED, DONE and ERROR (CLEARING and SWEEPING read 0)."""
        return (STATUS_ARMED if self.armed else 0) | (STATUS_DONE if self.done else 0) \
            | (STATUS_ERROR if self.errors else 0)

    def csr_values(self) -> dict:
        """Expected values of the read-only registers but the constants ID and PARAMS,
        keyed as (name, index)."""
        return {(r.name, i): self.read(r.name, i) for r in self.csr_map.registers.values()
                if r.access == "ro" and r.name not in ("ID", "PARAMS") for i in range(r.count)}
