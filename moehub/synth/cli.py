"""``moehub synth``, ``moehub synth-sweep`` and ``moehub equiv`` sub-commands (registered by
scripts/cli.py). Bad option values are usage errors (exit 2) found before any tool runs;
each flow step (FO4, RTL, Yosys with ABC, OpenSTA) is reported with its elapsed time
(:mod:`moehub.progress`)."""
from __future__ import annotations

import argparse
import sys

from .. import progress
from ..paths import HELP
from ..argcheck import UsageError, float_above, int_at_least, load_config_flag
from ..spec.config import ConfigError
from . import flow, sram


def _data_bits(text: str):
    """argparse type of --data-bits: 'chunk', 'config' or an integer >= 1."""
    if text in ("chunk", "config"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 'chunk', 'config' or an integer >= 1")
    return value


def cmd_synth(args) -> int:
    from .tools import ToolMissing
    changes = _hub_changes(args)
    for name in args.config:        # every config checked before the first (long) run
        cfg = load_config_flag("--config", flow.load_hub_config, name)
        try:
            changed = flow.with_changes(cfg, changes)
        except (ValueError, ConfigError) as e:
            raise UsageError("--set", " ".join(args.set or []), f"{name}: {e}") from None
        from ..rtl.hub import check_rtl
        try:
            check_rtl(changed)
        except ConfigError as e:
            raise UsageError("--set" if changes else "--config", " ".join(args.set or []) or name, str(e)) from None
    kw = {}
    if args.lib != "osu018" and args.target != "asic":
        raise UsageError("--lib", args.lib, "maps onto a cell library: only with --target asic")
    if args.target == "asic":
        kw = {"period_ns": args.clock_ns, "sram_min_bits": args.sram_min_bits,
              "sram_min_depth": args.sram_min_depth, "sta_only": args.sta_only,
              "abc_effort": args.abc_effort}
        if args.lib == "asap7":
            kw.update(lib="asap7", corner=args.corner)
    else:
        kw = {"target_MHz": args.fpga_MHz, "sta_only": args.sta_only}
    status = 0
    for name in args.config:
        try:
            with progress.stage(f"synth {name} ({args.target})", heartbeat=True,
                                level=progress.NORMAL if args.target == "ecp5" else progress.VERBOSE):
                sec = flow.run(name, args.target, out=args.out if len(args.config) == 1 else None,
                               data_bits=args.data_bits, changes=changes, **kw)
        except ToolMissing as e:
            print(f"moehub synth: {args.target} flow unavailable: {e}", file=sys.stderr)
            return 3
        except RuntimeError as e:
            print(f"moehub synth: {name}: {e}", file=sys.stderr)
            status = 1
            continue
        out = flow.out_dir_for(flow.with_changes(flow.load_hub_config(name), changes),
                               args.out if len(args.config) == 1 else None)
        if args.target == "asic" and args.lib == "asap7":
            print(asap7_summary(name, sec, out))
        elif args.target == "asic":
            top = sec["modules"]["top"]
            n5 = top["n5"]
            lr = sec["line_rate"]["at_h100_clock"]
            print(f"{name}: {top['area_um2'] / 1e6:.2f} mm2 OSU018 ({top['gate_equivalents']:.0f} GE, "
                  f"{top['sram_bits']} SRAM bits) -> N5 {n5['total_mm2']['nominal']:.4f} mm2 "
                  f"({n5['h100_pct']['nominal']:.4f} % of H100); fmax {top['fmax_MHz']:.0f} MHz, "
                  f"{top['fo4']:.1f} FO4 ({top['path']['from']} -> {top['path']['to']}); "
                  f"line rate at 1.98 GHz: {lr['timing'] if lr['bandwidth_pass'] else 'FAIL (bandwidth)'}; report {out}/report.md")
        else:
            fmax = f"fmax {sec['fmax_MHz']:.1f} MHz" if sec["fmax_MHz"] else "does not fit the LFE5U-85F"
            print(f"{name}: ECP5 {sec['luts']} LUT4, {sec['flops']} FF, {sec['brams']} DP16KD, "
                  f"{fmax}; report {out}/report.md")
    return status


def asap7_summary(name: str, sec: dict, out) -> str:
    """One line per config of ``moehub synth --lib asap7``."""
    area, lr = sec["area"], sec["line_rate"]
    h = lr["at_h100_clock"]
    fam = sec["deepest"][0] if sec["deepest"] else {"from": "?", "to": "?"}
    links = ", ".join(f"{n} {'PASS' if v['pass'] else 'FAIL'}" for n, v in h["links"].items() if n != "config")
    return (f"{name}: ASAP7 {sec['corner'].upper()} {area['cell_area_um2']:.0f} um2 of cells "
            f"({100 * area['sequential_share']:.0f} % sequential, {area['nand2_eq']:.0f} NAND2 eq., "
            f"{area['sram_bits']} SRAM bits) -> N5 {area['n5_mm2']['nominal']:.4f} mm2; cycle "
            f"{h['cycle_ns']['nominal'] * 1e3:.0f} ps with wires, fmax {lr['fmax_GHz']['nominal']:.2f} GHz, "
            f"deepest {sec['deepest_fo4']:.1f} FO4 ({fam['from']} -> {fam['to']}); at 1.98 GHz: {h['timing']} "
            f"({links}); report {out}/report.md")


def cmd_table(args) -> int:
    """The ASAP7-versus-projection table of the configs' synthesis folders (as
    ``moehub synth`` names them, with ``--set``), on stdout and into ``--md`` if given."""
    from . import asap7_table
    changes = _hub_changes(args)
    folders = {}
    for name in args.config:
        cfg = load_config_flag("--config", flow.load_hub_config, name)
        cfg = flow.synth_config(flow.with_changes(cfg, changes), args.data_bits)
        folders[cfg.name] = flow.out_dir_for(cfg)
    text = asap7_table.table(folders)
    print(text, end="")
    if args.md:
        from pathlib import Path
        Path(args.md).write_text(text)
    return 0


def cmd_sweep(args) -> int:
    from .sweep import run_sweeps, replot
    if args.plot_only:
        return replot(args.base, args.sweep or None, data_bits=args.data_bits, out=args.out,
                      base_changes=_changes(args))
    return run_sweeps(args.base, args.sweep or None, jobs=args.jobs, data_bits=args.data_bits,
                      period_ns=args.clock_ns, out=args.out, base_changes=_changes(args))


def cmd_equiv(args) -> int:
    """Exit 0 when every config is proved, 1 when one is not, 2 on a bad config or revision,
    3 when Yosys is missing. Configs and revision are checked before the first (long) proof."""
    from . import equiv
    from ..spec.config import load_hub_config
    from .tools import ToolMissing
    names = args.config or [equiv.DEFAULT_CONFIG]
    for name in names:
        load_hub_config(name)                 # ConfigError -> exit 2 with the known names
    try:
        equiv.resolve_ref(args.ref)
        equiv.yosys_tool()
    except equiv.EquivError as e:
        print(f"moehub equiv: {e}", file=sys.stderr)
        return 2
    except ToolMissing as e:
        print(f"moehub equiv: {e}", file=sys.stderr)
        return 3
    results = []
    for name in names:
        out = None
        if args.out:
            out = args.out if len(names) == 1 else f"{args.out}/{load_hub_config(name).name}"
        try:
            results.append(equiv.check(name, args.ref, out, match=args.match, induct_seq=args.induct_seq,
                                       bmc_cycles=args.bmc_cycles, echo=len(names) == 1))
        except RuntimeError as e:
            print(f"moehub equiv: {name}: {e}", file=sys.stderr)
            return 1
    if len(names) > 1:
        print(equiv.table(results))
    return 0 if all(r.proved for r in results) else 1


#: the hub config keys ``moehub synth --set`` and ``synth-unit --set`` change: protocol v2's,
#: and the two the co-simulation derives per layer from the system and the model (a
#: two-node layer's hub has 16 sources and its experts per GPU: ``cosim.layer.derive_hub``)
V2_KEYS = ("max_targets", "pool_pages", "count_packets")
SET_KEYS = V2_KEYS + ("sources", "experts")


def _hub_changes(args) -> dict:
    """--set KEY=VALUE of a protocol-v2 key (count_packets as 0/1), sources or experts."""
    changes = _changes(args) or {}
    for key, value in changes.items():
        if key not in SET_KEYS:
            raise UsageError("--set", f"{key}={value}", f"takes {', '.join(SET_KEYS)}")
    if "count_packets" in changes:
        changes["count_packets"] = bool(changes["count_packets"])
    return changes


def _silence(design, seen=None) -> None:
    """``design`` built only to be checked, never elaborated: no UnusedElaboratable
    warning from it or from the parts it built in its constructor."""
    from amaranth.hdl import Elaboratable
    seen = set() if seen is None else seen
    if id(design) in seen:
        return
    seen.add(id(design))
    design._MustUse__silence = True
    for v in vars(design).values():
        for part in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(part, Elaboratable):
                _silence(part, seen)


def unit_config(args):
    """The hub config ``moehub synth-unit`` synthesises its unit for: ``--config``, its
    ``--set`` keys, then the relay config of ``--nodes`` (UsageError naming the flag)."""
    from . import units
    cfg = load_config_flag("--config", flow.load_hub_config, args.config)
    changes = _hub_changes(args)
    try:
        cfg = flow.synth_config(cfg.replace(**changes))
    except (ValueError, ConfigError) as e:
        raise UsageError("--set", " ".join(args.set or []) or "(none)", str(e)) from None
    if args.nodes is not None:
        from ..spec.relay import nodes_config
        try:
            cfg = nodes_config(cfg, args.nodes)
        except (ValueError, ConfigError) as e:
            raise UsageError("--nodes", args.nodes, f"{args.config}: {e}") from None
    try:
        _silence(units.build(args.unit, cfg))                       # (refused early: exit 2)
    except (ValueError, ConfigError) as e:
        if args.unit in units.RELAY_UNITS and not cfg.relay:
            raise UsageError("--nodes", "(none)", str(e)) from None
        raise UsageError("--set", " ".join(args.set or []) or "(none)", str(e)) from None
    return cfg


def cmd_synth_unit(args) -> int:
    from . import units
    from .tools import ToolMissing
    cfg = unit_config(args)
    try:
        r = units.run_unit(args.unit, cfg, args.out, args.clock_ns)
    except ToolMissing as e:
        print(f"moehub synth-unit: ASIC flow unavailable: {e}", file=sys.stderr)
        return 3
    print(f"{r['unit']} ({r['config']}): {r['gate_equivalents']:.0f} GE, {r['flops']} flops, "
          f"{r['sram_bits']} SRAM bits -> N5 {r['n5_mm2']:.5f} mm2; {r['fo4']:.1f} FO4 "
          f"({r['path']}), N5 fmax {r['n5_fmax_GHz']:.2f} GHz; {r['out']}")
    return 0


def _changes(args):
    changes = None
    if args.set is not None:
        changes = {}
        for item in args.set:
            if item == "none":
                continue
            key, _, value = item.partition("=")
            try:
                changes[key] = int(value)
            except ValueError:
                raise UsageError("--set", item, "expected KEY=INTEGER or 'none'") from None
    return changes


def add_parser(sub) -> None:
    s = sub.add_parser("synth", help="synthesise the hub: area, timing, N5 projection, line-rate verdict "
                       "(synth/<config>/report.md in the build folder)")
    s.add_argument("--config", action="append", required=True,
                   help="hub config name or YAML path (repeatable)")
    s.add_argument("--target", choices=flow.TARGETS, default="asic",
                   help="asic: Yosys + OSU018 + OpenSTA (default); ecp5: Yosys + nextpnr-ecp5")
    s.add_argument("--data-bits", default="chunk", type=_data_bits,
                   help="datapath width: 'chunk' = 8 x chunk_bytes (default), 'config', or a number")
    s.add_argument("--lib", choices=("osu018", "asap7"), default="osu018",
                   help="ASIC library: osu018 (default; with the projection to N5) or asap7 (7 nm, "
                        "measured; report section asap7_<corner>, files in <out>/asap7-<corner>/)")
    s.add_argument("--corner", choices=("tt", "ss"), default="tt",
                   help="ASAP7 timing corner (mapped at TT; ss re-times the current TT netlist, mapping it first "
                        "if absent or stale: another config, RTL, clock, SRAM thresholds or ABC effort)")
    s.add_argument("--clock-ns", type=float_above(0), default=None,
                   help=f"ASIC clock constraint and ABC delay target (default {flow.DEFAULT_PERIOD_NS} ns; "
                        "asap7: 1/1.98 GHz, ABC's target the logic that fits it with the wire margin)")
    s.add_argument("--sram-min-bits", type=int_at_least(0), default=sram.SRAM_MIN_BITS,
                   help=f"arrays with at least this many bits become SRAM macros (default {sram.SRAM_MIN_BITS})")
    s.add_argument("--sram-min-depth", type=int_at_least(0), default=sram.SRAM_MIN_DEPTH,
                   help=f"... and at least this many words (default {sram.SRAM_MIN_DEPTH})")
    s.add_argument("--abc-effort", choices=("normal", "high"), default="normal",
                   help="ASIC: 'high' adds &fraig -x and &dch -f to the ABC script (~10x slower on "
                        "the large configs)")
    s.add_argument("--sta-only", action="store_true",
                   help="keep the netlist of the last run in the output folder and redo only timing and "
                        "reports (ecp5: re-read the last run's logs)")
    s.add_argument("--fpga-MHz", type=float_above(0), default=50.0, help="ECP5 nextpnr target frequency")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help=f"change a key of every config ({', '.join(SET_KEYS)}; count_packets 0 or 1): "
                   "the hub with that protocol-v2 feature, or the hub a co-simulated layer derives "
                   "(sources, experts per GPU), in <build>/synth/<config>_<key>-<value>")
    s.add_argument("--out", default=None, help=f"output folder (default <build>/synth/<config>; <build> is {HELP})")
    s.set_defaults(func=cmd_synth)

    t = sub.add_parser("synth-table", help="ASAP7 TT/SS against the OSU018 -> N5 projection, one row per "
                       "config (from the report.json of 'moehub synth' and 'moehub synth --lib asap7')")
    t.add_argument("--config", action="append", required=True, help="hub config name or YAML path (repeatable)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="as moehub synth --set (the variant's folder)")
    t.add_argument("--data-bits", default="chunk", type=_data_bits, help="as moehub synth (default chunk)")
    t.add_argument("--md", default=None, help="also write the table to this file")
    t.set_defaults(func=cmd_table)

    u = sub.add_parser("synth-unit", help="synthesise one RTL unit on its own (protocol v2's page_pool, "
                       "expert_counts, target_decode, multicast_allocator; protocol v3's relay_control, "
                       "forward_unit, forward_check, reduce_unit, reduce_element, reduce_path, relay_input, relay_stage, "
                       "forward_egress, credit_join, partial_stage, partial_feed and the whole relay_hub "
                       "with --nodes N): area, deepest path, "
                       "N5 projection")
    from .units import UNITS
    u.add_argument("unit", choices=sorted(UNITS))
    u.add_argument("--config", default="deepseek-v3-8gpu", help="hub config name or YAML path (default deepseek-v3-8gpu)")
    u.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="keys of the config: pool_pages=N, count_packets=1, max_targets=N, sources=N, "
                   "experts=N (repeatable)")
    u.add_argument("--nodes", type=int_at_least(2), default=None, metavar="N",
                   help="the relay config of N nodes of the config's GPUs, as the co-simulation "
                   "derives a multi-node layer's hub (experts spread over N x sources GPUs, "
                   "multicast, relay: true); the relay units need it; config named "
                   "<config>_nodes-N")
    u.add_argument("--clock-ns", type=float_above(0), default=flow.DEFAULT_PERIOD_NS)
    u.add_argument("--out", default=None, help=f"output folder (default <build>/synth/unit-<unit>-<config>; <build> is {HELP})")
    u.set_defaults(func=cmd_synth_unit)

    w = sub.add_parser("synth-sweep", help="area and fmax against experts, lanes, tags and GPUs "
                       "(CSV + PNG under synth/sweep/ in the build folder)")
    w.add_argument("--base", default="mixtral-8gpu", help="hub config the sweeps vary (default mixtral-8gpu)")
    w.add_argument("--sweep", action="append", choices=("experts", "lanes", "tags", "sources"),
                   help="which sweep (repeatable; default all)")
    w.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="change the base config for every point (repeatable; replaces the default "
                        "chunks_per_row=8 tags_per_source=4; '--set none' keeps the base as is)")
    w.add_argument("--jobs", type=int_at_least(1), default=2, help="parallel synthesis runs (default 2)")
    w.add_argument("--data-bits", type=int_at_least(1), default=32, help="datapath width of the sweep points (default 32)")
    w.add_argument("--clock-ns", type=float_above(0), default=flow.DEFAULT_PERIOD_NS)
    w.add_argument("--out", default=None, help=f"output folder (default <build>/synth/sweep; <build> is {HELP})")
    w.add_argument("--plot-only", action="store_true", help="redraw the figures from the CSV files")
    w.set_defaults(func=cmd_sweep)

    from .equiv import DEFAULT_CONFIG, DEFAULT_REF
    e = sub.add_parser("equiv", help="prove the working tree's hub RTL cycle-exactly equivalent to a git "
                       "revision's (Yosys; build/synth/equiv/<config>/)")
    e.add_argument("config", nargs="*", metavar="CONFIG",
                   help=f"hub config name or YAML path (default {DEFAULT_CONFIG})")
    e.add_argument("--ref", default=DEFAULT_REF, help=f"git revision of the gold design (default {DEFAULT_REF})")
    e.add_argument("--out", default=None, help="output folder (default build/synth/equiv/<config>)")
    e.add_argument("--match", choices=("all", "state"), default="all",
                   help="wires joined by name: 'all' shared names (default), 'state' only ports and "
                        "registers (when a refactor reuses combinational names for other signals)")
    e.add_argument("--induct-seq", type=int_at_least(0), default=None, metavar="N",
                   help="equiv_induct depth for what the register correspondence leaves unproven "
                        "(default 4, skipped above 20k flip-flop bits; 0 = skip)")
    e.add_argument("--bmc-cycles", type=int_at_least(0), default=None, metavar="K",
                   help="cycles from reset of the counterexample search when the proof is incomplete "
                        "(default 4, skipped above 20k flip-flop bits: mixtral-8gpu needs 11 GB; 0 = skip)")
    e.set_defaults(func=cmd_equiv)
