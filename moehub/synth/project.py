"""Technology projection from OSU 0.18 um to a 5 nm-class node, with ranges.

The method and every constant are those of FACTS.md ("Technology projection"); each
constant below names its source. Delay is carried in FO4 units (technology independent),
area in gate equivalents (NAND2X1 = 24 um^2 at OSU018) and SRAM bits.

::

    FO4 count  = combinational critical path (OSU018) / FO4 (OSU018, measured)
    t_cycle,N5 = FO4 count x FO4_N5 x (1 + wire margin) + 3.6 FO4_N5 (flop) , + uncertainty
    area,N5    = GE x 0.032 um^2 / utilization  +  SRAM bits x 0.021 um^2 x periphery factor

Each quantity is given as (low, nominal, high): the smallest value, the nominal one and
the largest (for an fmax, low is the pessimistic end; for an area, the optimistic one).
"""
from __future__ import annotations

from dataclasses import dataclass

#: OSU018 NAND2X1 area, one gate equivalent (osu018_stdcells.lib; FACTS.md)
GE_UM2_OSU018 = 24.0
#: 5 nm-class FO4 in ps: 12-17, use 15 (ASAP7 INVx1 13-20 ps / 1.15 for N7->N5; FACTS.md)
FO4_N5_PS = (12.0, 15.0, 17.0)
#: wire-load margin on logic delay at N5 (FACTS.md recommended projection: 0.2-0.3)
WIRE_MARGIN = (0.2, 0.25, 0.3)
#: flip-flop overhead clk->Q + setup in FO4 (OSU018 measured, FACTS.md: 357 ps = 3.6 FO4)
FLOP_FO4 = 3.6
#: model uncertainty added to the N5 cycle (FACTS.md: 5-10 %)
UNCERTAINTY = (0.05, 0.075, 0.10)
#: N5 NAND2 footprint, um^2 (3 CPP x 51 nm x 210 nm; Apple A15 measurements via Angstronomics; FACTS.md)
NAND2_N5_UM2 = 0.032
#: placement utilization (FACTS.md: 0.6-0.7); high utilization = small area
UTILIZATION = (0.7, 0.65, 0.6)
#: N5 HD SRAM bitcell, um^2 (TSMC IEDM 2019 / WikiChip; FACTS.md)
BITCELL_N5_UM2 = 0.021
#: array area / bitcell area. Low end: large macros at ~32 Mib/mm^2 (FACTS.md:
#: 1 mm^2 / 32 Mib / 0.021 um^2 = 1.42); nominal and high: small macros of a few Kib to
#: tens of Kib whose periphery weighs more (assumption, 2x and 4x; stated in the report)
PERIPHERY = (1.42, 2.0, 4.0)
#: reference areas (FACTS.md): H100 die (Hopper whitepaper), one NVSwitch gen3 port (derived)
H100_DIE_MM2 = 814.0
NVSWITCH_PORT_MM2 = 4.6
#: H100 SXM5 boost clock, GHz (H100 datasheet; FACTS.md)
H100_CLOCK_GHZ = 1.98
#: rule of thumb: a path of at most this many FO4 of logic fits one 1.98 GHz cycle at
#: 15 ps/FO4 (FACTS.md; flop overhead included, no wire margin): the pipelining target
STAGE_RULE_FO4 = 26.0
#: NVLink4 payload bandwidth per direction, GB/s (Hopper whitepaper; FACTS.md)
NVLINK4_GBPS = 450.0
#: Stillmaker & Baas 2017, 180 nm -> 7 nm: delay / 24 (optimistic bound only; FACTS.md)
STILLMAKER_DELAY_DIV = 24.0

SOURCES = {
    "fo4_osu018": "measured here with OpenSTA (INVX1 driving 4 INVX1; FACTS.md: ~99 ps)",
    "fo4_n5": "12-17 ps, nominal 15 ps: ASAP7 7 nm INVx1 13-20 ps / 1.15 for N7->N5 (FACTS.md)",
    "ge": "NAND2X1 = 24 um^2 (osu018_stdcells.lib)",
    "nand2_n5": "0.032 um^2 (3 CPP x 51 nm x 210 nm, Apple A15 / Angstronomics; FACTS.md)",
    "utilization": "placement utilization 0.6-0.7 (FACTS.md)",
    "bitcell": "N5 HD bitcell 0.021 um^2, ~32 Mib/mm^2 with periphery (TSMC IEDM 2019 / WikiChip; FACTS.md)",
    "periphery": "1.42 (large macros, from 32 Mib/mm^2) to 4 (small macros, assumption)",
    "h100": "H100 die 814 mm^2 (NVIDIA Hopper whitepaper); NVSwitch gen3 port ~4.6 mm^2 (FACTS.md, derived)",
    "nvlink": "NVLink4 450 GB/s per direction (Hopper whitepaper); H100 boost 1.98 GHz (datasheet)",
}


@dataclass(frozen=True)
class Range:
    low: float
    nominal: float
    high: float

    def as_dict(self, digits: int = 5) -> dict:
        """Rounded to ``digits`` significant digits."""
        sig = lambda v: float(f"{v:.{digits}g}")
        return {"low": sig(self.low), "nominal": sig(self.nominal), "high": sig(self.high)}

    def fmt(self, spec: str = ".3g") -> str:
        return f"{self.nominal:{spec}} ({self.low:{spec}}-{self.high:{spec}})"


def fo4_count(logic_ns: float, fo4_ns: float) -> float:
    return logic_ns / fo4_ns


def cycle_n5_ps(fo4s: float) -> Range:
    """N5 cycle time for a stage of ``fo4s`` FO4 of logic (low = fastest)."""
    vals = []
    for fo4, wire, unc in zip(FO4_N5_PS, WIRE_MARGIN, UNCERTAINTY):
        vals.append((fo4s * fo4 * (1 + wire) + FLOP_FO4 * fo4) * (1 + unc))
    return Range(*vals)


def fmax_n5_GHz(fo4s: float) -> Range:
    c = cycle_n5_ps(fo4s)
    return Range(1e3 / c.high, 1e3 / c.nominal, 1e3 / c.low)   # low = pessimistic (slowest)


def fo4_budget(clock_GHz: float) -> Range:
    """FO4 of logic that fit one cycle at ``clock_GHz`` (the inverse of :func:`cycle_n5_ps`).

    ``low`` is the pessimistic budget (slow FO4, large margins), ``high`` the optimistic.
    """
    period_ps = 1e3 / clock_GHz
    vals = [(period_ps / (1 + unc) / fo4 - FLOP_FO4) / (1 + wire)
            for fo4, wire, unc in zip(FO4_N5_PS, WIRE_MARGIN, UNCERTAINTY)]
    return Range(vals[2], vals[1], vals[0])


def timing_verdict(fo4s: float, clock_GHz: float = H100_CLOCK_GHZ) -> str:
    """A path of ``fo4s`` FO4 of logic at ``clock_GHz`` (default the H100's 1.98 GHz): PASS
    within the projection's own budget (:func:`fo4_budget`, nominal), MARGINAL within
    FACTS.md's rule of thumb (<= :data:`STAGE_RULE_FO4`) but not that budget, FAIL beyond
    the rule."""
    return ("PASS" if fo4s <= fo4_budget(clock_GHz).nominal else
            "MARGINAL" if fo4s <= STAGE_RULE_FO4 else "FAIL")


def logic_area_n5_mm2(area_um2_osu018: float) -> Range:
    ge = area_um2_osu018 / GE_UM2_OSU018
    return Range(*(ge * NAND2_N5_UM2 / u / 1e6 for u in UTILIZATION))


def sram_area_n5_mm2(bits: int) -> Range:
    return Range(*(bits * BITCELL_N5_UM2 * p / 1e6 for p in PERIPHERY))


def project(area_um2: float, sram_bits: int, logic_ns: float, fo4_ns: float) -> dict:
    """Everything the report needs for one module (or the whole hub)."""
    logic = logic_area_n5_mm2(area_um2)
    sram = sram_area_n5_mm2(sram_bits)
    total = Range(logic.low + sram.low, logic.nominal + sram.nominal, logic.high + sram.high)
    fo4s = fo4_count(logic_ns, fo4_ns)
    return {
        "gate_equivalents": area_um2 / GE_UM2_OSU018,
        "fo4": fo4s,
        "logic_mm2": logic, "sram_mm2": sram, "total_mm2": total,
        "h100_pct": Range(*(100 * v / H100_DIE_MM2 for v in (total.low, total.nominal, total.high))),
        "nvswitch_port_pct": Range(*(100 * v / NVSWITCH_PORT_MM2
                                     for v in (total.low, total.nominal, total.high))),
        "cycle_n5_ps": cycle_n5_ps(fo4s),
        "fmax_n5_GHz": fmax_n5_GHz(fo4s),
        "fmax_stillmaker_GHz": STILLMAKER_DELAY_DIV / (logic_ns + FLOP_FO4 * fo4_ns),
    }


def line_rate(lanes: int, chunk_bytes: int, fo4s: float, target_GBps: float = NVLINK4_GBPS) -> dict:
    """Line-rate verdicts against the link's payload bandwidth per direction,
    ``target_GBps`` (default NVLink4's 450 GB/s, FACTS.md; a hub config names its link in
    ``link_GBps``).

    1. At the projected N5 fmax of the unpipelined RTL: lanes x chunk bytes x fmax.
    2. At the H100 clock (1.98 GHz): the bandwidth there, and whether the stage depth
       (FO4 of logic on the critical path) fits one cycle: PASS within the projection's
       own budget (with its wire margin and uncertainty, nominal values), MARGINAL within
       FACTS.md's rule of thumb (<= 26 FO4) but not that budget, FAIL beyond the rule.
       ``pass`` is bandwidth and the rule of thumb.
    """
    f = fmax_n5_GHz(fo4s)
    bw = Range(lanes * chunk_bytes * f.low, lanes * chunk_bytes * f.nominal,
               lanes * chunk_bytes * f.high)         # low = pessimistic
    need_GHz = target_GBps / (lanes * chunk_bytes)
    budget = fo4_budget(H100_CLOCK_GHZ)
    bw_h100 = lanes * chunk_bytes * H100_CLOCK_GHZ
    return {
        "target_GBps": target_GBps,
        "needed_clock_GHz": need_GHz,
        "at_projected_fmax": {
            "GBps": bw, "pass": bw.nominal >= target_GBps,
            "margin_pct": 100 * (bw.nominal / target_GBps - 1),
            "pass_pessimistic": bw.low >= target_GBps,
        },
        "at_h100_clock": {
            "clock_GHz": H100_CLOCK_GHZ, "GBps": bw_h100,
            "bandwidth_pass": bw_h100 >= target_GBps,
            "bandwidth_margin_pct": 100 * (bw_h100 / target_GBps - 1),
            "stage_fo4": fo4s, "budget_fo4": budget, "rule_fo4": STAGE_RULE_FO4,
            "timing": timing_verdict(fo4s),
            "timing_pass": fo4s <= STAGE_RULE_FO4,
            "fo4_margin": budget.nominal - fo4s,
            "rule_margin": STAGE_RULE_FO4 - fo4s,
            "stages_needed": max(1, -(-fo4s // STAGE_RULE_FO4)),
            "pass": bw_h100 >= target_GBps and fo4s <= STAGE_RULE_FO4,
        },
    }
