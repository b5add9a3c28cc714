"""Random knobs that put constrained-random traffic on the hub's boundaries on purpose.

Why: with one seed per random test and sparse error injection, the first and last chunk
index, tile boundaries, a region filled to its capacity, and each drop reason early and
late in a layer are hit by luck or not at all. :func:`draw_knobs` draws, from one seed, a
layer's shape with these boundaries biased in: tile size over every allowed size, region
capacities set to the rows an expert will receive minus / plus a few (or the whole
region), chunk orders that send the first or last chunk index first or last, every kind of
bad input at a random point of the layer, sources whose end-of-stream count is short
(POST_EOS, EOS_MISMATCH), bursts of rows opened together on one expert, and how the layer
ends (counts, FLUSH with or without traffic, START, the watchdog).

:class:`KnobFeeder` plays the sources like :class:`~moehub.verif.traffic.LaneFeeder` (the
same offer / accepted / credit / done interface for :meth:`HubTB.feed`), with these knobs.
Pure Python, reproducible from the seed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from ..spec.config import HubConfig
from ..spec.model import Packet
from .traffic import Row

#: chunk orders of a row: first and last index arriving first or last, middle first, random
ORDERS = ("in_order", "reverse", "edges_first", "middle_first", "random")
#: how a layer ends
ENDINGS = ("eos", "flush_idle", "flush_traffic", "abort_traffic", "abort_idle",
           "watchdog", "missing_eos_watchdog", "missing_eos_flush", "missing_eos_abort")
#: packet-level bad input injected at random points of the layer
INJECT = ("bad_source", "bad_tag", "bad_source_eos", "bad_chunk", "dup_eos")


@dataclass
class Knobs:
    """One layer's shape (see the module docstring); ``describe()`` is logged with the seed."""
    tile_rows: int
    rows: list                       # Row, in send order per source
    caps: list                       # programmed REGION_CAP per expert
    eos_delta: list                  # per source: EOS count = rows sent - delta
    eos_at: list                     # per source: EOS sent after this many rows started
    no_eos: set = field(default_factory=set)   # sources that never send EOS
    anchor: int = 0                  # sends its EOS (count right) after every other row
    orders: tuple = ORDERS           # chunk orders drawn from, per row
    p_start: float = 0.3             # a source opens a new row rather than continuing one
    max_open: int = 1                # rows a source keeps open at once (1: openers spread
                                     # over the layer; all tags: they bunch at its start)
    p_error: float = 0.0             # per chunk: a duplicate / wrong-expert copy before it
    injections: list = field(default_factory=list)   # (fraction of the layer, kind)
    ending: str = "eos"
    bp: float = 0.0
    idle: float = 0.0
    credit_delay: int = 0
    junk_before: bool = False
    junk_after: bool = False

    def describe(self) -> str:
        per_x = {}
        for r in self.rows:
            per_x[r.expert] = per_x.get(r.expert, 0) + 1
        return (f"tile_rows={self.tile_rows} rows={len(self.rows)} per_expert={dict(sorted(per_x.items()))} "
                f"caps={self.caps} eos_delta={self.eos_delta} no_eos={sorted(self.no_eos)} "
                f"orders={self.orders} p_start={self.p_start} max_open={self.max_open} p_error={self.p_error} "
                f"injections={len(self.injections)} ending={self.ending} bp={self.bp} idle={self.idle}")


def tile_choices(cfg: HubConfig) -> list[int]:
    out, t = [], cfg.min_tile_rows
    while t <= cfg.max_tile_rows:
        out.append(t)
        t *= 2
    return out


def draw_knobs(cfg: HubConfig, rng: random.Random, max_packets: int = 3000,
               full_region: bool = False) -> Knobs:
    """A layer of at most about ``max_packets`` packets with boundaries biased in;
    ``full_region``: one expert's region is the whole ``max_rows_per_expert`` and is filled
    to it (and one row more)."""
    n_rows = max(4, min(max_packets // cfg.chunks_per_row, cfg.sources * cfg.max_rows_per_expert // 2))
    fits = [t for t in tile_choices(cfg) if t <= n_rows] or [cfg.min_tile_rows]
    tr = rng.choice(fits if rng.random() < 0.8 else tile_choices(cfg))
    per_x = _rows_per_expert(cfg, rng, n_rows, tr, full_region)
    caps = [_cap(cfg, rng, n, tr, full_region and x == 0) for x, n in enumerate(per_x)]
    rows = _make_rows(cfg, rng, per_x, bad_expert=rng.random() < 0.8)
    k = Knobs(tile_rows=tr, rows=rows, caps=caps, eos_delta=[0] * cfg.sources,
              eos_at=[0] * cfg.sources)
    _draw_eos(cfg, rng, k)
    _draw_traffic(cfg, rng, k)
    return k


def _rows_per_expert(cfg, rng, n_rows, tr, full_region) -> list[int]:
    """Rows per expert: around a tile multiple +- 1 (tile boundaries), sometimes skewed onto
    one expert (contention); the first expert fills its whole region when asked."""
    E = cfg.experts
    weights = [rng.random() ** 3 for _ in range(E)] if rng.random() < 0.5 else [1.0] * E
    per_x = [0] * E
    for _ in range(n_rows):
        per_x[rng.choices(range(E), weights)[0]] += 1
    for x in range(E):
        if per_x[x] >= tr // 2 and rng.random() < 0.5:   # a tile multiple, or one off it
            per_x[x] = max(1, max(1, round(per_x[x] / tr)) * tr + rng.choice([-1, 0, 1]))
    if full_region:
        per_x[0] = cfg.max_rows_per_expert + 1
    return [min(n, cfg.max_rows_per_expert + 2) for n in per_x]


def _cap(cfg, rng, n: int, tr: int, full: bool) -> int:
    """A capacity near the rows the expert will get: full region, exactly, short by 1-2
    (overflow at the end of its rows), a part of them (overflow from a random point of the
    layer on), within a tile above (near), or tiny (overflow from the start)."""
    if full:
        return cfg.max_rows_per_expert
    choice = rng.choice(["max", "exact", "short", "part", "part", "near", "near", "tiny"])
    cap = {"max": cfg.max_rows_per_expert, "exact": n, "short": n - rng.choice([1, 2]),
           "part": int(n * rng.uniform(0.2, 0.9)), "near": n + rng.randrange(1, tr + 1),
           "tiny": rng.choice([0, 1, 2])}[choice]
    return max(0, min(cap, cfg.max_rows_per_expert))


def _make_rows(cfg, rng, per_x, bad_expert: bool) -> list[Row]:
    """Rows from random sources (some sources get only a few rows), plus a few rows naming
    an expert that does not exist when ``bad_expert``."""
    experts = [x for x, n in enumerate(per_x) for _ in range(n)]
    if bad_expert:
        top = (1 << cfg.expert_bits) - 1
        n_bad = rng.randint(1, max(4, len(experts) // 6))
        experts += [rng.choice([cfg.experts, top]) for _ in range(n_bad)]
    rng.shuffle(experts)
    light = {s for s in range(cfg.sources) if rng.random() < 0.3}
    srcs = [s for s in range(cfg.sources) if s not in light] or list(range(cfg.sources))
    rows, tok = [], [0] * cfg.sources
    mask = (1 << cfg.data_bits) - 1
    for k, x in enumerate(experts):
        s = rng.choice(sorted(light)) if light and rng.random() < 0.05 else rng.choice(srcs)
        rows.append(Row(s, x, tok[s] % (1 << cfg.token_bits), rng.randrange(cfg.topk),
                        [rng.getrandbits(cfg.data_bits) & mask for _ in range(cfg.chunks_per_row)]))
        tok[s] += 1
    return rows


def _draw_eos(cfg, rng, k: Knobs):
    """Each source's EOS: after all its rows, before them, or overtaking some (at a random
    row); its count right, short by 1-2, or half its rows (rows past it are POST_EOS from
    the middle of the source's stream on, or its EOS is an EOS_MISMATCH)."""
    for s in range(cfg.sources):
        n = sum(1 for r in k.rows if r.src == s)
        k.eos_delta[s] = min(n, rng.choice([0, 0, 1, 2, n - n // 2]))
        k.eos_at[s] = rng.choice([n, n, 0, rng.randint(0, n)])
    # One source keeps the layer open until every row is out: else a layer whose counts
    # are all reached early ends early, and the rest of its rows are NOT_ARMED.
    k.anchor = rng.randrange(cfg.sources)
    k.eos_delta[k.anchor] = 0


def _draw_traffic(cfg, rng, k: Knobs):
    k.orders = rng.choice([ORDERS, ("in_order",), ("reverse",), ("edges_first", "middle_first")])
    k.p_start = rng.choice([0.3, 0.9])
    k.max_open = rng.choice([1, 2, cfg.tags_per_source])
    k.p_error = rng.choice([0.0, 0.02, 0.1])
    n_inj = rng.choice([0, 4, 12])
    k.injections = sorted((rng.random(), rng.choice(INJECT)) for _ in range(n_inj))
    k.ending = rng.choice(ENDINGS[:1] * 4 + ENDINGS[1:])
    if k.ending.startswith("missing_eos"):
        k.no_eos = {rng.randrange(cfg.sources)}
    k.bp = rng.choice([0.0, 0.2, 0.5])
    k.idle = rng.choice([0.0, 0.0, 0.3])
    k.credit_delay = rng.randrange(0, 8)
    k.junk_before, k.junk_after = rng.random() < 0.3, rng.random() < 0.3


@dataclass
class _Open:
    row: Row
    tag: int
    chunks: list            # chunk indices still to send
    sent: list = field(default_factory=list)
    opened: bool = False    # its first packet was accepted (bad copies only after that)


class KnobFeeder:
    """Sources playing :class:`Knobs` under credit flow control (the interface of
    :class:`~moehub.verif.traffic.LaneFeeder`): every cycle each free lane gets the next
    packet of a random source (a new row with probability ``p_start``, else a chunk of one
    of its open rows), held until accepted; injections go out once the layer's share of
    packets given in ``injections`` has been offered."""

    def __init__(self, cfg: HubConfig, k: Knobs, rng: random.Random):
        self.cfg, self.k, self.rng = cfg, k, rng
        self.todo = {s: [r for r in k.rows if r.src == s] for s in range(cfg.sources)}
        self.total = {s: len(v) for s, v in self.todo.items()}
        self.started = {s: 0 for s in range(cfg.sources)}
        self.free = {s: list(range(cfg.tags_per_source)) for s in range(cfg.sources)}
        self.open = {s: [] for s in range(cfg.sources)}
        self.eos_sent = {s: s in k.no_eos for s in range(cfg.sources)}
        self.offered: list[Optional[Packet]] = [None] * cfg.lanes
        self.n_offered = 0
        self.expected = max(1, len(k.rows) * (cfg.chunks_per_row + 1))
        self.inject = list(k.injections)
        self.by_tag: dict = {}            # (src, tag) -> _Open, rows still sending
        self.stuck = 0                    # cycles in a row with nothing to offer

    # ---- the LaneFeeder interface
    #: cycles with nothing to offer after which the sources give up: a layer can end by its
    #: counts while a source still sends rows past its EOS count; those are NOT_ARMED and
    #: their tags never come back
    STUCK = 2000

    def offer(self) -> list:
        for lane in range(self.cfg.lanes):
            if self.offered[lane] is None and self.rng.random() >= self.k.idle:
                self.offered[lane] = self._next()
                self.n_offered += self.offered[lane] is not None
        idle = all(p is None for p in self.offered)
        self.stuck = self.stuck + 1 if idle else 0
        return list(self.offered)

    def accepted(self, lane: int):
        p = self.offered[lane]
        o = self.by_tag.get((p.src, p.tag)) if p is not None and p.kind == 0 else None
        if o is not None and o.sent and p.chunk == o.sent[0] and p.expert == o.row.expert:
            o.opened = True
        self.offered[lane] = None

    def credit(self, src: int, tag: int):
        self.free[src].append(tag)

    def done(self) -> bool:
        return (all(not self.todo[s] and not self.open[s] and self.eos_sent[s]
                    for s in range(self.cfg.sources)) and not self.inject
                or self.stuck >= self.STUCK) and all(p is None for p in self.offered)

    # ---- choice of the next packet
    def _next(self) -> Optional[Packet]:
        if self.inject and self.n_offered >= self.inject[0][0] * self.expected:
            return self._bad(self.inject.pop(0)[1])
        order = list(range(self.cfg.sources))
        self.rng.shuffle(order)
        for s in order:
            p = self._from_source(s)
            if p is not None:
                return p
        if self.inject and self.done_but_injections():
            return self._bad(self.inject.pop(0)[1])
        return None

    def done_but_injections(self) -> bool:
        return all(not self.todo[s] and not self.open[s] for s in range(self.cfg.sources))

    def _from_source(self, s: int) -> Optional[Packet]:
        k, rng = self.k, self.rng
        if s == k.anchor and not self.eos_sent[s]:
            return self._anchor_next(s)
        if not self.eos_sent[s] and self.started[s] >= k.eos_at[s] and rng.random() < 0.5:
            self.eos_sent[s] = True
            return Packet.eos(s, self.total[s] - k.eos_delta[s])
        if self._may_start(s):
            self._start(s)
        if not self.open[s]:
            if not self.todo[s] and not self.eos_sent[s]:
                self.eos_sent[s] = True
                return Packet.eos(s, self.total[s] - k.eos_delta[s])
            return None
        return self._chunk(rng.choice(self.open[s]), s)

    def _anchor_next(self, s: int) -> Optional[Packet]:
        """The anchor's rows, then its EOS once no other source has a row left to send."""
        if self._may_start(s):
            self._start(s)
        if self.open[s]:
            return self._chunk(self.rng.choice(self.open[s]), s)
        others = any(self.todo[x] or self.open[x] for x in range(self.cfg.sources) if x != s)
        if self.todo[s] or others:
            return None
        self.eos_sent[s] = True
        return Packet.eos(s, self.total[s])

    def _may_start(self, s: int) -> bool:
        k = self.k
        return bool(self.todo[s] and self.free[s] and len(self.open[s]) < k.max_open
                    and (not self.open[s] or self.rng.random() < k.p_start))

    def _start(self, s: int):
        row = self.todo[s].pop(0)
        tag = self.free[s].pop(self.rng.randrange(len(self.free[s])))
        o = _Open(row, tag, chunk_order(self.cfg, self.rng, self.rng.choice(self.k.orders)))
        self.open[s].append(o)
        self.by_tag[(s, tag)] = o
        self.started[s] += 1

    def _chunk(self, o: _Open, s: int) -> Packet:
        """The row's next chunk, or (p_error, once its opener was accepted, before its last
        chunk) a duplicate of a chunk it sent or a copy of a chunk still to come naming
        another expert (the first or last index half of the time). (Not before the opener is
        in: a lane freed later may carry a newer packet on a lower lane in the same group,
        which would then open the row.)"""
        r = o.row
        if o.opened and len(o.chunks) >= 2 and self.rng.random() < self.k.p_error:
            if self.rng.random() < 0.5:
                c, x = self._edge_biased(o.sent), r.expert
            else:
                c, x = self._edge_biased(o.chunks), (r.expert + 1) % (1 << self.cfg.expert_bits)
            return Packet(src=r.src, tag=o.tag, expert=x, token=r.token, slot=r.slot, chunk=c,
                          data=r.data[c])
        c = o.chunks.pop(0)
        o.sent.append(c)
        if not o.chunks:
            self.open[s].remove(o)
            self.by_tag.pop((s, o.tag), None)
        return Packet(src=r.src, tag=o.tag, expert=r.expert, token=r.token, slot=r.slot, chunk=c,
                      data=r.data[c])

    def _edge_biased(self, chunks: list) -> int:
        """One of ``chunks``, the first or last index of the row half of the time when there."""
        edges = [c for c in chunks if c in (0, self.cfg.chunks_per_row - 1)]
        return self.rng.choice(edges if edges and self.rng.random() < 0.5 else chunks)

    def _bad(self, kind: str) -> Optional[Packet]:
        """A packet-level bad input (dropped, touches nothing): chunk index first/middle/last;
        a second EOS only from a source whose first one went out (else it comes later)."""
        cfg, rng = self.cfg, self.rng
        if kind == "dup_eos":
            done = [s for s in range(cfg.sources) if self.eos_sent[s] and s not in self.k.no_eos]
            if not done:
                self.inject.append((2.0, kind))       # retry once sources have ended
                return None
            return Packet.eos(rng.choice(done), rng.randrange(1 << cfg.count_bits))
        c = rng.choice([0, cfg.chunks_per_row // 2, cfg.chunks_per_row - 1])
        if kind == "bad_source":
            src = rng.randrange(cfg.sources, 1 << cfg.src_bits)
            return Packet(src=src, tag=0, expert=0, chunk=c)
        if kind == "bad_tag":
            return Packet(src=rng.randrange(cfg.sources), tag=rng.randrange(cfg.tags_per_source, 1 << cfg.tag_bits),
                          expert=0, chunk=c)
        if kind == "bad_source_eos":
            return Packet.eos(rng.randrange(cfg.sources, 1 << cfg.src_bits), 0)
        bad = rng.choice([cfg.chunks_per_row, (1 << cfg.chunk_bits) - 1])
        return Packet(src=rng.randrange(cfg.sources), tag=0, expert=0, chunk=bad)


def chunk_order(cfg: HubConfig, rng: random.Random, how: str) -> list[int]:
    """A row's chunk indices in the order ``how`` (see :data:`ORDERS`)."""
    C = cfg.chunks_per_row
    mid = list(range(1, C - 1))
    rng.shuffle(mid)
    if how == "in_order":
        return list(range(C))
    if how == "reverse":
        return list(range(C - 1, -1, -1))
    if how == "edges_first":
        edges = [0, C - 1] if rng.random() < 0.5 else [C - 1, 0]
        return edges + mid
    if how == "middle_first":
        rest = [0, C - 1] + mid[1:]
        rng.shuffle(rest)
        return mid[:1] + rest
    order = list(range(C))
    rng.shuffle(order)
    return order
