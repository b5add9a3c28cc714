"""The hub stage in RTL: one destination GPU's arrival schedule played into the Verilog.

``run_hub_rtl(cfg, arrivals)`` is a hub backend like ``run_hub_fast`` (see
:mod:`moehub.cosim.hub_stage`): it expands the row-level schedule into packets, plays
them into the hub's Verilog with :mod:`moehub.verif.player` (cocotb + Verilator when
installed, else Icarus; ``SIM`` or ``$MOEHUB_SIM`` chooses; clock in C, Python woken once;
a stalled hub delays later arrivals), and turns the cycle-stamped
control writes and credits into a :class:`HubResult`. Tile-ready times come from the
RTL's own flag writes; allocations from its metadata writes.

:func:`compare` is the equivalence check: the reference model, fed the packets in the
order and at the cycles the RTL accepted them, must reproduce every control write,
credit and data write exactly; the model-mode tile-ready times (annotated with the
RTL's measured latencies) are compared with the RTL's and the difference reported.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec.config import HubConfig
from ..spec.formats import CtlKind
from ..spec.program import csr_program, default_layout
from ..verif.player import PlayerResult, model_write_hash, replay_into_model, run_player
from .hub_stage import HubArrivals, HubResult


def _csr(cfg: HubConfig, arrivals: HubArrivals) -> list:
    return csr_program(cfg, caps=arrivals.region_cap)


def result_from_player(cfg: HubConfig, res: PlayerResult) -> HubResult:
    lay = default_layout(cfg)
    fmt_src = (1 << cfg.src_bits) - 1
    fmt_tok = (1 << cfg.token_bits) - 1
    alloc, counts, count_cycle, done = {}, [0] * cfg.experts, {}, -1
    for cyc, w in res.ctl:
        if w.kind == CtlKind.META:
            idx = (w.addr - lay["meta_base"]) // cfg.meta_word_bytes
            e, row = divmod(idx, cfg.max_rows_per_expert)
            src = w.data & fmt_src
            tok = (w.data >> cfg.src_bits) & fmt_tok
            slot = (w.data >> (cfg.src_bits + cfg.token_bits)) & ((1 << cfg.slot_bits) - 1)
            alloc[(src, tok, slot)] = (e, row)
        elif w.kind == CtlKind.COUNT:
            e = (w.addr - lay["count_base"]) // 4
            counts[e] = w.data
            count_cycle[e] = cyc
        elif w.kind == CtlKind.DONE:
            done = cyc
    drops = sum(v for (name, _), v in res.csr.items() if name == "DROPS")
    tiles = res.tile_ready(cfg, lay["flag_base"])
    return HubResult(tile_ready=tiles, counts=counts,
                     # (paged, one layer from a fresh pool: every page taken starts a tile,
                     # and every started tile is flagged, full or at the sweep)
                     pages=len(tiles) if cfg.paged else 0,
                     credits=[(s, t, c) for c, s, t in res.credits], alloc=alloc,
                     done_cycle=done, drops=drops, count_cycle=count_cycle,
                     packets=len(res.accepted))


#: dump a waveform (FST; VCD on Verilator; GTKWave or Surfer) of every RTL run (``moehub cosim --waves``)
WAVES = False
#: the simulator of every RTL run ("icarus", "verilator"; ``moehub cosim --sim``); None:
#: ``$MOEHUB_SIM``, else Verilator when installed (:func:`moehub.verif.sim.choose`)
SIM = None


def run_hub_rtl(cfg: HubConfig, arrivals: HubArrivals, *, mode: str = "cocotb",
                tag: str = "cosim", waves: bool | None = None,
                sim: str | None = None) -> HubResult:
    waves = WAVES if waves is None else waves
    packets = list(arrivals.packets())
    res = run_player(cfg, packets, mode=mode, csr_writes=_csr(cfg, arrivals), tag=tag,
                     waves=waves, sim=sim or SIM)
    out = result_from_player(cfg, res)
    out.player = res          # wall time, stalls, simulator: for reports and benchmarks
    if waves:
        wave = res.waves if res.waves and res.waves.exists() else None
        print(f"waveform: {wave or '(none written)'}")
    return out


@dataclass
class Comparison:
    functional_equal: bool     #: model fed the RTL's accept order reproduces every output
    alloc_equal: bool          #: same (src, token, slot) -> (expert, row) as model mode
    counts_equal: bool
    tiles_equal: bool          #: same set of flagged tiles
    tile_ready_max_diff: int   #: max |RTL - model mode| tile-ready cycles
    tile_ready_mean_diff: float
    done_diff: int             #: RTL - model mode layer-done cycle
    stall_cycles: int          #: cycles the RTL held back an arrived packet


def compare(cfg: HubConfig, arrivals: HubArrivals, model_result: HubResult,
            rtl_result: HubResult) -> Comparison:
    res: PlayerResult = rtl_result.player
    m = replay_into_model(cfg, res, csr_writes=_csr(cfg, arrivals))
    functional = ([w for _, w in res.ctl] == m.ctl
                  and [(s, t) for _, s, t in res.credits] == m.credits
                  and (res.writes, res.write_hash) == model_write_hash(cfg, m))
    common = set(model_result.tile_ready) & set(rtl_result.tile_ready)
    diffs = np.array([rtl_result.tile_ready[k] - model_result.tile_ready[k] for k in common]
                     or [0])
    return Comparison(
        functional_equal=functional,
        alloc_equal=model_result.alloc == rtl_result.alloc,
        counts_equal=list(model_result.counts) == list(rtl_result.counts),
        tiles_equal=set(model_result.tile_ready) == set(rtl_result.tile_ready),
        tile_ready_max_diff=int(np.abs(diffs).max()),
        tile_ready_mean_diff=float(np.abs(diffs).mean()),
        done_diff=rtl_result.done_cycle - model_result.done_cycle,
        stall_cycles=sum(b - a + 1 for a, b in res.stalls),
    )
