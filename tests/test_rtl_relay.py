"""The relay's forward unit (moehub/rtl/relay/forward_unit.py) against the reference model
(moehub/spec/relay.py) in the Amaranth simulator, in lock-step, cycle by cycle.

The bench offers relay rows (good ones, and a share broken in each way the model checks:
source, GPU, targets, with entries at random positions and gaps), backpressures every
output at random and returns forward credits after a random delay. Each accepted row goes
to :class:`~moehub.spec.relay.RelayHubModel` in its accept cycle; each local report must
be the model's next :class:`LocalRow`; each forward row must go to the model's lowest
ready GPU, with the model's tag and entries; the relay credits must be the model's, in
order; the counters (drops per reason, rows, local rows, forwards per GPU) must equal the
model's of the cycle before, every cycle (the unit's counters lag their events by one
cycle: each adds an event registered in the cycle it happens), and the forwards waiting
(the held row's state, no counter) the model's of the cycle. A failure names the seed.

Planted bugs (built from a broken in-memory copy of the RTL, :mod:`moehub.verif.formal.plant`)
must make the bench fail: a forward that does not clear its GPU (forwarded twice), a tag
check left out of the source verdict, the packing off by one entry.

The forward check (a received forward row's verdict) is checked against the model's
``forward_verdict`` on random rows (the reduce unit: tests/test_rtl_relay_reduce.py).
"""
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from moehub.rtl.relay.forward_unit import ForwardUnit
from moehub.spec.config import load_hub_config
from moehub.spec.formats import RelayReason
from moehub.spec.relay import RelayHubModel, RelayRow
from moehub.verif.formal.plant import broken_class
from moehub.verif.tb.relay import random_relay_fields

TINY = load_hub_config("tiny")
#: 2 nodes x 4 GPUs, 3 experts, top-3, one forward tag per pair
R2 = TINY.replace(sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3, max_targets=3)
#: 3 nodes x 3 GPUs (non-power-of-two ranks and nodes), 2 forward tags
R3 = TINY.replace(sources=9, nodes=3, gpus_per_node=3, relay=True, forward_tags=2, topk=3, max_targets=3)
#: 2 experts per GPU under top-3: a GPU's entries packed into 2 (max_targets = min(experts, topk))
RX = TINY.replace(experts=2, sources=6, nodes=2, gpus_per_node=3, relay=True, forward_tags=3, topk=3,
                  max_targets=2)
#: one expert per GPU (EP = experts, as DeepSeek-V3 on 256 GPUs): forward rows of one target
R1 = TINY.replace(experts=1, sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3,
                  max_targets=1)
def entry_weight(token, i):
    """The BF16 gate weight the benches give entry ``i`` of the relay row of ``token`` (the
    relay carries it to the reduce's open)."""
    return (token * 31 + i * 7 + 1) & 0xFFFF


#: a forward credit presented in cycle c is usable in cycle c + 2 (registered, then the free bits)
CREDIT_LATENCY = 2
#: a row taken in cycle c is reported and forwarded from cycle c + 2 (its entries packed in c + 1)
PREP_CYCLES = 1


def random_entries(rng, cfg, node, rank, bad):
    """(payload fields, RelayRow) of a relay row for hub (node, rank): the targets at random
    entry positions with junk in the invalid ones; with probability ``bad`` broken (the
    cocotb testbench's draw, :func:`moehub.verif.tb.relay.random_relay_fields`)."""
    src_node, src_rank, tag, ents = random_relay_fields(rng, cfg, node, rank, bad)
    ent = [dict(valid=v, gpu=g, expert=x, slot=s) for v, g, x, s in ents]
    targets = tuple((e["gpu"], e["expert"], e["slot"], 0.5) for e in ent if e["valid"])
    return (dict(src_node=src_node, src_rank=src_rank, tag=tag, entries=ent),
            RelayRow(src_node, src_rank, tag, 0, targets))


class Bench:
    """The unit and the model side by side (see the module docstring)."""

    def __init__(self, cfg, dut, ctx, rng, node, rank):
        self.cfg, self.dut, self.ctx, self.rng = cfg, dut, ctx, rng
        self.model = RelayHubModel(cfg, node, rank)
        self.node, self.rank = node, rank
        self.locals, self.credits = [], []
        self.out = []                               # forward rows the destinations hold: (due cycle, dst, ftag)
        self.applied = []                           # credits presented, applied to the model later
        self.cycle = 0
        self.forwarded = 0
        self.taken = -10                            # the cycle the last row was taken
        self.log = []                               # (cycle, event, ...) for the latency figures
        self.lagged = None                          # the model's counters a cycle ago

    def lag(self, now: dict) -> dict:
        """The model's counters ``now`` (at this cycle's start: every event before it)
        as the unit shows them: those of the cycle before (``now`` itself in the first
        cycle, all 0), except ``fwd_wait``, the held row's state, which does not lag."""
        want = dict(now if self.lagged is None else self.lagged, fwd_wait=now["fwd_wait"])
        self.lagged = now
        return want

    def check_counters(self):
        ctx, dut, m = self.ctx, self.dut, self.model
        got = {"drops": [ctx.get(dut.drops[i]) for i in range(len(RelayReason))],
               "rows": ctx.get(dut.relay_rows), "local": ctx.get(dut.relay_local),
               "fwd_rows": [ctx.get(dut.fwd_rows[g]) for g in range(self.cfg.node_gpus)],
               "fwd_wait": ctx.get(dut.fwd_wait)}
        want = self.lag({"drops": list(m.relay_drops), "rows": m.relay_rows, "local": m.relay_local,
                         "fwd_rows": list(m.fwd_rows), "fwd_wait": m.fwd_wait()})
        assert got == want, f"cycle {self.cycle}: counters {got}, model a cycle before {want}"

    def set_row(self, fields, token):
        ctx, p = self.ctx, self.dut.row.payload
        ctx.set(p.src_node, fields["src_node"])
        ctx.set(p.src_rank, fields["src_rank"])
        ctx.set(p.tag, fields["tag"])
        ctx.set(p.token, token)
        ctx.set(p.valid, sum(e["valid"] << i for i, e in enumerate(fields["entries"])))
        for i, e in enumerate(fields["entries"]):
            ctx.set(p.gpu[i], e["gpu"])
            ctx.set(p.expert[i], e["expert"])
            ctx.set(p.slot[i], e["slot"])
            ctx.set(p.weight[i], entry_weight(token, i))

    def entries(self, payload, n):
        ctx = self.ctx
        v = ctx.get(payload.valid)
        return tuple((ctx.get(payload.expert[i]), ctx.get(payload.slot[i])) for i in range(n) if v >> i & 1)

    def apply_credits(self):
        """The forward credits the unit sees now (presented ``CREDIT_LATENCY`` cycles ago)
        reach the model."""
        for c, dst, ftag in [a for a in self.applied if a[0] == self.cycle]:
            self.model.forward_credit(dst, ftag)
        self.applied = [a for a in self.applied if a[0] > self.cycle]

    def drive_outputs(self, p_ready):
        """The cycle's ready of the local, forward and credit outputs, and now and then a
        forward credit from a destination that holds a forward row, on ``fcredit``."""
        ctx, dut, rng = self.ctx, self.dut, self.rng
        ctx.set(dut.local.ready, rng.random() < p_ready)
        ctx.set(dut.fwd.ready, rng.random() < p_ready)
        ctx.set(dut.rcredit.ready, rng.random() < p_ready)
        due = [o for o in self.out if o[0] <= self.cycle]
        if due and rng.random() < 0.6:
            o = rng.choice(due)
            self.out.remove(o)
            ctx.set(dut.fcredit.valid, 1)
            ctx.set(dut.fcredit.payload.dst, o[1])
            ctx.set(dut.fcredit.payload.ftag, o[2])
            self.applied.append((self.cycle + CREDIT_LATENCY, o[1], o[2]))
        else:
            ctx.set(dut.fcredit.valid, 0)

    def check_outputs(self, M):
        """This cycle's forward, local and credit outputs against the model (a forward row
        the model's first ready destination's, offered whenever the model has one ready
        ``PREP_CYCLES`` after a take; a local request and a credit in the model's order);
        returns (an output offered or taken, a credit returned)."""
        ctx, dut, m, rng = self.ctx, self.dut, self.model, self.rng
        busy = credited = False
        if ctx.get(dut.fwd.valid):
            busy = True
            ready = m.ready_dests()
            dst = ctx.get(dut.fwd.payload.dst)
            assert ready and dst == ready[0], f"cycle {self.cycle}: forward to {dst}, model ready {ready}"
            if ctx.get(dut.fwd.ready):
                f = m.emit(dst)
                fp = dut.fwd.payload
                got = (ctx.get(fp.ftag), ctx.get(fp.fwd), ctx.get(fp.src_node), ctx.get(fp.src_rank),
                       ctx.get(fp.token), self.entries(fp, M))
                assert got == (f.ftag, f.fwd, f.src_node, f.src_rank, f.token, f.targets), (got, f)
                self.out.append((self.cycle + rng.randint(1, 12), dst, f.ftag))
                self.forwarded += 1
                self.log.append((self.cycle, "fwd", f.token))
        elif self.cycle > self.taken + PREP_CYCLES:
            assert not m.ready_dests(), \
                f"cycle {self.cycle}: the model can forward to {m.ready_dests()}, the design offers none"
        if ctx.get(dut.local.valid) and ctx.get(dut.local.ready):
            busy = True
            lp = dut.local.payload
            want = self.locals.pop(0)
            got = (ctx.get(lp.src), ctx.get(lp.token), self.entries(lp, M))
            assert got == (want.src, want.token, want.targets), (got, want)
            self.log.append((self.cycle, "local", want.token))
        if ctx.get(dut.rcredit.valid) and ctx.get(dut.rcredit.ready):
            busy = credited = True
            self.credits.append((ctx.get(dut.rcredit.payload.src), ctx.get(dut.rcredit.payload.tag)))
            assert self.credits == m.credits[:len(self.credits)], (self.credits, m.credits)
            self.log.append((self.cycle, "credit", self.credits[-1]))
        return busy, credited

    async def run(self, rows, bad, p_ready=0.7):
        ctx, dut, cfg, m, rng = self.ctx, self.dut, self.cfg, self.model, self.rng
        M = cfg.max_targets
        ctx.set(dut.node, self.node)
        ctx.set(dut.rank, self.rank)
        pending, token = None, 0
        sent = 0
        idle = 0
        while sent < rows or m.queue or ctx.get(dut.rcredit.valid) or self.out or idle < 6:
            self.check_counters()
            self.apply_credits()
            if pending is None and sent < rows and rng.random() < 0.8:
                token = (token + 1) % (1 << cfg.token_bits)
                fields, row = random_entries(rng, cfg, self.node, self.rank, bad)
                pending = (fields, RelayRow(row.src_node, row.src_rank, row.tag, token, row.targets))
                self.set_row(fields, token)
            ctx.set(dut.row.valid, pending is not None)
            self.drive_outputs(p_ready)
            # ---- the cycle's handshakes, against the model
            busy, _ = self.check_outputs(M)
            if pending is not None and ctx.get(dut.row.ready):
                busy = True
                fx = m.relay_row(pending[1])
                self.taken = self.cycle
                if fx.local is not None:
                    self.locals.append(fx.local)
                pending, sent = None, sent + 1
            idle = 0 if busy or pending else idle + 1
            await ctx.tick()
            self.cycle += 1
            assert self.cycle < 200 * rows + 500, "no progress"
        self.check_counters()
        assert self.credits == m.credits and not self.locals and not m.queue


def simulate(cfg, seed, rows=120, bad=0.35, node=0, rank=1, unit_cls=ForwardUnit):
    """Run the bench; returns the bench (raises AssertionError naming the seed on a mismatch)."""
    dut = unit_cls(cfg)
    return run_bench(dut, lambda ctx, rng: Bench(cfg, dut, ctx, rng, node, rank), cfg, seed,
                     rows, bad, node, rank)


def run_bench(dut, make, cfg, seed, rows, bad, node, rank):
    """Simulate ``dut`` under the bench ``make(ctx, rng)`` builds (its ``run(rows, bad)``)
    with the random stream of ``seed``; returns the bench. A mismatch is re-raised naming
    the config, the seed, the node and the rank."""
    rng = random.Random(seed)
    out = {}

    async def bench(ctx):
        b = make(ctx, rng)
        out["bench"] = b
        await b.run(rows, bad)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    try:
        sim.run()
    except AssertionError as e:
        raise AssertionError(f"{cfg.name} seed {seed} (node {node}, rank {rank}): {e}") from e
    return out["bench"]


@pytest.mark.parametrize("cfg", [R2, R3, RX, R1], ids=["2x4", "3x3", "2x3-pack2", "2x4-one-expert"])
@pytest.mark.parametrize("seed", range(3))
def test_forward_unit_random_against_model(cfg, seed):
    rank = seed % cfg.node_gpus
    b = simulate(cfg, seed, node=seed % cfg.nodes, rank=rank)
    m = b.model
    assert m.relay_rows > 40 and sum(m.relay_drops) > 5 and b.forwarded > 40
    assert all(m.relay_drops), m.relay_drops               # every reason seen
    assert m.relay_local > 5


def test_forward_unit_directed():
    """One row naming all three targets on three GPUs (here rank 1): local (2, 1), forwards to
    0 then 3 with tag 0, the credit after both; a row naming only this GPU: credit at once;
    a row from another rail: FWD_BAD_SOURCE, no credit; a GPU out of the node: FWD_BAD_GPU,
    credit."""
    dut = ForwardUnit(R2)

    async def bench(ctx):
        ctx.set(dut.rank, 1)
        for s in (dut.local, dut.fwd, dut.rcredit):
            ctx.set(s.ready, 1)
        b = Bench(R2, dut, ctx, random.Random(0), 0, 1)
        rows = [
            (dict(src_node=1, src_rank=1, tag=2, entries=[dict(valid=1, gpu=3, expert=0, slot=0),
                                                           dict(valid=1, gpu=1, expert=2, slot=1),
                                                           dict(valid=1, gpu=0, expert=1, slot=2)]), 9),
            (dict(src_node=1, src_rank=1, tag=0, entries=[dict(valid=0, gpu=0, expert=0, slot=0),
                                                           dict(valid=1, gpu=1, expert=0, slot=0),
                                                           dict(valid=0, gpu=0, expert=0, slot=0)]), 10),
            (dict(src_node=1, src_rank=2, tag=0, entries=[dict(valid=1, gpu=0, expert=0, slot=0)] * 3), 11),
            (dict(src_node=1, src_rank=1, tag=1, entries=[dict(valid=1, gpu=5, expert=0, slot=0),
                                                           dict(valid=0, gpu=0, expert=0, slot=0),
                                                           dict(valid=0, gpu=0, expert=0, slot=0)]), 12),
        ]
        log = []
        for fields, token in rows:
            b.set_row(fields, token)
            ctx.set(dut.row.valid, 1)
            while True:
                ok = ctx.get(dut.row.ready)
                if ctx.get(dut.fwd.valid):
                    log.append(("fwd", ctx.get(dut.fwd.payload.dst), ctx.get(dut.fwd.payload.ftag),
                                ctx.get(dut.fwd.payload.token)))
                if ctx.get(dut.local.valid):
                    log.append(("local", ctx.get(dut.local.payload.src), b.entries(dut.local.payload, 3)))
                if ctx.get(dut.rcredit.valid):
                    log.append(("credit", ctx.get(dut.rcredit.payload.src), ctx.get(dut.rcredit.payload.tag)))
                await ctx.tick()
                if ok:
                    break
            ctx.set(dut.row.valid, 0)
        for _ in range(3):
            if ctx.get(dut.rcredit.valid):
                log.append(("credit", ctx.get(dut.rcredit.payload.src), ctx.get(dut.rcredit.payload.tag)))
            await ctx.tick()
        assert log[:4] == [("fwd", 0, 0, 9), ("local", 5, ((2, 1),)), ("fwd", 3, 0, 9), ("credit", 5, 2)], log
        assert ("local", 5, ((0, 0),)) in log and ("credit", 5, 0) in log
        assert ("credit", 5, 1) in log and not any(e[0] == "credit" and e[2] == 0 and e[1] == 6 for e in log)
        assert [ctx.get(dut.drops[i]) for i in range(3)] == [1, 1, 0]
        assert ctx.get(dut.fwd_rows[0]) == ctx.get(dut.fwd_rows[3]) == 1 and ctx.get(dut.relay_rows) == 2
        # one F tag per pair, none returned: a further row to GPU 0 waits
        assert ctx.get(dut.fwd_wait) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


MOD = "moehub.rtl.relay.forward_unit"
PLANTS = {
    "forwarded-twice": ("            m.d.sync += left.eq(left & ~pick)", "            m.d.sync += left.eq(left)"),
    "tag-unchecked": ("    src_bad = (p.src_node >= cfg.nodes) | (p.src_node == node) | (p.src_rank != rank) \\\n"
                      "        | (p.tag >= cfg.tags_per_source)",
                      "    src_bad = (p.src_node >= cfg.nodes) | (p.src_node == node) | (p.src_rank != rank)"),
    "pack-off-by-one": ("        pick = [mask[j] & below[j][i] if i < len(below[j]) else Const(0) for j in range(T)]",
                        "        pick = [mask[j] & below[j][i - 1] if 0 < i <= len(below[j]) else mask[j] & (i == 0) "
                        "for j in range(T)]"),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(plant):
    """Each planted bug fails the random bench on some seed of the first three (the
    unplanted unit passes the same seeds above)."""
    old, new = PLANTS[plant]
    broken = broken_class(MOD, old, new, "ForwardUnit")
    caught = []
    for seed in range(3):
        try:
            simulate(R2, seed, rows=60, unit_cls=broken)
        except AssertionError as e:
            caught.append(str(e))
            break
    assert caught, f"plant {plant} not caught"
    assert "seed" in caught[0]


# ------------------------------------------------------------------ the forward check
def test_forward_check_against_model():
    """Random forward rows (fields over their whole widths) at random (node, rank): the
    verdict and the global source are the model's ``forward_verdict``'s."""
    from moehub.rtl.relay.forward_check import ForwardCheck
    from moehub.spec.relay import ForwardRow, global_gpu
    for cfg in (R2, R3):
        dut, rng = ForwardCheck(cfg), random.Random(11)
        M = cfg.max_targets
        seen = set()

        async def bench(ctx):
            for _ in range(1500):
                node, rank = rng.randrange(cfg.nodes), rng.randrange(cfg.node_gpus)
                h = RelayHubModel(cfg, node, rank)
                fwd = rng.choice([rng.randrange(1 << cfg.gpu_bits), (rank + 1) % cfg.node_gpus])
                f = dict(fwd=fwd, ftag=rng.randrange(1 << len(dut.ftag)),
                         src_node=rng.randrange(1 << cfg.node_bits), src_rank=rng.choice([fwd, rng.randrange(1 << cfg.gpu_bits)]))
                if rng.random() < 0.5:            # mostly well-formed sources, to reach the target checks
                    f.update(ftag=rng.randrange(cfg.forward_tags), src_node=rng.choice([n for n in range(cfg.nodes) if n != node]),
                             fwd=(rank + 1 + rng.randrange(cfg.node_gpus - 1)) % cfg.node_gpus)
                    f["src_rank"] = f["fwd"]
                ent = [(rng.random() < 0.6, rng.randrange(1 << cfg.expert_bits), rng.randrange(cfg.topk)) for _ in range(M)]
                targets = tuple((x, s) for v, x, s in ent if v)
                for k, v in dict(node=node, rank=rank, **f).items():
                    ctx.set(getattr(dut, k), v)
                ctx.set(dut.valid, sum(int(v) << i for i, (v, _, _) in enumerate(ent)))
                for i, (_, x, _) in enumerate(ent):
                    ctx.set(dut.expert[i], x)
                want = h.forward_verdict(ForwardRow(dst=rank, token=0, targets=targets, **f))
                got = (RelayReason.FWD_BAD_SOURCE if ctx.get(dut.bad_source) else
                       RelayReason.FWD_BAD_TARGETS if ctx.get(dut.bad_targets) else None)
                assert got == want, (cfg.nodes, node, rank, f, ent, got, want)
                if want is None:
                    assert ctx.get(dut.src) == global_gpu(cfg, f["src_node"], f["src_rank"])
                seen.add(want)

        sim = Simulator(dut)
        sim.add_testbench(bench)
        sim.run()
        assert seen == {None, RelayReason.FWD_BAD_SOURCE, RelayReason.FWD_BAD_TARGETS}
