"""``moehub demo``: generate the hub's Verilog and push one MoE layer's dispatch traffic
for one GPU through it (cocotb + Icarus, or Verilator with ``--sim verilator``), checked
against the reference model.

The run goes to ``demo/<config>[_t<tokens>][_seed<seed>]`` in the build folder (or under
``--out``): every value that changes the result and differs from the default is in the
name. The folder is written whole (summary.json, run.json, waves.fst -- waves.vcd on
Verilator -- with ``--waves``) or
not at all, and an existing one is replaced only with ``force``.
"""
from __future__ import annotations

import json
import shutil
import time

from ..spec.config import HubConfig, load_hub_config
from ..paths import claim, output_dir, writing
from ..argcheck import UsageError, load_config_flag

DEMO_TOKENS = 64
DEMO_SEED = 1


def token_limit(cfg: HubConfig) -> int:
    """Most tokens per source GPU the demo can send through ``cfg``'s hub: token ids must
    not wrap at ``token_bits`` (two rows would share (source, token, slot) and the checker
    would confuse them), and an expert's region must hold every row even if each source
    sends every token to it (a token reaches an expert at most once: distinct top-k
    experts), i.e. ``sources x tokens <= max_rows_per_expert``."""
    return min(1 << cfg.token_bits, cfg.max_rows_per_expert // cfg.sources)


def check_tokens(cfg: HubConfig, tokens: int) -> None:
    limit = token_limit(cfg)
    if not 1 <= tokens <= limit:
        raise UsageError("--tokens", tokens, f"must be 1..{limit} for hub config '{cfg.name}' "
                         f"(token ids have {cfg.token_bits} bits; {cfg.sources} sources x "
                         f"{limit} tokens fill an expert's {cfg.max_rows_per_expert} rows)")


def run_name(cfg: HubConfig, tokens: int, seed: int) -> str:
    return (cfg.name + (f"_t{tokens}" if tokens != DEMO_TOKENS else "")
            + (f"_seed{seed}" if seed != DEMO_SEED else ""))


def run_demo(config: str, seed: int = DEMO_SEED, tokens: int = DEMO_TOKENS,
             waves: bool = False, *, out=None, force: bool = False,
             sim: str | None = None) -> int:
    """Check everything (config, tokens, simulator, results folder) before the simulation,
    run it, and print what the hub did. A failed check of the RTL is an error (exit 1),
    and leaves no results folder behind. ``sim``: "icarus" or "verilator" (default
    ``$MOEHUB_SIM``, else Icarus: a short demo does not repay Verilator's build)."""
    from ..verif.sim import choose
    cfg = load_config_flag("--config", load_hub_config, config)
    check_tokens(cfg, tokens)
    if seed < 0:
        raise UsageError("--seed", seed, "must be an integer >= 0")
    sim = choose(sim, prefer="icarus")      # a bad or missing simulator: before any work
    folder = claim(output_dir("demo", out=out) / run_name(cfg, tokens, seed), force)
    t0 = time.time()
    with writing(folder, force, config=cfg.name, tokens=tokens, seed=seed) as tmp:
        wave = _simulate(cfg, config, seed, tokens, waves, tmp, sim)
    _print(cfg, json.loads((folder / "summary.json").read_text()), folder, time.time() - t0,
           folder / wave if wave else None)
    return 0


def _simulate(cfg: HubConfig, config: str, seed: int, tokens: int, waves: bool, tmp, sim):
    """The cocotb run, writing its summary into ``tmp``; with ``waves`` its waveform is
    moved there too. Returns the waveform's name in ``tmp`` (or None)."""
    from ..verif.cocotb_runner import run_hub_cocotb
    summary = tmp / "summary.json"
    res = run_hub_cocotb(config, ["demo_layer"], module="tb_demo", seed=seed, waves=waves,
                         tag="demo", extra_env={"MOEHUB_TOKENS": str(tokens),
                                                "MOEHUB_SUMMARY": str(summary)},
                         label=f"demo {cfg.name}, {tokens} tokens/GPU", sim=sim)
    if res["failed"] or not summary.exists():
        raise RuntimeError(f"the RTL run or its check against the reference model failed; "
                           f"see {res['results'].parent / 'sim-tb_demo.log'}")
    wave = res.get("waves")
    if not (waves and wave and wave.exists()):
        return None
    shutil.move(str(wave), tmp / f"waves{wave.suffix}")
    return f"waves{wave.suffix}"


def _print(cfg: HubConfig, s: dict, folder, wall: float, wave) -> None:
    print(f"MoE-Hub demo: hub config '{cfg.name}' ({cfg.lanes} lanes x {cfg.chunk_bytes} B, "
          f"{cfg.sources} sources, {cfg.experts} local experts, {cfg.chunks_per_row} chunks/row)")
    print(f"  traffic: {s['tokens_per_source']} tokens per source GPU, top-{cfg.topk} routing, "
          f"{s['rows']} rows ({s['packets']} packets) land on this GPU")
    rows = ", ".join(str(r) for r in s["rows_per_expert"])
    print(f"  rows allocated per expert: [{rows}]   metadata writes: {s['metadata_writes']}   "
          f"credits returned: {s['credits']}")
    print(f"  packets accepted: {s['packets_per_cycle']:.2f} per cycle; last packet at cycle "
          f"{s['last_packet_cycle']}; layer done at cycle {s['layer_done_cycle']}")
    for cyc, idx in s["tile_flags"]:
        e, t = divmod(idx, cfg.tiles_per_expert)
        print(f"  tile ready: expert {e} tile {t} at cycle {cyc}")
    print(f"  drops: {s['drops'] or 'none'}; RTL and reference model agree on every write, "
          f"flag, count and credit")
    print(f"  Verilog: {output_dir('rtl', cfg.name) / 'moehub.v'}; results: {folder} "
          f"(summary.json, run.json); wall time {wall:.1f} s")
    if wave:
        print(f"  waveform: {wave} (GTKWave or Surfer)")
