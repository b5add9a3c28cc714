"""Random traffic with protocol v2's per-expert count packets (``count_packets``).

Pure Python (no cocotb). :class:`CountFeeder` is a :class:`~moehub.verif.traffic.LaneFeeder`
whose sources also announce, before or among their rows, how many rows they send to each
expert -- one count packet per (source, expert), zeros included, so that every expert can
become final before the end of the layer -- and hold their end-of-stream until their count
packets are out. With ``count_errors`` some announcements are wrong on purpose (one row
too few or too many), repeated, or name an expert that does not exist.
"""
from __future__ import annotations

import random
from collections import Counter

from ..spec.config import HubConfig
from ..spec.model import Packet
from .traffic import LaneFeeder, Row


class CountFeeder(LaneFeeder):
    """A :class:`LaneFeeder` that also sends count packets.

    Parameters
    ----------
    p_count : float
        Probability, each time a lane is free, that a source with count packets left sends
        one now (else its rows go first; once its rows are all started, its counts go).
    count_errors : float
        Per count packet, the probability of each error: its count off by one, a repeat
        of it, a count packet for an expert out of range (and, when > 0, one repeat for
        sure).
    (others as :class:`LaneFeeder`)
    """

    def __init__(self, cfg: HubConfig, rows: list[Row], rng: random.Random, *,
                 p_count: float = 0.15, count_errors: float = 0.0, **kw):
        super().__init__(cfg, rows, rng, **kw)
        self.p_count = p_count
        # (a multicast row counts toward each of its targets)
        sent = Counter((r.src, x) for r in rows for x in ([x for x, _ in r.targets] or [r.expert]))
        self.pending = [self._announcements(s, sent, count_errors) for s in range(cfg.sources)]
        if count_errors:        # (at least one error: a repeat, always a COUNT_DUPLICATE)
            s = rng.randrange(cfg.sources)
            self.pending[s].insert(rng.randrange(len(self.pending[s]) + 1),
                                   Packet.counts(s, rng.randrange(cfg.experts), 1))

    def _announcements(self, s: int, sent: Counter, errors: float) -> list:
        """Source s's count packets, in random order (with the errors asked for)."""
        cfg, rng = self.cfg, self.rng
        out = []
        for x in range(cfg.experts):
            n = sent[(s, x)]
            if rng.random() < errors:
                n = max(0, n + rng.choice((-1, 1)))
            out.append(Packet.counts(s, x, n))
            if rng.random() < errors:
                out.append(Packet.counts(s, x, rng.randrange(4)))          # a repeat
            if rng.random() < errors and cfg.experts < 1 << cfg.expert_bits:
                out.append(Packet.counts(s, cfg.experts, 1))               # no such expert
        rng.shuffle(out)
        return out

    def done(self) -> bool:
        return not any(self.pending) and super().done()

    def _next_packet(self):
        order = list(range(self.cfg.sources))
        self.rng.shuffle(order)
        for s in order:
            src = self.sources[s]
            if self.pending[s] and (not src.rows or self.rng.random() < self.p_count):
                return self.pending[s].pop(0)
        # a source's end-of-stream waits for its count packets
        held = [(src, src.eos_after) for s, src in enumerate(self.sources) if self.pending[s]]
        for src, _ in held:
            src.eos_after = 1 << 30
        try:
            return super()._next_packet()
        finally:
            for src, after in held:
                src.eos_after = after
