"""MoE routing traffic for the hub: rows, sources that respect credits, lane scheduling.

Pure Python (no cocotb), reproducible from a seed. A :class:`LaneFeeder` plays the part of
the NVLink ports in front of one hub: every cycle it offers at most one packet per lane,
holds an offered packet until the hub accepts it (stream rule), and lets a source start a
row only with a free tag (tags come back as credits from the hub).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from ..spec.config import HubConfig
from ..spec.model import Packet


@dataclass
class Row:
    """One token row sent by ``src`` to local expert ``expert`` (top-k slot ``slot``), or
    (protocol v2 multicast) to every ``(expert, slot)`` of ``targets``."""
    src: int
    expert: int
    token: int
    slot: int
    data: list  # one value per chunk
    targets: tuple = ()

    def dest(self):
        """What each chunk names: the expert, or (multicast) the target set."""
        return self.targets if self.targets else self.expert

    @staticmethod
    def other_dest(dest, experts: int):
        """A destination other than ``dest`` (a chunk naming it is a PROTOCOL error): the
        next expert, or a target set without its last target (or with its one target's
        expert moved on)."""
        if not isinstance(dest, tuple):
            return (dest + 1) % max(2, experts)
        if len(dest) > 1:
            return dest[:-1]
        (x, slot), = dest
        return (((x + 1) % max(2, experts), slot),)


def random_rows(cfg: HubConfig, rng: random.Random, n_rows: int, experts=None,
                skew: float = 0.0, per_expert_limit: Optional[int] = None) -> list[Row]:
    """``n_rows`` rows from random sources to random experts (``skew`` > 0 sends a row to
    the first expert with that probability), unique (src, token, slot), random chunk data.
    No expert gets more than ``per_expert_limit`` rows (default: max_rows_per_expert)."""
    experts = list(range(cfg.experts)) if experts is None else list(experts)
    limit = cfg.max_rows_per_expert if per_expert_limit is None else per_expert_limit
    if n_rows > limit * len(experts):
        raise ValueError(f"{n_rows} rows do not fit {len(experts)} experts x {limit} rows")
    rows = []
    per = {e: 0 for e in experts}
    next_token = [0] * cfg.sources
    mask = (1 << cfg.data_bits) - 1
    for _ in range(n_rows):
        s = rng.randrange(cfg.sources)
        e = experts[0] if rng.random() < skew else rng.choice(experts)
        if per[e] >= limit:
            e = next(x for x in experts if per[x] < limit)
        per[e] += 1
        tok = next_token[s] % (1 << cfg.token_bits)
        next_token[s] += 1
        rows.append(Row(s, e, tok, rng.randrange(cfg.topk),
                        [rng.getrandbits(cfg.data_bits) & mask for _ in range(cfg.chunks_per_row)]))
    return rows


def routed_rows(cfg: HubConfig, routing: dict, rng: random.Random) -> list[Row]:
    """Rows from a routing decision: ``routing[src]`` = list of (token, slot, local expert)."""
    rows = []
    for s in sorted(routing):
        for tok, slot, e in routing[s]:
            rows.append(Row(s, e, tok, slot, [rng.getrandbits(cfg.data_bits)
                                              for _ in range(cfg.chunks_per_row)]))
    return rows


@dataclass
class _Active:
    row: Row
    tag: int
    chunks: list   # chunk indices still to send


@dataclass
class _Source:
    rows: list                       # rows not started yet
    free_tags: list
    active: list = field(default_factory=list)
    eos_sent: bool = False
    eos_after: int = -1              # EOS may go once this many rows have started (-1: at the end)
    started: int = 0
    total: int = 0


class LaneFeeder:
    """Offers packets to the hub's lanes under credit flow control.

    Parameters
    ----------
    rows : all rows to send (grouped per source, order kept within a source)
    idle : probability that a free lane offers nothing in a cycle
    shuffle_chunks : send each row's chunks in random order (else 0, 1, ...)
    max_active : rows a source keeps open at once (<= tags_per_source)
    early_eos : a source's end-of-stream may overtake its last rows (random point)
    send_eos : send end-of-stream packets at all
    errors : probability of each kind of bad input, chosen so that it can only hurt itself
        (the hub must drop and count it and leave every row intact): per row, a duplicate
        chunk and a chunk naming another expert, both before the row's last chunk; per
        packet, a packet from a source that does not exist and a chunk index out of range;
        per source, a second end-of-stream after the first.
    """

    def __init__(self, cfg: HubConfig, rows: list[Row], rng: random.Random, *, idle=0.0,
                 shuffle_chunks=True, max_active: Optional[int] = None, early_eos=False,
                 send_eos=True, errors: float = 0.0):
        self.cfg, self.rng, self.idle = cfg, rng, idle
        self.shuffle_chunks, self.send_eos, self.errors = shuffle_chunks, send_eos, errors
        self.max_active = max_active or cfg.tags_per_source
        self.sources = [_Source(rows=[r for r in rows if r.src == s],
                                free_tags=list(range(cfg.tags_per_source)))
                        for s in range(cfg.sources)]
        for src in self.sources:
            src.total = len(src.rows)
            src.eos_after = rng.randrange(src.total + 1) if early_eos else src.total
        self.offered: list[Optional[Packet]] = [None] * cfg.lanes
        self.extra: list = []              # bad packets waiting for a free lane
        self.sent_rows: list[tuple] = []   # (row, tag) in start order

    # ---- hub side -------------------------------------------------------
    def offer(self) -> list[Optional[Packet]]:
        """Packets for this cycle (a packet not yet accepted is offered again)."""
        for lane in range(self.cfg.lanes):
            if self.offered[lane] is None and self.rng.random() >= self.idle:
                self.offered[lane] = self._next_packet()
        return list(self.offered)

    def accepted(self, lane: int):
        self.offered[lane] = None

    def credit(self, src: int, tag: int):
        self.sources[src].free_tags.append(tag)

    def done(self) -> bool:
        return (all(not s.rows and not s.active and (s.eos_sent or not self.send_eos)
                    for s in self.sources)
                and not self.extra and all(p is None for p in self.offered))

    # ---- choice of the next packet --------------------------------------
    def _next_packet(self) -> Optional[Packet]:
        cfg, rng = self.cfg, self.rng
        busy = any(src.rows or src.active or (self.send_eos and not src.eos_sent)
                   for src in self.sources)
        if self.errors and busy and rng.random() < self.errors / 4:
            s = rng.randrange(cfg.sources)
            if rng.random() < 0.5:
                return Packet(src=cfg.sources, tag=0, chunk=0)        # no such source
            return Packet(src=s, tag=rng.randrange(cfg.tags_per_source),
                          expert=rng.randrange(cfg.experts), chunk=cfg.chunks_per_row)
        if self.extra and rng.random() < 0.25:
            return self.extra.pop(0)
        order = list(range(len(self.sources)))
        self.rng.shuffle(order)
        for s in order:
            src = self.sources[s]
            if self.send_eos and not src.eos_sent and src.started >= src.eos_after:
                if self.rng.random() < 0.5 or (not src.rows and not src.active):
                    src.eos_sent = True
                    if self.rng.random() < self.errors:
                        self.extra.append(Packet.eos(s, src.total))   # a second EOS
                    return Packet.eos(s, src.total)
            can_start = src.rows and src.free_tags and len(src.active) < self.max_active
            if can_start and (not src.active or self.rng.random() < 0.3):
                row = src.rows.pop(0)
                tag = src.free_tags.pop(self.rng.randrange(len(src.free_tags)))
                chunks = [(c, row.dest()) for c in range(self.cfg.chunks_per_row)]
                if self.shuffle_chunks:
                    self.rng.shuffle(chunks)
                for _ in range(2):
                    if self.rng.random() < self.errors:
                        # a duplicate, or a chunk naming another expert: after the row's
                        # first chunk (which decides its expert) and before its last
                        c = self.rng.choice(chunks[:-1])[0]
                        other = Row.other_dest(row.dest(), self.cfg.experts)
                        bad = (c, row.dest()) if self.rng.random() < 0.5 else (c, other)
                        chunks.insert(self.rng.randrange(1, len(chunks)), bad)
                src.active.append(_Active(row, tag, chunks))
                src.started += 1
                self.sent_rows.append((row, tag))
            if src.active:
                act = self.rng.choice(src.active)
                c, dest = act.chunks.pop(0)
                if not act.chunks:
                    src.active.remove(act)
                r = act.row
                if isinstance(dest, tuple):
                    return Packet(src=r.src, tag=act.tag, targets=dest, token=r.token,
                                  chunk=c, data=r.data[c])
                return Packet(src=r.src, tag=act.tag, expert=dest, token=r.token,
                              slot=r.slot, chunk=c, data=r.data[c])
        if self.extra:
            return self.extra.pop(0)
        return None


def moe_routing(cfg: HubConfig, tokens_per_source: int, rng: random.Random, gpu: int = 0,
                gpus: Optional[int] = None) -> dict:
    """Top-k routing of every source GPU's tokens over all ``gpus x experts`` experts
    (uniform gates, distinct experts per token); returns the part that lands on ``gpu``:
    ``{src: [(token, slot, local expert), ...]}``."""
    gpus = gpus or cfg.sources
    n_global = gpus * cfg.experts
    k = min(cfg.topk, n_global)
    out = {s: [] for s in range(cfg.sources)}
    for s in range(cfg.sources):
        for tok in range(tokens_per_source):
            for slot, ge in enumerate(rng.sample(range(n_global), k)):
                if ge // cfg.experts == gpu:
                    out[s].append((tok % (1 << cfg.token_bits), slot, ge % cfg.experts))
    return out
