"""``moehub study gps``: duplication, replica choice, predictions, error models, the cost
model against the co-simulation, the command line and a small end-to-end run."""
import numpy as np
import pytest

from moehub.cosim.config import load_model_config, load_system_config
from moehub.cosim.studies import gps_place as P
from moehub.cosim.studies import gps_predict as R
from moehub.cosim.studies import gps_study as S
from moehub.cosim.studies.gps_drift import crosscheck
from moehub.cosim.workload import sample_routing
from moehub.scripts.cli import main

MIXTRAL = load_model_config("mixtral-8x7b")
PCIE = load_system_config("a100x4-pcie")


def _settings(**kw):
    base = dict(model=MIXTRAL, systems=(PCIE,), tokens=(64,), skews=(1.39,), batches=1)
    return S.Settings(**{**base, **kw})


def _routing(skew=2.0, tokens=64, seed=3, gpus=4):
    rng = np.random.default_rng(seed)
    logp = -2.0 * skew * np.log(np.arange(1, 9)) / 3
    return sample_routing(MIXTRAL, rng.permutation(logp), gpus, tokens, rng)


# ---------------------------------------------------------------------------- duplication
def test_greedy_hand_case_balances_by_copying_the_hot_expert():
    """Loads 10,2,2,2 on 4 GPUs: expert 0 is copied to the three cold GPUs, each load 4."""
    pl = P.greedy_duplicate(np.array([10.0, 2, 2, 2]), 4, max_extra=1)
    assert pl.gpu_load().tolist() == [4, 4, 4, 4]
    assert pl.share[0].tolist() == [4, 2, 2, 2]
    assert pl.held[0].all() and pl.extra().sum() == 3 and pl.iterations == 3


def test_greedy_without_a_free_slot_or_within_one_row_moves_nothing():
    pl = P.greedy_duplicate(np.array([10.0, 2]), 2, max_extra=0)
    assert pl.iterations == 0 and pl.gpu_load().tolist() == [10, 2]
    assert P.greedy_duplicate(np.array([3.0, 2.0]), 2).iterations == 0     # balanced
    assert P.greedy_duplicate(np.array([3.0, 1.8]), 2).iterations == 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("E,G", [(8, 4), (8, 8), (16, 4)])
def test_greedy_terminates_conserves_and_bounds_the_imbalance(seed, E, G):
    rng = np.random.default_rng(seed)
    load = rng.pareto(1.2, E) * 100 + 1
    free = P.greedy_duplicate(load, G, max_extra=E)          # no memory limit
    assert free.iterations < 64 * E * G                        # stopped by itself
    np.testing.assert_allclose(free.share.sum(axis=1), load)   # every row still planned
    gl = free.gpu_load()
    assert gl.max() - gl.min() <= 1.0 + 1e-9                   # balanced within one row
    assert gl.max() / gl.mean() <= 1.0 + 1.0 / gl.mean() + 1e-9
    one = P.greedy_duplicate(load, G, max_extra=1)
    before = P.home_placement(load, G).gpu_load()
    assert one.gpu_load().max() <= before.max() + 1e-9
    assert one.extra().sum(axis=0).max() <= 1                   # one copy per GPU at most
    assert not (one.share < -1e-9).any()


def test_min_new_refuses_small_copies_and_keep_prefers_existing_replicas():
    load = np.array([10.0, 2, 2, 2])
    assert P.greedy_duplicate(load, 4, min_new=5).extra().sum() == 0
    keep = np.zeros((4, 4), dtype=bool)
    keep[0, 3] = True                                           # expert 0 already on GPU 3
    pl = P.greedy_duplicate(np.array([10.0, 2, 2, 2.1]), 4, max_extra=1, keep=keep)
    first = P.greedy_duplicate(np.array([10.0, 2, 2, 2.1]), 4, max_extra=1, max_iter=1,
                               keep=keep)
    assert first.held[0, 3] and not first.held[0, 1]            # 2.1 is within the margin
    assert pl.held[0, 3]


# ---------------------------------------------------------------------------- replica choice
def test_static_split_follows_the_planned_shares_per_source():
    src = np.zeros(10, dtype=int)
    exp = np.zeros(10, dtype=np.int64)
    w = np.array([[0.7, 0.0, 0.3]])
    dest = P.static_rows(src, exp, w)
    assert np.bincount(dest, minlength=3).tolist() == [7, 0, 3]


def test_waterfill_hand_case():
    out = P.waterfill(np.array([0.0, 2.0]), np.array([4, 1, 0]))
    assert out.tolist() == [[3, 1], [1, 0], [0, 0]]


@pytest.mark.parametrize("window", [8, 64, 1024])
def test_replica_choice_only_uses_gpus_with_a_replica_and_loses_no_row(window):
    r = _routing(skew=2.5)
    pl = P.greedy_duplicate(r.load().astype(float), 4, max_extra=1)
    assert pl.extra().any()
    counts = np.zeros((4, 8), dtype=int)
    np.add.at(counts, (np.repeat(np.arange(4), 64 * 2), r.experts.reshape(-1)), 1)
    for flow in (P.static_flows(r.experts, pl), P.hub_flows(r.experts, pl, window)):
        assert not flow[:, ~pl.held].any()                      # never to a GPU without it
        assert (flow.sum(axis=2) == counts).all()               # every row, once
        assert (flow >= 0).all()


def test_hub_choice_balances_better_than_its_view_is_stale():
    """A fresh view (window of one row per source) spreads the hot expert; the rows of
    every GPU end within a few rows of each other when replicas can absorb them."""
    r = _routing(skew=2.5, tokens=512)
    pl = P.greedy_duplicate(r.load().astype(float), 4, max_extra=4)
    fresh = P.hub_flows(r.experts, pl, 8).sum(axis=(0, 1))
    assert fresh.max() / fresh.mean() < 1.03


# ---------------------------------------------------------------------------- realized mode
def test_t2e_flows_conserve_tokens_and_count_wasted_rows():
    r = _routing()
    rng = np.random.default_rng(0)
    p = r.load() / r.load().sum()
    pred = R.predict_rows(r.experts, 0.8, p, rng)
    pl = P.greedy_duplicate(np.bincount(pred.reshape(-1), minlength=8).astype(float), 4)
    pre, post, wasted = S.t2e_flows(r.experts, pred, pl)
    counts = np.zeros((4, 8), dtype=int)
    np.add.at(counts, (np.repeat(np.arange(4), 64 * 2), r.experts.reshape(-1)), 1)
    assert ((pre + post).sum(axis=2) == counts).all()
    assert wasted.sum() == (pred != r.experts).sum() == post.sum()
    assert not (pre + post)[:, ~pl.held].any()


def test_predictions_have_the_accuracy_and_never_repeat_an_expert():
    r = _routing(tokens=2048)
    p = r.load() / r.load().sum()
    pred = R.predict_rows(r.experts, 0.7, p, np.random.default_rng(1))
    assert abs((pred == r.experts).mean() - 0.7) < 0.02
    g, t, j = np.nonzero(pred != r.experts)
    assert len(g) and not (pred[g, t, j][:, None] == r.experts[g, t]).any(axis=1).any()


def test_cells_are_reproducible_from_the_seed():
    a, b = S.Cell(_settings(), PCIE, 64, 1.39), S.Cell(_settings(), PCIE, 64, 1.39)
    c = S.Cell(_settings(seed=2), PCIE, 64, 1.39)
    assert all((x.experts == y.experts).all() for x, y in zip(a.routings, b.routings))
    assert (a.p_do == b.p_do).all()
    assert not (a.routings[0].experts == c.routings[0].experts).all()


def test_realized_rows_carry_every_strategy_and_mode():
    rows = S.run_cell(S.Cell(_settings(accuracies=(0.7, 0.9)), PCIE, 64, 1.39))
    got = {(r["strategy"], r["mode"]) for r in rows}
    for s in S.STRATEGIES:
        assert (s, "realized") in got and (s, "realized-hidden") in got
    for s in S.SCALAR_STRATEGIES:
        assert all((s, m) in got for m in R.ERROR_MODELS)
    for mode in S.MODES:
        assert sum(r["best"] for r in rows if r["strategy"] == "token-to-expert"
                   and r["mode"] == mode) == 1


# ---------------------------------------------------------------------------- error models
def test_error_rate_and_bottleneck_factors_by_hand():
    assert R.error_rate([0.5, 0.5], [0.75, 0.25]) == pytest.approx(0.5)
    assert R.error_rate([1, 1, 1, 1], [1, 1, 1, 1]) == 0.0
    assert R.bottleneck_factor("optimistic", 0.1, 4) == 1.0
    assert R.bottleneck_factor("typical", 0.1, 4) == pytest.approx(1.1)
    assert R.bottleneck_factor("pessimistic", 0.1, 4) == pytest.approx(1.3)
    with pytest.raises(ValueError):
        R.bottleneck_factor("nope", 0.1, 4)


@pytest.mark.parametrize("eps", [0.0, 0.018, 0.16])
def test_perturb_hits_the_error_rate(eps):
    p = np.array([0.3, 0.2, 0.2, 0.1, 0.1, 0.05, 0.03, 0.02])
    q = R.perturb(p, eps, np.random.default_rng(5))
    assert q.sum() == pytest.approx(1.0) and (q > 0).all()
    assert R.error_rate(q, p) == pytest.approx(eps, abs=1e-6)


def test_scalar_typical_applies_one_plus_eps_to_the_bottleneck():
    """(at 2048 tokens per GPU the experts are compute bound, so more rows take longer;
    at 64 they stream weights and the time does not move)"""
    cell = S.Cell(_settings(), PCIE, 2048, 1.39, batches=0)
    opt = S.scalar(cell, "dist-only", "optimistic", 0.1)
    typ = S.scalar(cell, "dist-only", "typical", 0.1)
    pes = S.scalar(cell, "dist-only", "pessimistic", 0.1)
    assert typ.max_mean_rows == pytest.approx(opt.max_mean_rows * 1.1, rel=1e-6)
    assert pes.max_mean_rows == pytest.approx(opt.max_mean_rows * 1.3, rel=1e-6)
    assert opt.total_us < typ.total_us < pes.total_us


def test_ema_moves_toward_the_counts():
    assert R.ema(np.array([0.5, 0.5]), np.array([30, 10]), 0.5).tolist() == [0.625, 0.375]


def test_predictor_overhead_grows_with_accuracy():
    cell = S.Cell(_settings(), PCIE, 64, 1.39, batches=0)
    t = [R.Predictor().time_us(cell.cost.gpu, 512, a) for a in (0.6, 0.8, 0.99)]
    assert t[0] < t[1] < t[2]


# ---------------------------------------------------------------------------- cost model
def test_cost_model_tracks_the_cosimulations_bulk_layer():
    cell = S.Cell(_settings(), PCIE, 64, 2.5)
    for row in crosscheck(cell):
        assert 0.8 < row["ratio"] < 1.3, row


def test_weight_copies_cost_only_when_exposed():
    cell = S.Cell(_settings(), PCIE, 64, 1.39, batches=0)
    flow = cell.expected_flow(cell.p, cell.plan(cell.p))
    hidden = cell.cost.layer(flow, copies=[(0, 1)], home=cell.home, copy="hidden")
    exposed = cell.cost.layer(flow, copies=[(0, 1)], home=cell.home, copy="exposed")
    # 352 MB of Mixtral expert weights over 32 GB/s PCIe: ~14 ms, far beyond attention
    assert exposed.total_us - hidden.total_us > 10_000


# ---------------------------------------------------------------------------- command line
@pytest.mark.parametrize("args,flag", [
    (["--tokens", "0"], "--tokens"), (["--tokens", "x"], "--tokens"),
    (["--skew", "0.5"], "--skew"), (["--skew", "4"], "--skew"),
    (["--epsilon", "1.5"], "--epsilon"), (["--batches", "0"], "--batches"),
    (["--seed", "-1"], "--seed"), (["--slots", "0"], "--slots"),
    (["--system", "no-such-system"], "--system"), (["--model", "no-such"], "--model")])
def test_bad_values_exit_2_naming_the_option(args, flag, tmp_path, capsys):
    assert main(["study", "gps", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert flag in err
    assert not any(tmp_path.iterdir())


def test_small_run_writes_its_files_and_refuses_to_overwrite(tmp_path, capsys):
    args = ["study", "gps", "--system", "a100x4-pcie", "--tokens", "64", "--skew", "1.39",
            "--batches", "1", "--seed", "7", "--out", str(tmp_path)]
    assert main(["-q", *args]) == 0
    out = capsys.readouterr().out
    assert "seed 7" in out
    folder = tmp_path / "study-gps_sa100x4-pcie_t64_k1.39_b1_seed7"
    names = {p.name for p in folder.iterdir()}
    for stem in ("guideline_map", "t2e_accuracy", "drift"):
        assert {f"{stem}.png", f"{stem}.svg"} <= names
    assert {f"{n}.csv" for n in ("cells", "guideline", "errors", "hub", "duplication",
                                 "t2e_accuracy", "drift", "crosscheck", "paper")} <= names
    assert "run.json" in names
    assert main(["-q", *args]) == 2                  # exists: refused without --force
    assert "--force" in capsys.readouterr().err
