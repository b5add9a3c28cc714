"""cocotb testbench of protocol v3's relay control path -- the Verilog of
:class:`moehub.rtl.relay.hub.RelayControl` (the row FIFO, the forward unit, the forward
check, the relay counters) -- against the reference model
:class:`moehub.spec.relay.RelayHubModel`, cycle by cycle.

Run it through :func:`moehub.verif.cocotb_runner.run_hub_cocotb` with
``design=RelayControl`` and a relay config (tests/test_relay_cocotb.py): the config
reaches this module as the run's :class:`~moehub.verif.tb.context.TbContext` (a
``HubConfig`` made with ``replace`` is written to ``config.yaml`` in the run folder),
the random test's seeds as its ``seed``/``seeds``, its rows per seed as
``MOEHUB_RELAY_ROWS`` (default 120).

:class:`RelayTB` plays everything around the path. As the relay's remote sources it pushes
relay rows into ``row`` while the R credits allow (at most ``relay_window`` rows between
a row's arrival and its ``rcredit``; a row of an unknown source holds no credit and
leaves the window when the forward unit takes it). As the node's GPUs it returns each
forward row's credit on ``fcredit`` after a random delay and offers received forward rows
on ``fin``. As the sinks it backpressures ``local``, ``fwd`` and ``rcredit`` at random,
in phases of 40 cycles (free-flowing, or long stalls that fill the FIFO).

Checking uses the ports only. The inputs of a cycle and the outputs sampled at its closing
edge go to the model a cycle late, once the next cycle's FIFO level (``queued``) says
whether the forward unit took a row in it (level' = level + push - take); then, in the
Amaranth bench's order (tests/test_rtl_relay_hub.py): the counters must be the model's of
the cycle before (every relay counter lags its events by one cycle; ``fwd_wait``, the held
row's state, does not; ``relay_overflow`` stays 0), the forward credits presented
:data:`CREDIT_LATENCY` cycles before reach the model, ``fin``'s verdict must be the model's
``forward_verdict``, a forward row must go to the model's lowest ready GPU with its tag,
source, token and entries (and one must be offered whenever the model has one ready,
:data:`PREP_CYCLES` after a take), each local report must be the model's next, each relay
credit the model's next in order; a take goes to the model. A bound in cycles catches a
hang. A failure names the config, the seed, the node and the rank.
"""
from __future__ import annotations

import os
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotb.types import Logic

from ...spec.formats import RelayPorts, RelayReason, pack_fields, unpack_fields
from ...spec.relay import ForwardRow, RelayHubModel, RelayRow, global_gpu
from .context import TbContext

#: a forward credit presented in cycle c is the forward unit's again in cycle c + 2
CREDIT_LATENCY = 2
#: a row taken in cycle c is reported and forwarded from cycle c + 2
PREP_CYCLES = 1
PERIOD_NS = 10
#: the random test's rows per seed (``MOEHUB_RELAY_ROWS``)
ENV_ROWS = "MOEHUB_RELAY_ROWS"


# ------------------------------------------------------------------ payloads
def entries(p: dict, n: int) -> tuple:
    """The valid ``(expert, slot)`` entries of a local or forward payload, in order."""
    return tuple((p["expert"][i], p["slot"][i]) for i in range(n) if p["valid"] >> i & 1)


def relay_payload(cfg, src_node, src_rank, tag, token, ents) -> tuple:
    """(row payload, RelayRow) of a relay row; ``ents`` are ``relay_targets`` entries of
    (valid, gpu, expert, slot)."""
    p = dict(src_node=src_node, src_rank=src_rank, tag=tag, token=token,
             valid=sum(int(v) << i for i, (v, *_) in enumerate(ents)),
             gpu=[e[1] for e in ents], expert=[e[2] for e in ents], slot=[e[3] for e in ents])
    targets = tuple((g, x, s, 0.5) for v, g, x, s in ents if v)
    return p, RelayRow(src_node, src_rank, tag, token, targets)


def forward_payload(cfg, rank, fwd, ftag, src_node, src_rank, token, ents) -> tuple:
    """(fin payload, ForwardRow) of a forward row received by hub ``rank``; ``ents`` are
    ``max_targets`` entries of (valid, expert, slot)."""
    p = dict(dst=rank, fwd=fwd, ftag=ftag, src_node=src_node, src_rank=src_rank, token=token,
             valid=sum(int(v) << i for i, (v, *_) in enumerate(ents)),
             expert=[e[1] for e in ents], slot=[e[2] for e in ents])
    return p, ForwardRow(rank, fwd, ftag, src_node, src_rank, token, tuple((x, s) for v, x, s in ents if v))


def random_relay_row(rng, cfg, node, rank, token, bad: float) -> tuple:
    """(payload, RelayRow) of a random relay row (:func:`random_relay_fields`)."""
    src_node, src_rank, tag, ents = random_relay_fields(rng, cfg, node, rank, bad)
    return relay_payload(cfg, src_node, src_rank, tag, token, ents)


def random_relay_fields(rng, cfg, node, rank, bad: float) -> tuple:
    """A relay row for hub (node, rank) as (src_node, src_rank, tag, entries): ``T``
    entries of (valid, gpu, expert, slot), the targets at random entry positions, junk in
    the invalid ones; with probability ``bad`` broken in one of the ways the model checks
    (source node, rank, tag; a GPU outside the node; an expert out of range, a target or
    a slot twice, a slot out of range, no target). The tests' benches draw theirs here too."""
    T = cfg.relay_targets
    top = lambda bits: (1 << bits) - 1          # noqa: E731
    src_node = rng.choice([n for n in range(cfg.nodes) if n != node])
    src_rank, tag = rank, rng.randrange(cfg.tags_per_source)
    k = rng.randint(1, T)
    pairs = rng.sample([(g, x) for g in range(cfg.node_gpus) for x in range(cfg.experts)], k)
    slots = rng.sample(range(cfg.topk), k)
    if rng.random() < bad:
        kind = rng.randrange(9)
        if kind == 0:
            src_node = rng.choice([node, rng.randint(cfg.nodes, top(cfg.node_bits))])
        elif kind == 1:
            src_rank = rng.choice([g for g in range(top(cfg.gpu_bits) + 1) if g != rank])
        elif kind == 2:
            tag = rng.randint(cfg.tags_per_source, top(cfg.tag_bits))
        elif kind == 3:
            pairs[0] = (rng.randint(cfg.node_gpus, top(cfg.gpu_bits)), pairs[0][1])
        elif kind == 4:
            pairs[-1] = (pairs[-1][0], rng.randint(cfg.experts, top(cfg.expert_bits)))
        elif kind == 5 and k < T:
            pairs.append(pairs[0])
            slots.append(0)
        elif kind == 6 and k > 1:
            slots[1] = slots[0]
        elif kind == 7 and (1 << cfg.slot_bits) > cfg.topk:
            slots[0] = rng.randint(cfg.topk, top(cfg.slot_bits))
        else:
            pairs, slots = [], []
    pos = sorted(rng.sample(range(T), len(pairs)))
    ents = [(0, rng.randrange(top(cfg.gpu_bits) + 1), rng.randrange(top(cfg.expert_bits) + 1),
             rng.randrange(cfg.topk)) for _ in range(T)]
    for p, (g, x), s in zip(pos, pairs, slots):
        ents[p] = (1, g, x, s)
    return src_node, src_rank, tag, ents


def random_forward_row(rng, cfg, node, rank, token) -> tuple:
    """A forward row received by hub (node, rank): mostly well formed, else a source field
    over its whole width; experts mostly distinct and in range."""
    M, lay = cfg.max_targets, RelayPorts(cfg)
    top = lambda bits: (1 << bits) - 1          # noqa: E731
    fwd = rng.choice([g for g in range(cfg.node_gpus) if g != rank])
    f = dict(fwd=fwd, ftag=rng.randrange(cfg.forward_tags),
             src_node=rng.choice([n for n in range(cfg.nodes) if n != node]), src_rank=fwd)
    if rng.random() < 0.4:
        k = rng.choice(["fwd", "ftag", "src_node", "src_rank"])
        width = {"fwd": cfg.gpu_bits, "src_rank": cfg.gpu_bits, "src_node": cfg.node_bits,
                 "ftag": lay.ftag_bits}[k]
        f[k] = rng.randint(0, top(width))
    ents = [(rng.random() < 0.6, rng.randrange(top(cfg.expert_bits) + 1), rng.randrange(cfg.topk))
            for _ in range(M)]
    if rng.random() < 0.7:
        xs = rng.sample(range(cfg.experts), M)
        ents = [(v or i == 0, xs[i], s) for i, (v, _, s) in enumerate(ents)]
    return forward_payload(cfg, rank, token=token, ents=ents, **f)


# ------------------------------------------------------------------ the testbench
class RelayTB:
    """The relay control path's Verilog (``dut``) and the model side by side (see the
    module docstring). Stimulus: :attr:`rows` (``(payload, RelayRow)`` to push, in order,
    each when the window allows and, with ``p_row`` < 1, at random), :attr:`fins` (one
    forward row offered a cycle), :attr:`fcredits` (forward credits to present, one a
    cycle) and, with ``auto``, random sinks, forward credits returned by the
    destinations and random forward rows on ``fin`` (``p_fin``). :attr:`events` logs
    ``(cycle, kind, ...)`` of every handshake."""

    def __init__(self, dut, cfg, seed: int, node: int, rank: int, *, auto: bool):
        self.dut, self.cfg, self.seed, self.node, self.rank, self.auto = dut, cfg, seed, node, rank, auto
        self.rng = random.Random(seed)
        self.lay = RelayPorts(cfg)
        self.model = RelayHubModel(cfg, node, rank)
        self.rows, self.fins, self.fcredits = deque(), deque(), deque()
        self.p_row, self.p_fin, self.p_ready = (0.8, 0.2, 0.7) if auto else (1.0, 0.0, 1.0)
        self.ready_hold = None                  # (local, fwd, rcredit) ready forced (directed stalls)
        self.checking = True
        self.cycle = 0                          # the cycle driven now
        self.pushed = deque()                   # RelayRows pushed, not yet taken
        self.outstanding = 0                    # rows between arrival and credit (or take)
        self.out = []                           # forward rows at their destinations: (due, dst, ftag)
        self.applied = []                       # forward credits presented: (cycle the model gets it, dst, ftag)
        self.locals = deque()                   # the model's local reports not yet seen
        self.credits = []                       # relay credits seen
        self.events = []
        self.lagged = None
        self.taken = -10
        self.idle = 0
        self.prev = None
        self.peak_queued = 0

    # ---------------------------------------------------------------- clock and reset
    async def reset(self):
        d = self.dut
        d.node.value, d.rank.value = self.node, self.rank
        self._idle_inputs()
        d.rst.value = 1
        for _ in range(2):
            await RisingEdge(d.clk)
        d.rst.value = 0

    def _idle_inputs(self):
        d = self.dut
        for name in ("row__valid", "fin__valid", "fcredit__valid", "local__ready", "fwd__ready",
                     "rcredit__ready", "row__payload", "fin__payload", "fcredit__payload"):
            getattr(d, name).value = 0
        d.open__ready.value = 1          # (the reduce's opens, taken at once: never a stall here)

    async def step(self):
        """One cycle: drive its inputs, sample it at its closing edge, and check the cycle
        before it (whose take the level now tells)."""
        self._drive()
        await RisingEdge(self.dut.clk)
        s = self._sample()
        if self.prev is not None and self.checking:
            take = self.prev["queued"] + self.prev["push"] - s["queued"]
            self._check(self.prev, take)
        self.prev = s
        self.cycle += 1

    async def cycles(self, n: int):
        for _ in range(n):
            await self.step()

    async def drain(self, limit: int):
        """Step until :meth:`settled`; a hang (cycle ``limit`` reached) fails."""
        while not self.settled():
            await self.step()
            assert self.cycle < limit, f"no progress by cycle {self.cycle}"

    # ---------------------------------------------------------------- drive
    def _drive(self):
        d, rng, cfg, c = self.dut, self.rng, self.cfg, self.cycle
        if self.auto and c % 40 == 0:
            self.p_ready = rng.choice([0.9, 0.7, 0.15])
        push = None
        if self.rows and self.outstanding < cfg.relay_window and (self.p_row >= 1 or rng.random() < self.p_row):
            push = self.rows.popleft()
            d.row__payload.value = pack_fields(self.lay.row, push[0])
            self.pushed.append(push[1])
            self.outstanding += 1
            self.events.append((c, "push", push[1].token))
        d.row__valid.value = int(push is not None)
        ready = self.ready_hold or tuple(int(rng.random() < self.p_ready) for _ in range(3))
        d.local__ready.value, d.fwd__ready.value, d.rcredit__ready.value = ready
        fc = None
        if self.fcredits:
            fc = self.fcredits.popleft()
        elif self.auto:
            due = [o for o in self.out if o[0] <= c]
            if due and rng.random() < 0.6:
                o = rng.choice(due)
                self.out.remove(o)
                fc = o[1:]
        if fc is not None:
            d.fcredit__payload.value = pack_fields(self.lay.fcredit, dict(dst=fc[0], ftag=fc[1]))
            self.applied.append((c + CREDIT_LATENCY, *fc))
            self.events.append((c, "fcredit", *fc))
        d.fcredit__valid.value = int(fc is not None)
        fin = None
        if self.fins:
            fin = self.fins.popleft()
        elif self.auto and (self.rows or self.pushed) and rng.random() < self.p_fin:
            fin = random_forward_row(rng, cfg, self.node, self.rank, rng.randrange(1 << cfg.token_bits))
        if fin is not None:
            d.fin__payload.value = pack_fields(self.lay.fwd, fin[0])
        d.fin__valid.value = int(fin is not None)
        self.driven = dict(push=int(push is not None), ready=ready, fin=fin and fin[1])

    # ---------------------------------------------------------------- sample
    def _sample(self) -> dict:
        d, cfg = self.dut, self.cfg
        s = dict(self.driven, cycle=self.cycle, queued=u(d.queued), row_ready=u(d.row__ready),
                 fin_ready=u(d.fin__ready))
        s["counters"] = {
            "drops": [u(getattr(d, f"relay_drops__{i}")) for i in range(len(RelayReason))],
            "rows": u(d.relay_rows), "local": u(d.relay_local),
            "fwd_rows": [u(getattr(d, f"fwd_rows__{g}")) for g in range(cfg.node_gpus)],
            "fwd_wait": u(d.fwd_wait), "fwd_in": u(d.fwd_in), "overflow": u(d.relay_overflow)}
        for name, lay in (("fwd", self.lay.fwd), ("local", self.lay.local), ("rcredit", self.lay.rcredit)):
            valid = u(getattr(d, f"{name}__valid"))
            s[name] = unpack_fields(lay, u(getattr(d, f"{name}__payload"))) if valid else None
        if s["fin"] is not None:
            s["verdict"] = (u(d.fin_bad_source), u(d.fin_bad_targets), u(d.fin_src))
        self.peak_queued = max(self.peak_queued, s["queued"])
        return s

    # ---------------------------------------------------------------- check
    def _lag(self, now: dict) -> dict:
        want = dict(now if self.lagged is None else self.lagged, fwd_wait=now["fwd_wait"])
        self.lagged = now
        return want

    def model_counters(self) -> dict:
        m = self.model
        return {"drops": list(m.relay_drops), "rows": m.relay_rows, "local": m.relay_local,
                "fwd_rows": list(m.fwd_rows), "fwd_wait": m.fwd_wait(), "fwd_in": m.fwd_in, "overflow": 0}

    def _check(self, s: dict, take: int):
        p, m, cfg, M = s["cycle"], self.model, self.cfg, self.cfg.max_targets
        busy = bool(s["push"] or s["fin"] is not None)
        assert s["row_ready"] and s["fin_ready"], f"cycle {p}: row or fin not ready"
        want = self._lag(self.model_counters())
        assert s["counters"] == want, f"cycle {p}: counters {s['counters']}, model a cycle before {want}"
        for a in [a for a in self.applied if a[0] == p]:
            m.forward_credit(a[1], a[2])
        self.applied = [a for a in self.applied if a[0] > p]
        # ---- a received forward row's verdict
        if s["fin"] is not None:
            fin = s["fin"]
            bs, bt, src = s["verdict"]
            got = RelayReason.FWD_BAD_SOURCE if bs else RelayReason.FWD_BAD_TARGETS if bt else None
            want_v = m.forward_verdict(fin)
            assert got == want_v, f"cycle {p}: forward row {fin}: verdict {got}, model {want_v}"
            if want_v is None:
                assert src == global_gpu(cfg, fin.src_node, fin.src_rank), f"cycle {p}: fin_src {src}"
            m.forward_row(fin)
            self.events.append((p, "fin", got))
        r_local, r_fwd, r_credit = s["ready"]
        # ---- forward rows
        if s["fwd"] is not None:
            busy = True
            f = s["fwd"]
            ready = m.ready_dests()
            assert ready and f["dst"] == ready[0], f"cycle {p}: forward to {f['dst']}, model ready {ready}"
            if r_fwd:
                e = m.emit(f["dst"])
                got = (f["ftag"], f["fwd"], f["src_node"], f["src_rank"], f["token"], entries(f, M))
                assert got == (e.ftag, e.fwd, e.src_node, e.src_rank, e.token, e.targets), \
                    f"cycle {p}: forward row {got}, model {e}"
                if self.auto:                       # (directed runs return forward credits themselves)
                    self.out.append((p + self.rng.randint(1, 12), e.dst, e.ftag))
                self.events.append((p, "fwd", e.dst, e.ftag, e.token, e.targets))
        elif p > self.taken + PREP_CYCLES:
            assert not m.ready_dests(), f"cycle {p}: the model can forward to {m.ready_dests()}, the design offers none"
        # ---- local reports
        if s["local"] is not None and r_local:
            busy = True
            lp = s["local"]
            assert self.locals, f"cycle {p}: a local report {lp}, the model has none"
            w = self.locals.popleft()
            got = (lp["src"], lp["token"], entries(lp, M))
            assert got == (w.src, w.token, w.targets), f"cycle {p}: local report {got}, model {w}"
            self.events.append((p, "local", *got))
        # ---- relay credits
        if s["rcredit"] is not None:
            busy = True
            if r_credit:
                cr = (s["rcredit"]["src"], s["rcredit"]["tag"])
                self.credits.append(cr)
                assert self.credits == m.credits[:len(self.credits)], \
                    f"cycle {p}: relay credits {self.credits}, model {m.credits}"
                self.outstanding -= 1
                self.events.append((p, "credit", *cr))
        # ---- a row taken from the FIFO by the forward unit
        assert take in (0, 1), f"cycle {p}: FIFO level went from {s['queued']} by {take} rows"
        if take:
            busy = True
            assert self.pushed, f"cycle {p}: the forward unit took a row never pushed"
            row = self.pushed.popleft()
            if m.relay_verdict(row) == RelayReason.FWD_BAD_SOURCE:
                self.outstanding -= 1               # (no credit: it leaves the window as it is taken)
            fx = m.relay_row(row)
            if fx.local is not None:
                self.locals.append(fx.local)
            self.taken = p
            self.events.append((p, "take", row.token))
        self.idle = 0 if busy else self.idle + 1

    def settled(self) -> bool:
        """Nothing left to do: every row pushed and handled, every forward's credit back,
        the sinks drained, and a few quiet cycles."""
        return not (self.rows or self.pushed or self.model.queue or self.out or self.applied
                    or self.locals or self.fins or self.fcredits) and self.idle >= 6

    def finish(self):
        """The end of a run: the relay credits and the counters are the model's (no event
        in the quiet cycles before, so no lag)."""
        m = self.model
        assert self.credits == m.credits, f"relay credits {self.credits}, model {m.credits}"
        assert not self.locals, f"local reports never made: {list(self.locals)}"
        got = self.prev["counters"]
        assert got == self.model_counters(), f"counters at the end {got}, model {self.model_counters()}"

    def named(self, e: AssertionError) -> AssertionError:
        return AssertionError(f"{self.cfg.name} seed {self.seed} (node {self.node}, rank {self.rank}): {e}")


def u(handle) -> int:
    """A port's value as an unsigned int (a one-bit port is a ``Logic``)."""
    v = handle.value
    return int(v) if isinstance(v, Logic) else v.to_unsigned()


def _context():
    ctx = TbContext.from_env()
    return ctx, ctx.cfg


def _clock(dut):
    Clock(dut.clk, PERIOD_NS, unit="ns").start()


# ------------------------------------------------------------------ the tests
@cocotb.test()
async def relay_random(dut):
    """Seeded random runs (``seeds`` seeds from ``seed``): good and broken relay rows,
    random sinks, forward credits and forward rows in, against the model."""
    ctx, cfg = _context()
    rows = int(os.environ.get(ENV_ROWS, "120"))
    _clock(dut)
    for seed in range(ctx.seed, ctx.seed + ctx.seeds):
        node, rank = seed % cfg.nodes, (seed + 1) % cfg.node_gpus
        tb = RelayTB(dut, cfg, seed, node, rank, auto=True)
        cocotb.log.info(f"relay_random: {cfg.name} seed {seed} (node {node}, rank {rank}), {rows} rows")
        tb.rows.extend(random_relay_row(tb.rng, cfg, node, rank, (k + 1) % (1 << cfg.token_bits), bad=0.3)
                       for k in range(rows))
        try:
            await tb.reset()
            await tb.drain(60 * rows + 500)
            tb.finish()
            m = tb.model
            assert m.relay_rows > 0 and m.forwards and tb.credits, (m.relay_rows, len(m.forwards))
            if rows >= 100:                    # (a long run reaches every drop reason and a stall)
                assert all(m.relay_drops) and m.fwd_in > 0, (m.relay_drops, m.fwd_in)
                assert tb.peak_queued >= cfg.relay_window - 1, tb.peak_queued
        except AssertionError as e:
            raise tb.named(e) from e
        cocotb.log.info(f"relay_random seed {seed}: {m.relay_rows} rows, {len(m.forwards)} forwards, "
                        f"{m.relay_local} local, drops {m.relay_drops}, {m.fwd_in} forward rows in, "
                        f"peak FIFO {tb.peak_queued}, {tb.cycle} cycles")


@cocotb.test()
async def relay_directed(dut):
    """Hub (node 0, rank 1) of a config with >= 3 GPUs per node, one forward tag and
    >= 3 tags per source (tests' ``R2``: 2 nodes x 4 GPUs): a row only for this GPU; a row
    for two other GPUs; a row that waits for its GPU's forward credit; a row for each drop
    reason; received forward rows (good, unknown source twice, bad targets); the window
    overrun (a row past the FIFO counted lost). Checked against the model every cycle and
    against the outcomes written here."""
    ctx, cfg = _context()
    G = cfg.node_gpus
    assert G >= 3 and cfg.forward_tags == 1 and cfg.tags_per_source >= 3 and cfg.relay_targets >= 3 \
        and cfg.experts >= 3 and (1 << cfg.gpu_bits) > G + 1, f"{cfg.name}: not a config for the directed cases"
    _clock(dut)
    tb = RelayTB(dut, cfg, 0, 0, 1, auto=False)
    T, M = cfg.relay_targets, cfg.max_targets
    NONE = (0, 0, 0, 0)
    src = global_gpu(cfg, 1, 1)

    def row(token, ents, tag, src_rank=1):
        ents = list(ents) + [NONE] * (T - len(ents))
        return relay_payload(cfg, 1, src_rank, tag, token, ents)

    def fin(token, fwd, src_node, src_rank, ents):
        ents = list(ents) + [(0, 0, 0)] * (M - len(ents))
        return forward_payload(cfg, 1, fwd, 0, src_node, src_rank, token, ents)

    try:
        await tb.reset()
        await tb.cycles(2)
        # (a) every target on this GPU: a local report and the credit, no forward
        tb.rows.append(row(1, [(1, 1, 0, 0), (1, 1, 2, 1)], tag=0))
        await tb.cycles(7)
        # (b) targets on GPUs G-1 and 0: two forwards (tag 0 each, lowest GPU first), the credit after both
        tb.rows.append(row(2, [(1, G - 1, 1, 0), NONE, (1, 0, 2, 2)], tag=1))
        await tb.cycles(9)
        # (c) GPU 0 again: its only forward tag is out, so the row waits for its credit
        tb.rows.append(row(3, [(1, 0, 0, 1)], tag=2))
        await tb.cycles(6)
        tb.fcredits.append((0, 0))
        await tb.cycles(7)
        # (d) FWD_BAD_GPU (a GPU outside the node): counted, its credit back
        tb.rows.append(row(4, [(1, G, 0, 0)], tag=0))
        # (e) FWD_BAD_SOURCE (another rail): counted, no credit
        tb.rows.append(row(5, [(1, 0, 0, 0)], tag=1, src_rank=2))
        # (f) FWD_BAD_TARGETS (one (gpu, expert) twice): counted, its credit back
        tb.rows.append(row(6, [(1, 2, 1, 0), (1, 2, 1, 1)], tag=1))
        await tb.cycles(8)
        # received forward rows: good (from GPU 2, source node 1), unknown source (forwarder
        # outside the node; original source in this node), bad targets (an expert twice)
        tb.fins.extend([fin(7, 2, 1, 2, [(1, 0, 0), (1, 2, 1)]), fin(8, G + 1, 1, G + 1, [(1, 0, 0)]),
                        fin(9, 2, 0, 2, [(1, 0, 0)]), fin(10, G - 1, 1, G - 1, [(1, 1, 0), (0, 0, 0), (1, 1, 2)])])
        await tb.drain(tb.cycle + 40)
        tb.finish()
    except AssertionError as e:
        raise tb.named(e) from e

    ev = tb.events
    at = {e[2]: e[0] for e in ev if e[1] == "push"}
    outs = lambda lo, hi: [e[1:] for e in ev if lo <= e[0] < hi and e[1] in ("fwd", "local", "credit")]  # noqa: E731
    # (a)
    assert outs(at[1], at[2]) == [("local", src, 1, ((0, 0), (2, 1))), ("credit", src, 0)], ev
    # (b): GPU 0 first, then GPU G-1, one entry each, tag 0; the credit in a later cycle
    b = [e for e in ev if e[1] == "fwd" and e[4] == 2]
    assert [(e[2], e[3], e[5]) for e in b] == [(0, 0, ((2, 2),)), (G - 1, 0, ((1, 0),))], ev
    cr_b = [e for e in ev if e[1] == "credit" and e[3] == 1]
    assert cr_b and cr_b[0][0] > b[-1][0], ev
    # (c): forwarded CREDIT_LATENCY cycles after GPU 0's credit was presented, then credited
    c = [e for e in ev if e[1] == "fwd" and e[4] == 3]
    fc = [e[0] for e in ev if e[1] == "fcredit"][0]
    assert len(c) == 1 and c[0][0] == fc + CREDIT_LATENCY, ev
    assert [e[2:] for e in ev if e[1] == "credit"] == [(src, 0), (src, 1), (src, 2), (src, 0), (src, 1)], ev
    # (d)-(f): no output but the two credits (counted above: nothing for the other rail)
    assert not [e for e in ev if e[1] in ("fwd", "local") and e[0] >= at[4]], ev
    assert [e[2] for e in ev if e[1] == "fin"] == [None, RelayReason.FWD_BAD_SOURCE, RelayReason.FWD_BAD_SOURCE,
                                                  RelayReason.FWD_BAD_TARGETS], ev
    drops = [0] * len(RelayReason)
    drops[RelayReason.FWD_BAD_GPU] = 1
    drops[RelayReason.FWD_BAD_SOURCE] = 1 + 2
    drops[RelayReason.FWD_BAD_TARGETS] = 1 + 1
    fwd_rows = [0] * G
    fwd_rows[0], fwd_rows[G - 1] = 2, 1
    assert tb.prev["counters"] == {"drops": drops, "rows": 3, "local": 1, "fwd_rows": fwd_rows, "fwd_wait": 0,
                                   "fwd_in": 1, "overflow": 0}, tb.prev["counters"]

    # (g) the window overrun (the model does not follow: a source without credits): every
    # output stalled, relay_window + 3 rows back to back -- the forward unit holds one, the
    # FIFO the next relay_window + 1 (its output register is one entry beyond the window),
    # the last is counted lost
    tb.checking, tb.ready_hold, tb.outstanding = False, (0, 0, 0), -cfg.relay_window - 3
    tb.rows.extend(row(20 + k, [(1, 2, 0, 0)], tag=k % cfg.tags_per_source) for k in range(cfg.relay_window + 3))
    await tb.cycles(cfg.relay_window + 3 + 4)
    got = (tb.prev["counters"]["overflow"], tb.prev["queued"])
    assert got == (1, cfg.relay_window + 1), f"overrun: (relay_overflow, queued) {got}"
