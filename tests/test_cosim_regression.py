"""The co-simulation's numbers move only when a model change is meant: layers recorded in
tests/data/cosim_reference.json come out the same -- every system's layer time and per-GPU
end times exactly, and the whole statistics (``stats.json`` less its wall times) byte for
byte, by digest. Speed work (the vectorised hub stage, the compiled network engine) must
leave them untouched.

The recording was taken first before the speed work; it was taken again when the passes
that make every phase see every other phase began averaging their background (every
layer time unchanged; the end times of GPUs off the critical path moved to the exact
fixed point: Comet and the fused kernel in the default layer by up to 3.0 and 4.5 %, the
hub on PCIe by 0.09 %) and the papers' kind of baseline joined the systems; and when the
low-latency baseline began playing DeepEP's own mechanisms (two-node DeepEP low-latency
layer 1056.2 -> 934.0 us, nothing else); and when HybridEP joined the systems (its entry
added; the statistics less that entry hash to the digests recorded before, every other
number the same to the bit); and when X-MoE's RBD joined the systems (the same: its entry
added, the statistics less it hash to the digests recorded before). The 32-GPU case
(coalesced drains) joined later, recorded from the code of its day: the relay study's
4- and 8-node rows, recorded earlier, had moved by up to 0.2 % without a test noticing.

Floating-point results can differ in the last bits under another numpy build or CPU; the
recording names its numpy version and machine, and elsewhere the test compares within
1e-9 (relative) and skips the digest. Record again (only when a model change is meant, and
say in the commit which numbers moved and why):

    python tests/test_cosim_regression.py --record [case ...]      # (default: every case)
"""
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data" / "cosim_reference.json"
CASES = {  # name: (system, model, workload, tokens, run_experiment keywords)
    "default": ("h100x8", "mixtral-8x7b", "default", 4096, {}),
    "deepseek-v3-256": ("h100x8", "deepseek-v3", "default", 256, {}),
    "ib16-skewed": ("h100x16-ib", "mixtral-8x7b", "skewed-mmlu", 512, {}),
    "pcie-expert-order": ("a100x4-pcie", "phi-3.5-moe", "default", 512, {"hub_order": "expert"}),
    # above 16 GPUs the networks coalesce their drains (the regime of wide expert
    # parallelism): speed work on the coalesced kernel must leave it untouched too
    "ib32-coalesced": ("h100x32-ib", "deepseek-v3", "default", 128, {}),
}


def measure(name: str) -> dict:
    from moehub.cosim.experiment import load_configs, run_experiment, stats
    system, model, workload, tokens, kw = CASES[name]
    st = stats(run_experiment(*load_configs(system, model, workload, tokens), **kw))
    st.pop("wall_s")
    st.pop("wall_s_per_system")
    st.pop("receive_memory")     # the receive-memory report (no timing): not in the recording
    text = json.dumps(st, indent=1, default=float)
    return {"layer_us": {k: v["layer_us"] for k, v in st["systems"].items()},
            "gpu_end_us": {k: v["gpu_end_us"] for k, v in st["systems"].items()},
            "hub": {k: v for k, v in st["hub"].items() if isinstance(v, (int, float))},
            "stats_sha256": hashlib.sha256(text.encode()).hexdigest()}


def same_build(ref: dict) -> bool:
    return ref["numpy"] == np.__version__ and ref["machine"] == platform.machine()


@pytest.mark.parametrize("name", list(CASES))
def test_layer_is_unchanged_by_the_speed_work(name):
    ref = json.loads(DATA.read_text())
    want, got = ref["cases"][name], measure(name)
    exact = same_build(ref)
    for key in ("layer_us", "gpu_end_us", "hub"):
        for k, v in want[key].items():
            g = got[key][k]
            if exact:
                assert g == v, f"{name}: {key}[{k}] = {g}, recorded {v}"
            else:
                assert np.allclose(g, v, rtol=1e-9, atol=0), f"{name}: {key}[{k}] = {g}, recorded {v}"
    if exact:
        assert got["stats_sha256"] == want["stats_sha256"], \
            f"{name}: stats.json differs from the recording (layer times agree)"


def record(names=None) -> None:
    """Measure ``names`` (default: every case) and write them into the recording, the other
    cases' entries kept as recorded."""
    out = {"recorded_from": "averaged passes, the papers' kind of baseline, DeepEP's own "
                            "low-latency mechanisms, HybridEP, X-MoE RBD; other layer times as "
                            "before the "
                            "speed work",
           "numpy": np.__version__, "machine": platform.machine(),
           "cases": {}}
    if names and DATA.exists():
        out["cases"] = {k: v for k, v in json.loads(DATA.read_text())["cases"].items() if k in CASES}
    out["cases"].update({name: measure(name) for name in (names or CASES)})
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {DATA}")


if __name__ == "__main__" and "--record" in sys.argv:
    record([a for a in sys.argv[sys.argv.index("--record") + 1:] if a in CASES] or None)
