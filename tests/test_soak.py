"""The soak (verif/soak.py): its traffic is what it claims (fast, no simulator), and the
million-row soak on every default config (slow set, Verilator; seeds recorded in the
README). A short soak through tiny's RTL is in test_sim_verilator.py (slow set: its
Verilator build; the fast set's random layers with bad input through the RTL are tiny's
cocotb regression's)."""
import numpy as np
import pytest

from conftest import needs
from moehub.spec.config import HUB_CONFIGS, load_hub_config
from moehub.spec.formats import V2_REASONS, PacketKind, Reason
from moehub.verif import soak
from moehub.spec.model import Packet
from moehub.verif.player import accept_schedule, prepare

#: the recorded soak: one seed, a million rows per default config
SOAK_SEED, SOAK_ROWS = 1, 1_000_000


def _plans(name, seeds, rows=2000):
    cfg = load_hub_config(name)
    out = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        out.append(soak.plan_layer(cfg, rng, 0, rows))
    return cfg, out


def _ideal_model(cfg, plan):
    """The model fed the plan as a hub that never stalls would take it."""
    acc = accept_schedule(plan.arrivals.tolist(), list(range(plan.packets)), [], cfg.lanes)
    return soak.model_of(cfg, plan, acc), acc


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_tags_are_never_reused_within_a_cycle_of_lanes(name):
    """Between the last packet of a row and the first of the next row on the same
    (source, tag) lie at least ``lanes`` packets: the open-loop player can never put them in
    one cycle (the same-cycle rule would drop the new row's first chunk)."""
    cfg, plans = _plans(name, range(6))
    for plan in plans:
        c = plan.cols
        data = np.flatnonzero((c["kind"] == PacketKind.DATA) & (c["src"] < cfg.sources)
                              & (c["tag"] < cfg.tags_per_source) & (c["chunk"] < cfg.chunks_per_row))
        last, token, reuses = {}, {}, 0
        for i in data.tolist():
            key, tok = (int(c["src"][i]), int(c["tag"][i])), int(c["token"][i])
            if key in token and token[key] != tok:      # a new row on this tag
                reuses += 1
                assert i - last[key] >= cfg.lanes, f"{key} reused {i - last[key]} packets later"
            token[key], last[key] = tok, i
        assert reuses > 0


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_every_row_is_sent_whole_and_every_credit_returns(name):
    """Each row's chunks are all sent (but the last of rows left incomplete on purpose);
    in the model, every row sent whole returns one credit, and rows placed plus rows
    dropped when they opened (by reason) are the rows sent."""
    cfg, plans = _plans(name, range(8), rows=300)
    for plan in plans:
        model, _ = _ideal_model(cfg, plan)
        k = plan.knobs
        # (a row left incomplete is also placed or dropped when it opened)
        row_drops = sum(model.drop_counts[r] for r in (Reason.BAD_EXPERT, Reason.OVERFLOW,
                                                       Reason.POST_EOS))
        assert sum(model.rows) + row_drops == k.rows, k
        assert len(model.credits) + model.drop_counts[Reason.INCOMPLETE] == k.rows, k
        assert model.done, f"layer did not end: {k}"
        ended_by_watchdog = model.drop_counts[Reason.TIMEOUT] == 1
        assert ended_by_watchdog == (k.ending != "eos"), k


@pytest.mark.parametrize("tiny_layers, layers, rows", [
    (16, 5, 100),                                        # the fast set: ~1/4 of the model's work
    pytest.param(40, 16, 400, marks=pytest.mark.slow)])
def test_the_knobs_reach_every_reason_and_boundary(tiny_layers, layers, rows):
    """Over a few layers of each config (``tiny_layers`` of tiny's 400 rows, ``layers`` of
    ``rows`` on the others): every drop reason of the shipped (protocol v1) configs but
    NOT_ARMED (the player never sends before START), a region filled to its last row, and
    every tile size of each config."""
    reasons, filled, tiles = set(), False, {}
    for name in HUB_CONFIGS:
        cfg, plans = _plans(name, range(tiny_layers if name == "tiny" else layers),
                            rows=400 if name == "tiny" else rows)
        tiles[name] = {p.knobs.tile_rows_log2 for p in plans}
        assert tiles[name] == set(soak.tile_sizes_log2(cfg)), name
        for plan in plans:
            model, _ = _ideal_model(cfg, plan)
            reasons |= {r for r in Reason if model.drop_counts[r]}
            filled |= any(n == cfg.max_rows_per_expert for n in model.rows)
    want = set(Reason) - {Reason.NOT_ARMED} - set(V2_REASONS)
    assert reasons == want, sorted(want ^ reasons)
    assert filled, "no layer filled an expert's region"


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_packets_hex_is_the_players_format(name, tmp_path):
    """The vectorised writer gives, byte for byte, the packets.hex that the player's own
    writer (one Packet at a time) gives for the same schedule."""
    cfg, (plan,) = _plans(name, [5], rows=60)
    soak_dir = tmp_path
    soak.write_packets_hex(cfg, plan, soak_dir / "soak.hex")
    cols = [plan.cols[c].tolist() for c in soak.COLUMNS]
    pkts = [(int(a), 0, Packet(*(col[i] for col in cols)))
            for i, a in enumerate(plan.arrivals.tolist())]
    prepare(cfg, pkts, soak_dir / "ref")
    assert (soak_dir / "soak.hex").read_bytes() == (soak_dir / "ref" / "packets.hex").read_bytes()


def test_the_same_seed_draws_the_same_layers():
    cfg = load_hub_config("tiny")
    a, b = (soak.plan_layer(cfg, np.random.default_rng(11), 3, 500) for _ in range(2))
    assert a.knobs == b.knobs and all((a.cols[c] == b.cols[c]).all() for c in soak.COLUMNS)
    c = soak.plan_layer(cfg, np.random.default_rng(12), 3, 500)
    assert not (len(c.arrivals) == len(a.arrivals) and (c.cols["data"] == a.cols["data"]).all())


@pytest.mark.slow
@needs("verilator")
@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_soak_a_million_rows(name):
    """A million random rows with error injection through the RTL, every layer equal to
    the model (verif/soak.py; about 3, 15 and 25 minutes of CPU for tiny, mixtral-8gpu and
    deepseek-v3-8gpu)."""
    rep = soak.run_soak(name, SOAK_ROWS, SOAK_SEED, sim="verilator")
    assert rep.rows >= SOAK_ROWS and rep.layers > 0
    assert set(rep.drops) >= {"OVERFLOW", "DUPLICATE", "PROTOCOL", "BAD_EXPERT", "BAD_SOURCE",
                              "BAD_CHUNK", "POST_EOS", "TIMEOUT"}, rep.drops
