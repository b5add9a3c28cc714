"""The recorded GPU measurements load, are self-consistent, and the model is evaluated on
the same inputs (cosim/gpu_measured.py)."""
import pytest

from moehub.cosim.config import load_system_config
from moehub.cosim import gpu_measured as gm
from moehub.cosim.components import Components


@pytest.fixture(scope="module")
def recs():
    runs = gm.runs("h200")
    assert len(runs) >= 2, "the H200 runs are recorded in cosim/data/gpu_measured"
    return [gm.load(r) for r in runs]


def test_records_have_every_reading_the_comparison_reads(recs):
    kinds = set()
    for rec in recs:
        for _, key, _ in gm.LAUNCH_MAP:
            assert rec["launch"][key] > 0
        assert not rec["gemm"]["errors"]
        kinds |= {r["kind"] for r in rec["gemm"]["rows"]}
    assert {"dense_bf16", "grouped_bf16", "dense_fp8_rowwise", "grouped_fp8_rowwise"} <= kinds


def test_gemm_rows_are_self_consistent(recs):
    """TFLOP/s in a row is 2 G M N K / time: a row whose fields were mixed up fails."""
    for row in recs[0]["gemm"]["rows"]:
        flops = 2.0 * row["groups"] * row["m"] * row["n"] * row["k"]
        assert flops / row["us"] / 1e6 == pytest.approx(row["tflops"], rel=0.01, abs=0.01)


def test_model_gemm_reads_fp8_operands_as_one_byte():
    """A weight-bound decode GEMM: FP8 moves half the bytes, so the model's time (past its
    fixed ramp) halves against BF16."""
    c = Components(load_system_config("h200x8"))
    row = {"kind": "dense_bf16", "m": 16, "groups": 1, "n": 4096, "k": 7168}
    fixed = c.sw.gemm_fixed_us
    bf16 = gm.model_gemm_us(c, row) - fixed
    fp8 = gm.model_gemm_us(c, {**row, "kind": "dense_fp8_rowwise"}) - fixed
    assert fp8 == pytest.approx(bf16 / 2, rel=0.02)


def test_comparison_table_names_every_constant_and_kind(recs):
    text = gm.markdown("h200x8", "h200")
    for const, _, _ in gm.LAUNCH_MAP:
        assert f"`{const}`" in text
    rows = [r for rec in recs for r in gm.gemm_comparison(rec)]
    assert all(r["ratio"] > 0 for r in rows)
    regimes = {(s["kind"], s["regime"]) for s in gm.summary(rows)}
    assert len(regimes) == 8
