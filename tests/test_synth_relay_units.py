"""``moehub synth-unit --nodes N``: protocol v3's relay units take the relay config of N
nodes of the given config's GPUs, derived exactly as the co-simulation derives its relay
layers' hub (one function, :func:`moehub.spec.relay.nodes_config`); a bad ``--nodes``, or
a relay unit without a relay config, is a usage error naming the option. No synthesis
runs here (the flow's ``run_unit`` is replaced)."""
import dataclasses

import pytest
from amaranth.hdl import Fragment

from moehub.cosim.config import load_model_config, load_system_config, load_workload_config
from moehub.cosim.layer import Layer
from moehub.cosim.systems import hub as H
from moehub.cosim.systems import relay as R
from moehub.cosim.workload import make_routing
from moehub.scripts.cli import main
from moehub.spec.config import load_hub_config
from moehub.spec.relay import nodes_config
from moehub.synth import units

SYSTEMS = {2: "h100x16-ib", 4: "h100x32-ib", 8: "h100x64-ib"}


def cosim_relay_config(nodes: int):
    """The hub config of the co-simulation's relay layer on the H100 system of ``nodes``
    nodes: DeepSeek-V3 with BF16 dispatch rows (the hub config's row size) and 4096 rows
    per source and expert at most (its region size), the relay feature alone."""
    s = load_system_config(SYSTEMS[nodes])
    m = load_model_config("deepseek-v3")
    w = load_workload_config("default").replace(tokens_per_gpu=4096 // s.gpus, dispatch_dtype="bf16")
    L = Layer(s, m, w, make_routing(m, w, s.gpus))
    assert L.nodes == nodes and s.gpus_per_node == 8
    return R.check_layer(L, H.hub_config_v2(L, H.check_features({"relay"})))


@pytest.mark.parametrize("nodes", sorted(SYSTEMS))
def test_nodes_config_is_the_cosim_relay_config(nodes):
    """Every key equal to the co-simulated layer's hub (the name aside): 256 experts spread
    over the GPUs, max_targets = min(experts per GPU, top-k), relay window, forward tags."""
    cosim = cosim_relay_config(nodes)
    derived = nodes_config(load_hub_config("deepseek-v3-8gpu"), nodes)
    assert derived.name == f"deepseek-v3-8gpu_nodes-{nodes}"
    assert dataclasses.replace(cosim, name=derived.name) == derived
    assert (derived.sources, derived.gpus_per_node, derived.experts) == (8 * nodes, 8, 256 // (8 * nodes))
    assert derived.relay and derived.relay_window == (nodes - 1) * derived.tags_per_source


def test_nodes_config_refuses_what_is_no_one_node_config():
    cfg = load_hub_config("deepseek-v3-8gpu")
    for bad in (1, 0, True, 2.0):
        with pytest.raises(ValueError, match=r"nodes = .*integer >= 2"):
            nodes_config(cfg, bad)
    with pytest.raises(ValueError, match="already 2 node"):
        nodes_config(nodes_config(cfg, 2), 2)
    one = nodes_config(cfg, 32)                             # one expert per GPU: plain rows
    assert (one.experts, one.max_targets, one.relay_targets, one.reduce_records) == (1, 1, 8, 31 * 4096)


@pytest.mark.parametrize("unit", units.RELAY_UNITS)
def test_a_relay_unit_refuses_a_config_without_relay(unit):
    with pytest.raises(ValueError, match=rf"unit '{unit}' needs a relay config: .*relay = False"):
        units.build(unit, load_hub_config("deepseek-v3-8gpu"))
    # (elaborated, so it and its parts are used; the whole relay hub on tiny's GPUs: at
    # deepseek's size its elaboration alone is 10 s, and the hub benches cover it)
    base = "tiny" if unit == "relay_hub" else "deepseek-v3-8gpu"
    Fragment.get(units.build(unit, nodes_config(load_hub_config(base), 2)), None)


@pytest.fixture
def no_synthesis(tmp_path, monkeypatch):
    """The flow replaced: the config each run would synthesise, in a list."""
    monkeypatch.setenv("MOEHUB_BUILD", str(tmp_path / "build"))
    runs = []

    def run_unit(unit, cfg, out=None, period_ns=None):
        runs.append((unit, cfg))
        return {"unit": unit, "config": cfg.name, "gate_equivalents": 1.0, "flops": 1,
                "sram_bits": 0, "n5_mm2": 0.0, "fo4": 1.0, "path": "a -> b",
                "n5_fmax_GHz": 9.0, "out": "x"}
    monkeypatch.setattr(units, "run_unit", run_unit)
    return runs


@pytest.mark.parametrize("argv,value,why", [
    (["--nodes", "1"], "'1'", "must be an integer >= 2"),
    (["--nodes", "x"], "'x'", "must be an integer >= 2"),
    (["--nodes", "-2"], "'-2'", "must be an integer >= 2"),
    ([], "'(none)'", "needs a relay config"),
])
def test_a_bad_nodes_value_is_a_usage_error(no_synthesis, capsys, argv, value, why):
    assert main(["synth-unit", "relay_control", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"argument --nodes: {value}: " in err and why in err, err
    assert no_synthesis == []


def test_synth_unit_nodes_synthesises_the_derived_config(no_synthesis, capsys):
    assert main(["synth-unit", "reduce_unit", "--nodes", "4"]) == 0
    [(unit, cfg)] = no_synthesis
    from moehub.synth.flow import synth_config
    assert unit == "reduce_unit" and cfg == nodes_config(synth_config(load_hub_config("deepseek-v3-8gpu")), 4)
    assert "reduce_unit (deepseek-v3-8gpu_nodes-4)" in capsys.readouterr().out


def _meminit(memid: str, width: int, words: int, bit: str = "0") -> list:
    return ['  attribute \\src "x.py:1"', "  cell $meminit_v2 $1", f'    parameter \\MEMID "\\\\{memid}"',
            f"    parameter \\WIDTH {width}", f"    parameter \\WORDS {words}", "    connect \\ADDR {  }",
            f"    connect \\DATA {width * words}'{bit * (width * words)}", f"    connect \\EN {width}'{'1' * width}",
            "  end"]


def test_only_the_zero_contents_of_macro_arrays_are_dropped():
    """The reduce unit's records (nodes << token_bits words, zeros at start) reach Yosys
    without their initial contents -- an SRAM macro has none; a small array (flops) and
    non-zero contents keep theirs, and so does an array of another module."""
    il = "\n".join(["module \\moehub", "  memory width 145 size 4096 \\mem", "  memory width 8 size 16 \\small",
                    "  memory width 16 size 512 \\ones", *_meminit("mem", 145, 4096), *_meminit("small", 8, 16),
                    *_meminit("ones", 16, 512, "1"), "end", "module \\other", "  memory width 8 size 16 \\mem",
                    *_meminit("mem", 8, 16), "end"])
    out = units.drop_macro_init(il)
    assert out.count("$meminit_v2") == 3 and out.count('attribute \\src "x.py:1"') == 3
    assert "145'" not in out and "parameter \\WORDS 4096" not in out
    assert il.replace("\n".join(_meminit("mem", 145, 4096)) + "\n", "") == out


def test_an_array_past_yosys_constant_limit_is_a_macro_without_init():
    """A macro's INIT parameter is depth x width bits, past 2^24 more than Yosys' Verilog
    frontend takes: the reduce unit's records of two nodes (131,072 x 149 bits) are
    declared ``init none``; the hub's arrays keep ``init any``."""
    from moehub.synth import sram
    from moehub.synth.verilog import MemoryArray
    records = MemoryArray("moehub", "mem", 149, 2 << 16)
    pool = MemoryArray("moehub", "returned", 11, 1055)
    assert records.bits > sram.YOSYS_MAX_CONST_BITS >= pool.bits
    lib = sram.memlib([records, pool])
    assert lib.count("init none;") == 1 and lib.count("init any;") == 1
    assert lib.index("init none;") < lib.index("$__MOEHUB_SRAM_1055X11_")
