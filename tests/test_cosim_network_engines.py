"""Whole layers come out the same, to the bit, on both network engines: the compiled one
(default) and the numpy reference. Together with tests/test_cosim_network_exact.py (random
networks) this is what lets the speed work leave every number of the co-simulation as it
was (tests/test_cosim_regression.py holds the recorded values)."""
import json

import pytest

from moehub.cosim import network


#: every way the systems build networks: bulk flows, fine-grained dispatch (hub: through
#: the hub port), two-hop (DeepEP normal), tile-wise combines, control traffic
SYSTEMS = ("bulk", "comet", "deepep", "deepep_ll", "hub")


def _stats(monkeypatch, engine, system, model, workload, tokens):
    from moehub.cosim.experiment import load_configs, run_experiment, stats
    monkeypatch.setenv("MOEHUB_NETWORK_ENGINE", engine)
    st = stats(run_experiment(*load_configs(system, model, workload, tokens), systems=SYSTEMS))
    for k in ("wall_s", "wall_s_per_system", "cpu_s", "cpu_s_per_system"):
        st.pop(k, None)
    return json.dumps(st, sort_keys=True, default=float)


@pytest.mark.parametrize("point", [("h100x16-ib", "mixtral-8x7b", "skewed-mmlu", 64),
                                   ("a100x4-pcie", "phi-3.5-moe", "default", 96)])
def test_both_engines_give_the_same_layer(monkeypatch, point):
    compiled = _stats(monkeypatch, "compiled", *point)
    reference = _stats(monkeypatch, "reference", *point)
    assert compiled == reference


def test_the_engine_comparison_sees_a_one_ulp_change(monkeypatch):
    """Not vacuous: port capacities one ulp off (compiled engine only) change the stats."""
    point = ("a100x4-pcie", "phi-3.5-moe", "default", 96)
    reference = _stats(monkeypatch, "reference", *point)
    orig = network.FluidNetwork.__init__

    def off(self, caps, engine=None):
        orig(self, caps, engine)
        if self.engine == "compiled":
            self.caps[:-1] *= 1 + 2 ** -52
    monkeypatch.setattr(network.FluidNetwork, "__init__", off)
    assert _stats(monkeypatch, "compiled", *point) != reference


def test_an_unknown_engine_is_refused_by_name():
    with pytest.raises(ValueError, match="engine = 'fast'"):
        network.FluidNetwork([1.0], engine="fast")
