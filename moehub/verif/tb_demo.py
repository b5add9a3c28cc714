"""cocotb demo: one MoE layer's dispatch traffic into one GPU's hub (``moehub demo``).

Routes ``MOEHUB_TOKENS`` tokens per source GPU top-k over all experts, sends the rows that
land on GPU 0 through the hub's Verilog, checks everything against the reference model,
and writes a summary JSON (``MOEHUB_SUMMARY``) that scripts/demo.py prints. Progress for
``moehub demo``: ``<cycle> <packets accepted> <packets>`` lines appended to
``MOEHUB_PROGRESS`` (followed by verif/cocotb_runner.py; the simulator's stdout goes to a log).
"""
import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from moehub.spec.config import load_hub_config
from moehub.spec.formats import CtlKind, Reason
from moehub.verif.tb.env import HubTB
from moehub.verif.traffic import LaneFeeder, moe_routing, routed_rows

CFG = load_hub_config(os.environ.get("MOEHUB_CONFIG", "mixtral-8gpu"))


async def report_progress(tb, start: int, total: int, every: int = 256):
    """Append progress lines every ``every`` cycles (runs until the test ends)."""
    path = os.environ.get("MOEHUB_PROGRESS")
    if not path:
        return
    with open(path, "a") as f:
        while True:
            await ClockCycles(tb.dut.clk, every)
            f.write(f"{tb.now() - start} {len(tb.accepted)} {total}\n")
            f.flush()


@cocotb.test(timeout_time=1, timeout_unit="sec")
async def demo_layer(dut):
    seed = int(os.environ.get("MOEHUB_SEED", "1"))
    tokens = int(os.environ.get("MOEHUB_TOKENS", "16"))
    rng = random.Random(seed)
    routing = moe_routing(CFG, tokens, rng)
    rows = routed_rows(CFG, routing, rng)
    tb = HubTB(dut, CFG, seed, bp=0.0)
    await tb.start()
    await tb.configure(tile_rows=CFG.min_tile_rows, epoch=1)
    await tb.start_layer()
    start = tb.now()
    total = len(rows) * CFG.chunks_per_row + CFG.sources       # data packets + EOS
    cocotb.start_soon(report_progress(tb, start, total))
    tb.feed(LaneFeeder(CFG, rows, rng, idle=0.1, early_eos=True), credit_delay=20)
    await tb.wait_idle()
    model = await tb.check()
    tb.check_invariants(model, rows)
    data = [c for c, _, p in tb.accepted if p.kind == 0]
    flags = [(cyc, c) for cyc, c in tb.ctl_out if c.kind == CtlKind.FLAG]
    summary = {
        "config": CFG.name, "seed": seed, "tokens_per_source": tokens, "sources": CFG.sources,
        "rows": len(rows), "rows_per_expert": model.rows, "packets": len(data),
        "first_packet_cycle": data[0] - start if data else None,
        "last_packet_cycle": data[-1] - start if data else None,
        "layer_done_cycle": (tb.layer_done_cycles[-1] - start) if tb.layer_done_cycles else None,
        "packets_per_cycle": len(data) / (data[-1] - data[0] + 1) if data else 0,
        "tile_flags": [(cyc - start, (c.addr - model.layer_flag_base) // 4) for cyc, c in flags],
        "metadata_writes": sum(1 for _, c in tb.ctl_out if c.kind == CtlKind.META),
        "credits": len(tb.credit_out),
        "drops": {r.name: model.drop_counts[r] for r in Reason if model.drop_counts[r]},
        "model_agrees": True,
    }
    out = os.environ.get("MOEHUB_SUMMARY")
    if out:
        with open(out, "w") as f:
            json.dump(summary, f, indent=2)
