"""``moehub synth-unit``: one RTL unit synthesised on its own, with the hub's ASIC flow.

Protocol v2's units (the page pool, the per-expert counts, the multicast target
decode and allocator) exist, verified
against the reference model, before they join the hub's pipeline; their area and deepest
path are measured here with exactly the hub's flow (Yosys + ABC on OSU 0.18 µm, OpenSTA,
the FO4 normalisation and the N5 projection of :mod:`moehub.synth.project`), the unit
taking the hub's place as the top module. Results go to ``synth/unit-<unit>-<config>/``
in the build folder (``report.json``: the same ``asic`` section as a hub's).

Protocol v3's relay units (:data:`RELAY_UNITS`) take a relay config: ``moehub synth-unit
--nodes N`` derives it from a one-node config as the co-simulation derives its relay
layers' (:func:`moehub.spec.relay.nodes_config`; the config is named ``<config>_nodes-N``).
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

from .. import progress
from ..spec.config import HubConfig
from ..paths import output_dir
from . import asic, blocks, fo4, project, sram, tools, verilog
from .flow import DEFAULT_PERIOD_NS, sdc_header
from .digest import hardware_of, rtlil_digest

#: unit name -> (module, class); each takes the hub config
UNITS = {"page_pool": ("moehub.rtl.paging.pool", "PagePool"),
         "expert_counts": ("moehub.rtl.counts.expert_totals", "ExpertCounts"),
         # multicast rows (max_targets > 1): the A stage's target decode, the T stage's grant
         "target_decode": ("moehub.rtl.target_decode", "TargetDecode"),
         "multicast_prerank": ("moehub.rtl.multicast_allocator", "MulticastPrerank"),
         "multicast_allocator": ("moehub.rtl.multicast_allocator", "MulticastAllocator"),
         # (the hub's: verdicts by the requests ahead, exact under the input admission)
         "multicast_allocator_admitted": ("moehub.rtl.multicast_allocator", "MulticastAllocatorAdmitted"),
         "event_expander": ("moehub.rtl.event_expander", "EventExpander"),
         # (the measured alternatives: no pre-rank stage; and the verdict per target)
         "multicast_allocator_same_cycle": ("moehub.rtl.multicast_allocator", "MulticastAllocatorSameCycle"),
         "multicast_allocator_by_targets": ("moehub.rtl.multicast_allocator", "MulticastAllocatorByTargets"),
         # protocol v3 (relay configs: ``moehub synth-unit --nodes N``): the relay's control
         # path (FIFO, forward unit, forward check, counters), its parts, the reduce's control
         "relay_control": ("moehub.rtl.relay.hub", "RelayControl"),
         "forward_unit": ("moehub.rtl.relay.forward_unit", "ForwardUnit"),
         "forward_check": ("moehub.rtl.relay.forward_check", "ForwardCheck"),
         "reduce_unit": ("moehub.rtl.relay.reduce_unit", "ReduceUnit"),
         # (one element of the reduce's accumulate datapath: data_bits / 16 of them a lane)
         "reduce_element": ("moehub.rtl.relay.accumulate", "ReduceElement"),
         # (the reduce whole: its control, intake and engine, a datapath one element wide)
         "reduce_path": ("moehub.rtl.relay.reduce_path", "ReducePathElement"),
         # (the relay hub's input: every lane's class decode and forward check, in front of
         # the packet manager's input registers)
         "relay_input": ("moehub.rtl.relay.ingress", "RelayIngress"),
         # (the relay side behind it: the staging's chunk bitmaps, the forward egress, the
         # credit join)
         "relay_stage": ("moehub.rtl.relay.stage", "RelayStage"),
         "forward_egress": ("moehub.rtl.relay.egress", "ForwardEgress"),
         "credit_join": ("moehub.rtl.relay.credit_join", "RelayCredits"),
         # (the combine's side in front of the reduce: the partial staging's chunk
         # bitmaps, the feed that reads whole rows back)
         "partial_stage": ("moehub.rtl.relay.stage", "PartialStage"),
         "partial_feed": ("moehub.rtl.relay.partial_feed", "PartialFeed"),
         # (the relay hub whole: MoEHub behind the relay input, the relay and combine
         # sides, the reduce with its datapath data_bits / 16 elements wide)
         "relay_hub": ("moehub.rtl.relay.hub", "RelayHub")}
#: the units of a relay config (``relay: true``, so ``nodes`` >= 2 and ``gpus_per_node``)
RELAY_UNITS = ("relay_control", "forward_unit", "forward_check", "reduce_unit", "reduce_element", "reduce_path",
               "relay_input", "relay_stage", "forward_egress", "credit_join", "partial_stage", "partial_feed",
               "relay_hub")


def build(unit: str, cfg: HubConfig):
    """The unit's component for ``cfg`` (ValueError: unknown unit, or the config lacks the
    unit's feature)."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: unknown (known: {', '.join(UNITS)})")
    if unit in RELAY_UNITS and not cfg.relay:
        raise ValueError(f"unit {unit!r} needs a relay config: hub[{cfg.name}] has relay = "
                         f"{cfg.relay}, nodes = {cfg.nodes} (a relay hub needs relay: true, "
                         "nodes >= 2 and gpus_per_node; moehub synth-unit --nodes N makes one)")
    mod, cls = UNITS[unit]
    return getattr(importlib.import_module(mod), cls)(cfg)


def run_unit(unit: str, cfg: HubConfig, out: Path | str | None = None,
             period_ns: float = DEFAULT_PERIOD_NS) -> dict:
    """Synthesise and time ``unit`` of ``cfg``; returns a summary (GE, area, FO4 and path,
    N5 area and fmax) and writes the report's ``asic`` section in the output folder."""
    design = build(unit, cfg)
    missing = tools.asic_tools_missing()
    if missing:
        raise tools.ToolMissing(missing)
    out_dir = Path(out) if out is not None else output_dir("synth", f"unit-{unit}-{cfg.name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    label = f"synth-unit {unit} ({cfg.name})"
    with progress.stage(f"{label}: FO4 delay of the library (OpenSTA)", heartbeat=True):
        fo4_ns = fo4.measure(out_dir / "fo4")
    with progress.stage(f"{label}: RTL (Amaranth -> Verilog)", heartbeat=True):
        v = verilog.write_verilog(cfg, out_dir, design, il_filter=drop_macro_init)
        # (the sources as the RTL was written: an edit during the run is not its; and the
        # digest of the RTLIL it synthesises, which a later edit that moves no gate keeps)
        hw = {**hardware_of(cfg), "rtlil_sha256": rtlil_digest(v.with_suffix(".il").read_text())}
    mems = verilog.find_memories(v.read_text())
    macros = sram.select_macros(mems, sram.SRAM_MIN_BITS, sram.SRAM_MIN_DEPTH)
    res = asic.run(out_dir, v, mems, macros, fo4_ns, period_ns, sdc_header=sdc_header(cfg), label=label)
    area, timing = res["areas"]["__total__"], res["timing"][asic.TOP]
    sram_bits = blocks.macro_bits(area.macros)
    proj = project.project(area.area_um2, sram_bits, timing.logic_ns, fo4_ns)
    summary = {"unit": unit, "config": cfg.name, "gate_equivalents": proj["gate_equivalents"],
               "flops": area.flops, "sram_bits": sram_bits, "area_um2": area.area_um2,
               "fo4": proj["fo4"], "fmax_MHz": timing.fmax_MHz,
               "path": f"{timing.start_reg or timing.startpoint} -> {timing.end_reg or timing.endpoint}",
               "n5_mm2": proj["total_mm2"].nominal, "n5_fmax_GHz": proj["fmax_n5_GHz"].nominal,
               "out": str(out_dir)}
    write_summary(out_dir, summary, cfg, hw)
    return summary


_MEMORY = re.compile(r"\s*memory width (\d+) size (\d+) (\S+)")
_MEMID = re.compile(r'\s*parameter \\MEMID "(.*)"')
_DATA = re.compile(r"\s*connect \\DATA \d+'([01xz]*)$")


def drop_macro_init(il: str) -> str:
    """``il`` (RTLIL) without the all-zero initial contents (``$meminit_v2`` cells) of the
    arrays that become SRAM macros (:func:`moehub.synth.sram.select_macros`): a macro has
    no initial contents (the flow's macro map drops them), and an array of a million
    words (the reduce unit's records: ``nodes << token_bits`` words) carries one constant
    of that many bits through both Yosys runs, for minutes and gigabytes. Other arrays,
    and initial contents other than zeros, are kept."""
    lines = il.split("\n")
    sizes, out, i, module = {}, [], 0, None
    while i < len(lines):
        line = lines[i]
        if line.startswith("module "):
            module = line.split()[1]
        m = _MEMORY.match(line)
        if m:
            sizes[module, m[3]] = (int(m[1]), int(m[2]))
        if line.lstrip().startswith("cell $meminit_v2 "):
            end = next(j for j in range(i, len(lines)) if lines[j].strip() == "end")
            block = lines[i:end + 1]
            ids = [_MEMID.match(b) for b in block]
            data = [_DATA.match(b) for b in block]
            memid = next((x[1].replace("\\\\", "\\") for x in ids if x), None)
            zeros = [d[1] for d in data if d]
            size = sizes.get((module, memid))
            if size and zeros and set(zeros[0]) <= {"0"} and sram.select_macros(
                    [verilog.MemoryArray(module, memid, *size)]):
                while out and out[-1].lstrip().startswith("attribute "):
                    out.pop()                     # (the cell's own attributes)
                i = end + 1
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


#: the file of a unit's run (``moehub report --collect synth-unit`` reads it)
def unit_rtlil_digest(unit: str, cfg: HubConfig | dict) -> str:
    """:func:`~moehub.synth.digest.rtlil_digest` of the working tree's ``unit`` for
    ``cfg`` (a config, or its fields as a record holds them), as :func:`run_unit`
    synthesises it: what ``moehub report --recheck`` compares a unit's row by."""
    if isinstance(cfg, dict):
        cfg = HubConfig(**cfg)
    return rtlil_digest(drop_macro_init(verilog.hub_rtlil(cfg, build(unit, cfg))))


SUMMARY_JSON = "unit.json"
#: the config keys a unit's row names (the features the units serve)
FEATURE_KEYS = ("pool_pages", "max_targets", "count_packets", "sources", "experts",
                "nodes", "gpus_per_node", "relay", "forward_tags", "relay_window", "topk",
                "token_bits")


def write_summary(out_dir: Path, summary: dict, cfg: HubConfig, hw: dict) -> Path:
    """``unit.json``: the summary, the config's feature keys, the hub config and the RTL
    sources' hash as the run wrote its RTL (``hw``: :func:`~.digest.hardware_of` then, and
    the digest of the RTLIL it wrote: what ``moehub report --recheck`` checks the row by,
    against the unit's RTLIL for that config) and the run's record (command, commit, date,
    machine, load)."""
    import json
    from .. import runinfo
    doc = {**summary, "features": {k: getattr(cfg, k) for k in FEATURE_KEYS},
           **hw, "record": runinfo.record()}
    path = Path(out_dir) / SUMMARY_JSON
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path
