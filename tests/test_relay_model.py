"""Protocol v3's contract and reference model (moehub/spec/relay.py): the relay config keys,
the row formats, the relay hub's forwarding (every accepted row's targets written exactly
once in the node or the row counted as a drop, nothing forwarded twice, bad rows dropped
and counted), the credit argument (a node of relay hubs drains under any schedule with
one forward tag per pair; the blocking variant the docstring rules out deadlocks) and the
reduce-on-combine against numpy.
"""
import random
from collections import deque

import numpy as np
import pytest

from moehub.spec.config import HUB_CONFIGS, ConfigError, load_hub_config
from moehub.spec.csr_map import CsrMap, relay_registers
from moehub.spec.formats import ReduceReason, RelayFormats, RelayReason
from moehub.spec.relay import (ForwardRow, RelayHubModel, RelayRow, ReduceModel, accumulator_bytes,
                               REDUCE_TOKENS, audit, bf16_bits, bf16_value, global_gpu, record_bytes,
                               record_table_bits, reduce_hbm_bytes, relay_config, software_reduce_bytes,
                               to_bf16)

TINY = load_hub_config("tiny")
#: 2 nodes x 4 GPUs, 3 experts per GPU, top-3 (a row may name all 3 of a GPU), 1 forward tag
R2 = TINY.replace(sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3, max_targets=3)
#: 4 nodes x 2 GPUs, 2 forward tags
R4 = TINY.replace(sources=8, nodes=4, gpus_per_node=2, relay=True, forward_tags=2, topk=3, max_targets=3)


# ------------------------------------------------------------------ config and formats
@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_existing_configs_have_no_relay(name):
    """New keys default off: every shipped config is one node, no relay, no relay registers."""
    cfg = load_hub_config(name)
    assert (cfg.nodes, cfg.gpus_per_node, cfg.relay, cfg.forward_tags) == (1, 0, False, 0)
    assert cfg.node_gpus == cfg.sources
    assert not {r.name for r in relay_registers(R2)} & set(CsrMap(cfg, strict=False).registers)


@pytest.mark.parametrize("changes,key,text", [
    (dict(relay=True), "relay", "needs >= 2 nodes"),
    (dict(nodes=2), "nodes", "needs gpus_per_node"),
    (dict(nodes=2, gpus_per_node=2), "gpus_per_node", "must equal sources (3)"),
    (dict(nodes=0), "nodes", "must be >= 1"),
    (dict(gpus_per_node=-1), "gpus_per_node", "must be >= 0"),
    (dict(forward_tags=1), "forward_tags", "only with relay: true"),
    (dict(sources=4, nodes=2, gpus_per_node=2, relay=True, forward_tags=1), "max_targets",
     "must be min(experts, topk) = 2"),
    (dict(sources=4, nodes=2, gpus_per_node=2, relay=True, max_targets=2), "forward_tags", "needs >= 1"),
    (dict(sources=4, nodes=2, gpus_per_node=2, relay="yes"), "relay", "must be true or false"),
    (dict(reduce_tokens=64), "reduce_tokens", "only with relay: true"),
    (dict(sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3, max_targets=3,
          reduce_tokens=48), "reduce_tokens", "a power of two <= 2**token_bits = 256"),
    (dict(sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3, max_targets=3,
          reduce_tokens=512), "reduce_tokens", "a power of two"),
])
def test_relay_config_errors_name_key_and_value(changes, key, text):
    with pytest.raises(ConfigError) as e:
        TINY.replace(**changes)
    msg = str(e.value)
    assert f".{key} = {changes.get(key, getattr(TINY, key))!r}" in msg and text in msg, msg


def test_relay_derived_and_registers():
    assert (R2.node_gpus, R2.relay_window, R2.relay_targets, R2.gpu_bits, R2.node_bits) == (4, 3, 3, 3, 2)
    assert R4.relay_window == 9
    cmap, plain = CsrMap(R2), CsrMap(R2.replace(relay=False, forward_tags=0))
    assert cmap["FWD_ROWS"].count == 4 and cmap["RELAY_DROPS"].count == len(RelayReason)
    assert cmap["FWD_ROWS"].array and cmap["RELAY_DROPS"].array
    # appended after the v2 registers: every register of the plain hub keeps its address
    for name, r in plain.registers.items():
        assert cmap[name].offset == r.offset
    assert cmap["NODE_ID"].offset == plain.size_words
    assert "MOEHUB_RELAY_DROPS_COUNT 3u" in cmap.to_c_header()


def test_relay_formats_round_trip():
    f = RelayFormats(R2)
    vals = dict(cls=1, src_node=1, src_rank=3, tag=2, token=200, valid0=1, gpu0=3, expert0=2, slot0=1,
                weight0=bf16_bits(0.375), valid2=1, gpu2=0, expert2=1, slot2=2, chunk=15, data=0xBEEF)
    assert f.relay_row.unpack(f.relay_row.pack(**vals)) == {**dict.fromkeys(f.relay_row.widths, 0), **vals}
    assert f.relay_row.widths["gpu0"] == R2.gpu_bits and f.relay_row.widths["weight1"] == 16
    assert sum(k.startswith("valid") for k in f.forward_row.widths) == R2.max_targets
    assert f.forward_row.widths["ftag"] == 1 and "src_rank" in f.forward_row.widths
    with pytest.raises(ValueError, match="relay: true"):
        RelayFormats(TINY)


def test_bf16():
    assert bf16_bits(1.0) == 0x3F80 and bf16_value(0x3F80) == 1.0
    assert bf16_bits(1.0 + 2 ** -8) == 0x3F80            # tie -> even
    assert bf16_bits(1.0 + 3 * 2 ** -9) == 0x3F81         # above half -> up
    v = np.array([1.0, 1 + 2 ** -8, -2.5, 3e-3], np.float32)
    assert list(to_bf16(v)) == [float(bf16_value(bf16_bits(x))) for x in v]


# ------------------------------------------------------------------ directed rows
def _row(src_node=1, src_rank=0, tag=0, token=5, targets=((0, 0, 0, 0.5),)):
    return RelayRow(src_node, src_rank, tag, token, tuple(targets))


def test_relay_row_split_local_and_forwards():
    """Targets on 3 GPUs of the node: the relay's own written here, one forward per other
    GPU in ascending rank with the original source and token; the credit with the last."""
    h = RelayHubModel(R2, node=0, rank=1)
    row = _row(src_rank=1, tag=2, token=9, targets=((3, 0, 0, .5), (1, 2, 1, .25), (0, 1, 2, .25)))
    fx = h.relay_row(row)
    assert fx.drop is None and fx.credit is None
    assert fx.local.src == global_gpu(R2, 1, 1) == 5 and fx.local.targets == ((2, 1),)
    assert h.fwd_wait() == 2
    a, b = h.emit(), h.emit()
    assert (a.dst, a.targets, b.dst, b.targets) == (0, ((1, 2),), 3, ((0, 0),))
    assert (a.fwd, a.src_node, a.src_rank, a.token) == (1, 1, 1, 9)
    assert h.credits == [(5, 2)] and h.emit() is None and h.fwd_wait() == 0
    assert h.registers()[("FWD_ROWS", 3)] == 1 and h.registers()[("RELAY_LOCAL", 0)] == 1


def test_forward_waits_for_its_credit():
    """One F tag per pair: a second row's forward to the same GPU waits for the credit;
    a forward to another GPU with a tag goes first (the head row's lowest ready GPU)."""
    h = RelayHubModel(R2, node=0, rank=0)
    h.relay_row(_row(tag=0, token=1, targets=((2, 0, 0, 1.),)))
    h.relay_row(_row(tag=1, token=2, targets=((2, 1, 0, 1.), (3, 1, 1, 1.))))
    assert h.emit().dst == 2
    assert h.emit().dst == 3 and h.emit() is None          # 2's tag is out
    assert h.registers()[("FWD_WAIT", 0)] == 1
    with pytest.raises(ValueError, match="not handed out"):
        h.forward_credit(3, 0) or h.forward_credit(3, 0)
    h.forward_credit(2, 0)
    f = h.emit()
    assert (f.dst, f.ftag, f.token) == (2, 0, 2) and [c[1] for c in h.credits] == [0, 1]


BAD = [
    (RelayReason.FWD_BAD_SOURCE, dict(src_node=0)),                     # own node: never relayed
    (RelayReason.FWD_BAD_SOURCE, dict(src_node=3)),                     # node out of range
    (RelayReason.FWD_BAD_SOURCE, dict(src_rank=2)),                     # another rail
    (RelayReason.FWD_BAD_SOURCE, dict(tag=3)),                          # outside the window
    (RelayReason.FWD_BAD_GPU, dict(targets=((4, 0, 0, 1.),))),          # GPU outside the node
    (RelayReason.FWD_BAD_GPU, dict(targets=((1, 0, 0, 1.), (7, 2, 1, 1.)))),
    (RelayReason.FWD_BAD_TARGETS, dict(targets=())),
    (RelayReason.FWD_BAD_TARGETS, dict(targets=((1, 3, 0, 1.),))),      # expert out of range
    (RelayReason.FWD_BAD_TARGETS, dict(targets=((1, 2, 0, 1.), (1, 2, 1, 1.)))),   # twice
    (RelayReason.FWD_BAD_TARGETS, dict(targets=tuple((g, 0, g, 1.) for g in range(4)))),  # > topk
    (RelayReason.FWD_BAD_TARGETS, dict(targets=((1, 0, 1, 1.), (2, 0, 1, 1.)))),   # a slot twice
    (RelayReason.FWD_BAD_TARGETS, dict(targets=((1, 0, 3, 1.),))),                 # slot >= topk
]


@pytest.mark.parametrize("reason,changes", BAD)
def test_bad_relay_row_dropped_and_counted(reason, changes):
    h = RelayHubModel(R2, node=0, rank=0)
    fx = h.relay_row(_row(**changes))
    assert fx.drop == reason and h.relay_drops[reason] == 1 and sum(h.relay_drops) == 1
    assert not h.local and not h.queue and h.reduce.acc == {} and h.relay_rows == 0
    assert h.registers()[("RELAY_DROPS", int(reason))] == 1
    # a known window's credit still goes back; an unknown source's has none
    assert (fx.credit is None) == (reason == RelayReason.FWD_BAD_SOURCE)


@pytest.mark.parametrize("changes", [dict(fwd=2), dict(fwd=4), dict(ftag=1), dict(src_node=0),
                                     dict(src_node=2), dict(src_rank=1)])
def test_forward_row_unknown_source(changes):
    """At the destination (rank 2): a forwarder that is this GPU or outside the node, a tag
    outside the F window, an original source in this node, out of range or off the
    forwarder's rail -- FWD_BAD_SOURCE, nothing written, no credit."""
    h = RelayHubModel(R2, node=0, rank=2)
    good = dict(dst=2, fwd=3, ftag=0, src_node=1, src_rank=3, token=4, targets=((0, 1),))
    assert h.forward_row(ForwardRow(**good)).fcredit == (3, 0)
    fx = h.forward_row(ForwardRow(**{**good, **changes}))
    assert fx.drop == RelayReason.FWD_BAD_SOURCE and fx.fcredit is None
    assert len(h.local) == 1 and h.fcredits == [(3, 0)] and h.fwd_in == 1
    bad = h.forward_row(ForwardRow(**{**good, "targets": ((0, 1), (0, 2))}))
    assert bad.drop == RelayReason.FWD_BAD_TARGETS and h.relay_drops == [0, 1, 1]


# ------------------------------------------------------------------ a node of relay hubs
def random_row(rng, cfg, node, rank, tag, token, bad=0.0, src_node=None):
    """A relay row for hub ``rank`` of ``node`` from a remote GPU of its rail (``src_node``,
    or a random one; with probability ``bad``, a broken row of one of five kinds)."""
    if src_node is None:
        src_node = rng.choice([n for n in range(cfg.nodes) if n != node])
    k = rng.randint(1, cfg.relay_targets)
    pairs = rng.sample([(g, x) for g in range(cfg.node_gpus) for x in range(cfg.experts)], k)
    slots = rng.sample(range(cfg.topk), k)
    targets = [(g, x, s, rng.choice([0.125, 0.3, 0.5, 0.7])) for (g, x), s in zip(pairs, slots)]
    row = dict(src_node=src_node, src_rank=rank, tag=tag, token=token, targets=tuple(targets))
    if rng.random() < bad:
        kind = rng.randrange(5)
        top = (1 << cfg.gpu_bits) - 1
        if kind == 0:
            row["src_rank"] = (rank + 1) % cfg.node_gpus
        elif kind == 1:
            row["targets"] = ((rng.randint(cfg.node_gpus, top), 0, 0, 1.0),) + row["targets"][1:]
        elif kind == 2:
            row["targets"] = ()
        elif kind == 3:
            row["targets"] = row["targets"] + (row["targets"][0][:2] + (9, 1.0),)
        else:
            row["src_node"] = node
    return RelayRow(**row)


class NodeSim:
    """One node's hubs (node 0) under a random schedule. Actions: a remote source sends its
    next relay row (holding an R tag at its relay); a hub's input takes the head of its
    inbox (relay rows and forward rows, in arrival order); a hub's forward unit emits; an F
    credit in flight reaches its relay. ``blocking``: the variant the docstring rules out --
    a hub's input does not take a relay row while its forward unit holds one (no queue)."""

    def __init__(self, cfg, rng, rows_per_source, bad=0.0, blocking=False):
        self.cfg, self.rng, self.blocking = cfg, rng, blocking
        G = cfg.node_gpus
        self.hubs = {g: RelayHubModel(cfg, 0, g) for g in range(G)}
        self.inbox = {g: deque() for g in range(G)}
        self.fc = []                                     # (relay, dst, ftag) on the way back
        self.sources = {}                                # (src node, rank) -> rows left to send
        self.rtags = {}                                  # (src node, rank) -> R tags held
        self.offered = []
        token = 0
        for n in range(1, cfg.nodes):
            for g in range(G):
                rows = []
                for _ in range(rows_per_source):
                    token += 1
                    rows.append(token)
                self.sources[(n, g)] = deque(rows)
                self.rtags[(n, g)] = set(range(cfg.tags_per_source))
        self.bad = bad
        self.seen_credits = {g: 0 for g in range(G)}

    def actions(self):
        acts = []
        for key, rows in self.sources.items():
            if rows and self.rtags[key]:
                acts.append(("send", key))
        for g, box in self.inbox.items():
            if box and not (self.blocking and isinstance(box[0], RelayRow) and self.hubs[g].queue):
                acts.append(("input", g))
        for g, h in self.hubs.items():
            if h.ready_dests():
                acts.append(("emit", g))
        acts += [("credit", i) for i in range(len(self.fc))]
        return acts

    def step(self, act):
        kind, arg = act
        if kind == "send":
            n, g = arg
            tag = min(self.rtags[arg])
            token = self.sources[arg].popleft()
            row = random_row(self.rng, self.cfg, 0, g, tag, token, self.bad, src_node=n)
            if row.src_rank == g and row.src_node != 0:
                self.rtags[arg].discard(tag)     # (a row from a good source holds its tag)
            self.inbox[g].append(row)
            self.offered.append((g, row))
        elif kind == "input":
            row = self.inbox[arg].popleft()
            h = self.hubs[arg]
            if isinstance(row, RelayRow):
                h.relay_row(row)
            else:
                fx = h.forward_row(row)
                assert fx.drop is None, fx
                self.fc.append((row.fwd, arg, row.ftag))
        elif kind == "emit":
            f = self.hubs[arg].emit(self.rng.choice(self.hubs[arg].ready_dests()))
            self.inbox[f.dst].append(f)
        else:
            relay, dst, ftag = self.fc.pop(arg)
            self.hubs[relay].forward_credit(dst, ftag)
        for g, h in self.hubs.items():                  # R credits back to their sources
            for src, tag in h.credits[self.seen_credits[g]:]:
                key = divmod(src, self.cfg.node_gpus)
                assert tag not in self.rtags[key], f"R credit {key, tag} returned twice"
                self.rtags[key].add(tag)
            self.seen_credits[g] = len(h.credits)

    def run(self, limit=100_000):
        """Random actions until none is possible; returns the number taken."""
        for i in range(limit):
            acts = self.actions()
            if not acts:
                return i
            self.step(self.rng.choice(acts))
        raise AssertionError("did not settle")

    def drained(self) -> bool:
        return not any(self.sources.values()) and not any(self.inbox.values()) \
            and not self.fc and not any(h.queue for h in self.hubs.values())


@pytest.mark.parametrize("cfg", [R2, R4], ids=["2x4", "4x2"])
@pytest.mark.parametrize("seed", range(6))
def test_node_drains_and_every_target_written_once(cfg, seed):
    """Random schedules, 1 or 2 F tags per pair, a tenth of the rows broken: the node
    always drains (no deadlock), every accepted row's targets are written exactly once in
    the node, each bad row counted once, no forward twice, every R tag back at its source,
    the relay queue never deeper than relay_window."""
    rng = random.Random(seed)
    sim = NodeSim(cfg, rng, rows_per_source=12, bad=0.1)
    sim.run()
    assert sim.drained(), f"seed {seed}: stuck"
    counts = audit(cfg, sim.offered, sim.hubs)
    hubs = sim.hubs.values()
    assert counts["dropped_rows"] == sum(sum(h.relay_drops) for h in hubs) > 0
    assert counts["forwards"] == sum(len(h.forwards) for h in hubs) == sum(h.fwd_in for h in hubs)
    assert all(h.peak_queue <= cfg.relay_window for h in hubs)
    assert all(len(t) == cfg.tags_per_source for t in sim.rtags.values())
    assert all(len(f) == cfg.forward_tags for h in hubs for f in h.free)
    assert sum(h.relay_rows for h in hubs) + counts["dropped_rows"] == len(sim.offered)


def test_audit_catches_a_forward_lost_and_one_sent_twice():
    """The audit is not vacuous: a forward row removed, or written twice, fails it."""
    sim = NodeSim(R2, random.Random(3), rows_per_source=6)
    sim.run()
    victim = next(h for h in sim.hubs.values() if h.local and h.fwd_in)
    lost = victim.local.pop()
    with pytest.raises(AssertionError, match="written 0 times"):
        audit(R2, sim.offered, sim.hubs)
    victim.local += [lost, lost]
    with pytest.raises(AssertionError, match="written 2 times"):
        audit(R2, sim.offered, sim.hubs)
    victim.local.pop()
    h = next(h for h in sim.hubs.values() if h.forwards)
    h.forwards.append(h.forwards[0])
    with pytest.raises(AssertionError, match="forwarded twice"):
        audit(R2, sim.offered, sim.hubs)


def test_blocking_input_deadlocks_where_v3_drains():
    """The docstring's counter-example: two GPUs relaying for each other with one F tag,
    inputs that stall while their forward unit holds a row. Some schedule leaves both hubs
    waiting for a credit the other's stalled input would return; with the v3 rules the
    same schedules drain."""
    cfg = TINY.replace(sources=4, nodes=2, gpus_per_node=2, relay=True, forward_tags=1, topk=2, max_targets=2)
    stuck = 0
    for seed in range(60):
        for blocking in (True, False):
            sim = NodeSim(cfg, random.Random(seed), rows_per_source=6, blocking=blocking)
            sim.run()
            if blocking:
                stuck += not sim.drained()
            else:
                assert sim.drained(), f"seed {seed}: v3 rules stuck"
    assert stuck > 0


# ------------------------------------------------------------------ reduce on combine
def test_reduction_equals_numpy():
    """Partial rows of random (token, node)s in random order: each final sum equals numpy's
    FP32 sum of the weighted rows in the same order, bit for bit, and the exact sum within
    FP32 rounding; BF16 out is that sum rounded; final exactly when the last part is in."""
    rng = np.random.default_rng(7)
    red = ReduceModel(R2, out="fp32")
    hidden, want = 64, {}
    for token in range(40):
        k = int(rng.integers(1, 4))
        slots = rng.choice(3, size=k, replace=False)
        weights = rng.random(k).astype(np.float32)
        red.open(5, token, tuple(zip(slots.tolist(), weights.tolist())))
        parts = [(int(s), bf16_value(bf16_bits(w)), to_bf16(rng.standard_normal(hidden).astype(np.float32)))
                 for s, w in zip(slots, weights)]
        want[token] = parts
    order = [(t, i) for t, parts in want.items() for i in range(len(parts))]
    rng.shuffle(order)
    seen = {t: [] for t in want}
    for t, i in order:
        s, w, y = want[t][i]
        seen[t].append(i)
        r = red.partial(5, t, s, y)
        assert (r is not None) == (len(seen[t]) == len(want[t]))
        if r is not None:
            ref = np.float32(0) * y
            for n, j in enumerate(seen[t]):
                term = (want[t][j][1] * want[t][j][2]).astype(np.float32)
                ref = term if n == 0 else (ref + term).astype(np.float32)
            assert np.array_equal(r[3], ref) and r[2] == len(want[t])
            exact = sum(np.float64(want[t][j][1]) * want[t][j][2].astype(np.float64) for j in seen[t])
            assert np.allclose(r[3], exact, rtol=1e-5, atol=1e-5)
    assert not red.acc and len(red.out) == 40 and red.incomplete == 0 and red.bad_partials == 0
    red16 = ReduceModel(R2, out="bf16")
    red16.open(1, 1, ((0, 0.5), (2, 0.25)))
    y0, y1 = np.full(4, 1.1, np.float32), np.full(4, -3.3, np.float32)
    red16.partial(1, 1, 2, y1)
    out = red16.partial(1, 1, 0, y0)[3]
    assert np.array_equal(out, to_bf16((np.float32(0.25) * y1 + np.float32(0.5) * y0).astype(np.float32)))


def test_reduction_completion_flush_and_bad_partials():
    red = ReduceModel(R2)
    red.open(2, 7, ((0, 1.0), (1, 1.0), (2, 1.0)))
    y = np.ones(8, np.float32)
    assert red.partial(2, 7, 1, y) is None and red.partial(2, 7, 1, y) is None    # twice: refused
    assert red.partial(2, 8, 0, y) is None                                        # no such sum
    assert red.partial(2, 7, 2, y) is None and red.bad_partials == 2
    assert red.peak_open == 1 and len(red.acc) == 1
    red.open(2, 7, ((0, 1.0),))                                                  # open twice: refused
    assert red.bad_opens == 1 and red.acc[(2, 7)]["expect"] == 3
    (src, token, parts, row), = red.flush()
    assert (src, token, parts, red.incomplete) == (2, 7, 2, 1) and np.array_equal(row, 2 * y)
    # HBM: first part written, second read and (not final) written, the flush read
    assert (red.hbm_write_bytes, red.hbm_read_bytes) == (2 * 32, 2 * 32)
    assert [o[0] for o in red.ops] == ["write", "add", "flush"]


def test_reduction_hbm_traffic_and_sizes():
    """k parts: (k - 1) reads and k - 1 writes of the FP32 row; 2 nodes, 4096 tokens,
    hidden 7168: 117 MB of accumulators in HBM; the SRAM record 8 B at top-3."""
    red = ReduceModel(R2)
    red.open(0, 0, ((0, 1.0), (1, 1.0), (2, 1.0)))
    for s in range(3):
        red.partial(0, 0, s, np.zeros(100, np.float32))
    assert (red.hbm_read_bytes, red.hbm_write_bytes) == (800, 800)
    big = TINY.replace(sources=16, nodes=2, gpus_per_node=8, relay=True, forward_tags=1, topk=3, max_targets=3)
    assert accumulator_bytes(big, 4096, 7168) == 117_440_512
    assert record_bytes(R2) == 9


def test_relay_opens_one_sum_per_accepted_row():
    """Every accepted relay row opens a sum expecting its targets (local and forwarded);
    a dropped one opens none."""
    h = RelayHubModel(R2, node=0, rank=0)
    h.relay_row(_row(token=3, targets=((0, 0, 0, .5), (2, 1, 1, .5))))
    h.relay_row(_row(token=4, targets=((9, 0, 0, .5),)))
    assert list(h.reduce.acc) == [(4, 3)] and h.reduce.acc[(4, 3)]["expect"] == 2
    assert h.registers()[("RED_OPEN", 0)] == 1


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_reduce_hbm_bytes_match_the_model_and_compare_with_software(k):
    """The closed form is the model's count; against the software reduce kernel the FP32
    read-modify-write moves fewer bytes at k = 2 only, BF16 accumulators at every k > 1."""
    h = 7168
    red = ReduceModel(R2)
    red.open(0, 0, tuple((s, 1.0) for s in range(k)))
    for s in range(k):
        red.partial(0, 0, s, np.zeros(h, np.float32))
    assert red.hbm_read_bytes + red.hbm_write_bytes == reduce_hbm_bytes(k, h)
    hw, hw16, sw = reduce_hbm_bytes(k, h), reduce_hbm_bytes(k, h, 2), software_reduce_bytes(k, h)
    assert (hw, sw) == ((0, 0) if k == 1 else (8 * (k - 1) * h, 2 * (2 * k + 1) * h))
    assert (hw < sw) == (k == 2) and (k == 1 or hw16 < sw)


def test_record_table_is_sized_by_reduce_tokens():
    """(nodes - 1) x reduce_tokens records (0: every token id); the relay configs keep 4096
    tokens per remote source unless the layer has more, never more than the token ids."""
    assert (R2.reduce_token_span, R2.reduce_records) == (256, 256)
    r4 = R4.replace(reduce_tokens=16)
    assert (r4.reduce_token_span, r4.reduce_records) == (16, 48)
    assert record_table_bits(r4) == 48 * (1 + 2 * 3 + 2 + 16 * 3)
    one = load_hub_config("deepseek-v3-8gpu").replace(sources=16, experts=16, max_targets=8)
    assert relay_config(one, 2, 8).reduce_tokens == REDUCE_TOKENS == 4096
    assert relay_config(one, 2, 8, tokens=5000).reduce_tokens == 8192
    assert relay_config(one, 2, 8, tokens=128).reduce_tokens == 4096
    assert relay_config(one.replace(token_bits=10), 2, 8).reduce_tokens == 1024
    assert record_table_bits(relay_config(one, 8 // 4, 8)) == 4096 * 149


def test_opens_without_a_record_are_refused_and_counted():
    """A relay in node 1 of 4: a source of its own node, of no node, or a token beyond the
    table opens nothing (NO_RECORD); the partial rows of such a sum are BAD_PARTIAL; the
    records sit at (the source's node among the other nodes, token)."""
    cfg = R4.replace(reduce_tokens=4)
    red = ReduceModel(cfg, node=1)
    G = cfg.node_gpus
    for src, tok in ((1 * G, 0), (4 * G, 0), (0, 4), (0, 255)):
        red.open(src, tok, ((0, 1.0),))
        assert red.partial(src, tok, 0, np.ones(2, np.float32)) is None
    assert (red.no_record, red.bad_partials, red.acc) == (4, 4, {})
    red.open(0, 3, ((0, 1.0),))
    red.open(0, 3, ((1, 1.0),))
    assert red.drops() == [4, 1, 4] and list(ReduceReason) == [ReduceReason.BAD_PARTIAL,
                                                               ReduceReason.OPEN_TWICE, ReduceReason.NO_RECORD]
    assert [red.record_index(s, t) for s, t in ((0, 3), (2 * G + 1, 0), (2 * G, 3))] == [3, 4, 7]
    h = RelayHubModel(cfg, node=1, rank=0)
    assert h.reduce.node == 1 and h.registers()[("RED_DROPS", int(ReduceReason.NO_RECORD))] == 0
    assert {("RED_DROPS", i) for i in range(3)} <= set(h.registers())


def test_relay_ports_pack_unpack_and_the_rtl_layouts_agree():
    """The relay units' payloads are described once (spec RelayPorts): packing then
    unpacking gives the values back (cut to their widths), and the RTL's layouts put every
    field at the same bits."""
    from amaranth.lib import data
    from moehub.rtl.relay.layouts import RelayLayouts
    from moehub.spec.formats import RelayPorts, pack_fields, unpack_fields
    rng = random.Random(3)
    ports, lays = RelayPorts(R4), RelayLayouts(R4)
    for name in ("row", "open", "local", "fwd", "rcredit", "fcredit"):
        fields, lay = getattr(ports, name), getattr(lays, name)
        vals = {k: [rng.randrange(1 << f[0]) for _ in range(f[1])] if isinstance(f, tuple)
                else rng.randrange(1 << f) for k, f in fields.items()}
        word = pack_fields(fields, vals)
        assert unpack_fields(fields, word) == vals and word < 1 << lay.size, name
        view = data.Const(lay, word)
        for k, f in fields.items():
            got = [view[k][i] for i in range(f[1])] if isinstance(f, tuple) else view[k]
            assert got == vals[k], (name, k)
    assert pack_fields(ports.row, {"valid": 1, "gpu": 0}) == 1 << (sum(
        ports.row[k] for k in ("src_node", "src_rank", "tag", "token")))
