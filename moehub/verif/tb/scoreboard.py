"""The scoreboard: what went into the hub, replayed into the reference model, against
what came out.

:class:`Scoreboard` keeps the run's log -- ``(cycle, order, kind, args)`` of every packet
accepted, register-bus write, reset and watchdog timeout -- and :meth:`Scoreboard.replay`
feeds it, in cycle order, into a fresh :class:`~moehub.spec.model.HubModel` (register
writes through the model's own register interface, so the hub's register rules -- clamps,
START latching, CTRL strobes -- apply to both). :meth:`Scoreboard.compare` checks every
data write (per lane, in order), every control write (in order), every credit and every
status register; :meth:`Scoreboard.check_ordering` that no tile flag overtakes its rows'
data; :meth:`Scoreboard.check_invariants` checks a clean layer against the traffic itself,
independently of the model.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Awaitable, Callable

from ...spec.csr_map import CTRL_START, CsrMap
from ...spec.formats import CtlKind, HubFormats, data_addr, flag_addr
from ...spec.model import HubModel
from ..traffic import Row


class Scoreboard:
    """See the module docstring. ``seed`` goes into every failure message."""

    def __init__(self, cfg, fmt: HubFormats, cmap: CsrMap, seed: int):
        self.cfg, self.fmt, self.map, self.seed = cfg, fmt, cmap, seed
        self.log: list[tuple] = []

    def record(self, cycle: int, kind: str, *args):
        self.log.append((cycle, len(self.log), kind, args))

    def replay(self) -> HubModel:
        """The logged run (packets in accept order, CSR operations in between) in a fresh
        reference model."""
        model = HubModel(self.cfg)
        for cyc, _, kind, args in sorted(self.log, key=lambda e: (e[0], e[2] != "packet", e[1])):
            if kind == "reset":
                model.reset()
            elif kind == "packet":
                pkt, lane, c = args
                model.packet(pkt, lane, c)
            elif kind == "csr":
                model.write_addr(*args)
            elif kind == "timeout":
                model.flush(timeout=True)
        model.end()
        return model

    async def compare(self, model: HubModel, wr_out, ctl_out, credit_out,
                      csr_read: Callable[[str, int], Awaitable[int]]):
        """Every output and status register against ``model`` (call when the hub is idle)."""
        seed = self.seed
        for j in range(self.cfg.lanes):
            got = [(a, dta) for _, a, dta in wr_out[j]]
            exp = model.writes[j]
            assert got == exp, _diff(f"lane {j} data writes", got, exp, seed)
        got_ctl = [c for _, c in ctl_out]
        assert got_ctl == model.ctl, _diff("control writes", got_ctl, model.ctl, seed)
        got_cr = [(s, t) for _, s, t in credit_out]
        assert got_cr == model.credits, _diff("credits", got_cr, model.credits, seed)
        for (name, index), value in model.csr_values().items():
            got = await csr_read(name, index)
            assert got == value, f"CSR {name}[{index}] = {got:#x}, model {value:#x} (seed {seed})"

    def check_ordering(self, model: HubModel, wr_out, ctl_out):
        """Every tile flag of the last layer is written after all data writes of the tile's
        rows. (Only the writes since the last START: a layer reuses the addresses of the
        layers before it, and a flushed layer leaves tiles unflagged.)"""
        cfg = self.cfg
        starts = [cyc for cyc, _, kind, args in self.log
                  if kind == "csr" and args[0] == self.map.addr("CTRL") and args[1] & CTRL_START]
        since = max(starts, default=0)
        last_write = {}
        for j in range(cfg.lanes):
            for cyc, addr, _ in wr_out[j]:
                if cyc >= since:
                    last_write[addr] = max(last_write.get(addr, -1), cyc)
        flags = {}
        for cyc, c in ctl_out:
            if c.kind == CtlKind.FLAG and cyc >= since:
                flags[c.addr] = cyc
        for x in range(cfg.experts):
            for r in range(model.rows[x]):
                tile = r >> model.layer_tile_rows_log2
                fa = flag_addr(cfg, model.layer_flag_base, x, tile)
                if fa not in flags:
                    continue
                for c in range(cfg.chunks_per_row):
                    if cfg.paged or cfg.multicast:     # (in its tile's page, in the arena)
                        a = data_addr(cfg, model.pool_base, model.row_loc[(x, r)], c)
                    else:
                        a = data_addr(cfg, model.region_base[x], r, c)
                    assert last_write.get(a, -1) < flags[fa], \
                        f"flag of expert {x} tile {tile} at cycle {flags[fa]} before its row {r} " \
                        f"chunk {c} write at {last_write.get(a)} (seed {self.seed})"

    def check_invariants(self, model: HubModel, rows: list[Row], wr_out, ctl_out, credit_out):
        """Model-independent checks of one layer of clean traffic (no bad input) to static
        regions: every row's metadata written once with a dense, unique row number; every
        chunk written exactly once at the right address with the right data; every tile
        flagged exactly once; final counts right; every credit returned."""
        cfg = self.cfg
        metas = [c for _, c in ctl_out if c.kind == CtlKind.META]
        sent = {(r.src, r.token, r.slot): r for r in rows}
        assert len(metas) == len(rows), f"{len(metas)} metadata writes for {len(rows)} rows"
        row_of = {}
        per_expert = defaultdict(list)
        for c in metas:
            off = c.addr - model.layer_meta_base
            idx = off // cfg.meta_word_bytes
            x, r = divmod(idx, cfg.max_rows_per_expert)
            f = self.fmt.meta_word.unpack(c.data)
            key = (f["src"], f["token"], f["slot"])
            assert key in sent and key not in row_of, f"unexpected or repeated metadata {key}"
            assert sent[key].expert == x, f"row {key} placed in expert {x}, sent to {sent[key].expert}"
            row_of[key] = (x, r)
            per_expert[x].append(r)
        for x, rs in per_expert.items():
            assert sorted(rs) == list(range(len(rs))), f"expert {x} rows not dense/unique: {sorted(rs)}"
        writes = defaultdict(list)
        for j in range(cfg.lanes):
            for _, a, dta in wr_out[j]:
                writes[a].append(dta)
        expected_writes = {}
        for key, (x, r) in row_of.items():
            for c, dta in enumerate(sent[key].data):
                expected_writes[data_addr(cfg, model.region_base[x], r, c)] = dta
        assert set(writes) == set(expected_writes), "data written to unexpected addresses"
        for a, vals in writes.items():
            assert vals == [expected_writes[a]], f"address {a:#x} written {vals}, want {expected_writes[a]}"
        want_flags = set()
        tr = 1 << model.layer_tile_rows_log2
        for x in range(cfg.experts):
            n = len(per_expert.get(x, []))
            for t in range((n + tr - 1) // tr):
                want_flags.add(flag_addr(cfg, model.layer_flag_base, x, t))
        got_flags = [c.addr for _, c in ctl_out if c.kind == CtlKind.FLAG]
        assert sorted(got_flags) == sorted(want_flags), "tiles not flagged exactly once"
        counts = {c.addr: c.data for _, c in ctl_out if c.kind == CtlKind.COUNT}
        for x in range(cfg.experts):
            assert counts.get(model.layer_count_base + 4 * x) == len(per_expert.get(x, [])), \
                f"final count of expert {x}"
        done = [c for _, c in ctl_out if c.kind == CtlKind.DONE]
        assert len(done) == 1 and done[0].data == model.layer_epoch, "layer-done word"
        assert len(credit_out) == len(rows), "credits returned"


def _diff(what, got, exp, seed) -> str:
    n = min(len(got), len(exp))
    first = next((i for i in range(n) if got[i] != exp[i]), n)
    return (f"{what} differ from the model (seed {seed}): {len(got)} vs {len(exp)} items; "
            f"first difference at #{first}: got {got[first:first + 3]} expected {exp[first:first + 3]}")
