"""The relay hub's control path (moehub/rtl/relay/hub.py: the relay_window-deep row FIFO,
the forward unit, the forward check, the relay counters) against the reference model
(moehub/spec/relay.py) in the Amaranth simulator, in lock-step.

The bench plays the relay's sources: it pushes relay rows (good ones and a share broken
in each way the model checks) into ``row`` whenever the R credits allow -- at most
``relay_window`` rows between a row's arrival and its credit (a row of an unknown source
holds no credit: it counts until the forward unit takes it) -- and the node's GPUs: it
returns forward credits after a random delay and offers received forward rows on
``fin``. Every output is backpressured at random, in phases of long stalls so that the
FIFO fills to the window. Each row the forward unit takes from the FIFO must be the next
row pushed, unchanged (the FIFO loses, reorders, refuses nothing), and goes to
:class:`~moehub.spec.relay.RelayHubModel` in that cycle; each local request must be the
model's next, each forward row the model's (lowest ready GPU, tag, entries), the relay
credits the model's in order, each forward-row verdict the model's ``forward_verdict``,
and the counters (rows, local rows, forwards per GPU, forward rows in, drops per reason,
rows lost to overflow) the model's of the cycle before, every cycle (the relay counters
lag their events by one cycle), the forwards waiting (no counter) the model's of the
cycle. A bound in cycles catches a hang; a failure names the seed.

The benches run on :class:`RelayControl`; the whole :class:`RelayHub`, whose relay rows
come in on its lanes, is checked here for its ports and its registers read over the CSR
bus, and on a whole layer in tests/test_rtl_relay_hub_whole.py. A planted bug (two
forward rows' destinations swapped in the unit: the row for the lower GPU goes to the
higher one) must fail the bench.
"""
import random

import pytest
from amaranth.sim import Simulator

from moehub.rtl.hub import MoEHub
from moehub.rtl.relay.hub import RelayControl, RelayHub
from moehub.rtl.relay.reduce_unit import Op
from moehub.rtl.relay.layouts import RelayLayouts
from moehub.spec.config import load_hub_config
from moehub.spec.csr_map import CsrMap
from moehub.spec.formats import ReduceReason, RelayFormats, RelayReason, RowClass
from moehub.spec.relay import ForwardRow, RelayRow, global_gpu
from moehub.verif.formal.plant import broken_class
from test_rtl_relay import CREDIT_LATENCY, R2, R3, Bench, entry_weight, random_entries, run_bench

#: 2 nodes x 2 GPUs, 2 tags per source (a window of 2 relay rows), 1 forward tag
R22 = load_hub_config("tiny").replace(sources=4, nodes=2, gpus_per_node=2, relay=True, forward_tags=1,
                                      topk=3, max_targets=3, tags_per_source=2)


def random_forward(rng, cfg, node, rank):
    """(payload fields, ForwardRow) of a received forward row at hub (node, rank): mostly
    well formed, else any field over its whole width."""
    M = cfg.max_targets
    top = lambda bits: (1 << bits) - 1          # noqa: E731
    others = [g for g in range(cfg.node_gpus) if g != rank]
    fwd = rng.choice(others)
    f = dict(fwd=fwd, ftag=rng.randrange(cfg.forward_tags),
             src_node=rng.choice([n for n in range(cfg.nodes) if n != node]), src_rank=fwd)
    if rng.random() < 0.4:
        k = rng.choice(["fwd", "ftag", "src_node", "src_rank"])
        width = {"fwd": cfg.gpu_bits, "src_rank": cfg.gpu_bits, "src_node": cfg.node_bits,
                 "ftag": RelayLayouts(cfg).ftag_bits}[k]
        f[k] = rng.randint(0, top(width))
    ent = [(rng.random() < 0.6, rng.randrange(top(cfg.expert_bits) + 1), rng.randrange(cfg.topk))
           for _ in range(M)]
    if rng.random() < 0.7:                       # mostly distinct experts in range, to pass the check
        xs = rng.sample(range(cfg.experts), M)
        ent = [(v or i == 0, xs[i], s) for i, (v, _, s) in enumerate(ent)]
    f["token"] = rng.randrange(1 << cfg.token_bits)
    targets = tuple((x, s) for v, x, s in ent if v)
    return (f, ent), ForwardRow(dst=rank, targets=targets, **f)


def forward_word(cfg, f, ent, chunk=0) -> int:
    """A forward row's chunk as one input lane's word of a relay hub (RelayFormats
    ``forward_row``): ``f`` its header fields, ``ent`` its (valid, expert, slot) entries."""
    entries = {f"{k}{i}": v for i, e in enumerate(ent) for k, v in zip(("valid", "expert", "slot"), e)}
    return RelayFormats(cfg).forward_row.pack(cls=RowClass.FORWARD, chunk=chunk, **f, **entries)


def offer_forward(ctx, dut, cfg, f, ent):
    """A forward row offered on RelayControl's ``fin``. Returns its verdict ports (bad
    source, bad targets, original source)."""
    p = dut.fin.payload
    ctx.set(p.dst, f.get("dst", 0))
    for k in ("fwd", "ftag", "src_node", "src_rank", "token"):
        ctx.set(getattr(p, k), f[k])
    ctx.set(p.valid, sum(int(v) << i for i, (v, _, _) in enumerate(ent)))
    for i, (_, x, sl) in enumerate(ent):
        ctx.set(p.expert[i], x)
        ctx.set(p.slot[i], sl)
    ctx.set(dut.fin.valid, 1)
    return dut.fin_bad_source, dut.fin_bad_targets, dut.fin_src


class HubBench(Bench):
    """The relay path (``io``: a RelayControl or a RelayHub; ``rc``: its RelayControl) and
    the model side by side (see the module docstring); the forward unit's bench drives its
    row, outputs and credits."""

    def __init__(self, cfg, io, rc, ctx, rng, node, rank):
        super().__init__(cfg, io, ctx, rng, node, rank)
        self.opened = []                     # the sums of good rows taken, not yet seen on open
        self.io, self.rc = io, rc
        self.pushed = []
        self.outstanding = 0                 # rows between arrival and credit (or take, unknown source)
        self.peak_queued = 0
        self.fins = 0
        self.log = []                        # (cycle, event, ...) for the latency figures

    def counters(self):
        ctx, io, G = self.ctx, self.io, self.cfg.node_gpus
        return {"drops": [ctx.get(io.relay_drops[i]) for i in range(len(RelayReason))],
                "rows": ctx.get(io.relay_rows), "local": ctx.get(io.relay_local),
                "fwd_rows": [ctx.get(io.fwd_rows[g]) for g in range(G)],
                "fwd_wait": ctx.get(io.fwd_wait), "fwd_in": ctx.get(io.fwd_in),
                "overflow": ctx.get(io.relay_overflow)}

    def check_counters(self):
        m = self.model
        want = self.lag({"drops": list(m.relay_drops), "rows": m.relay_rows, "local": m.relay_local,
                         "fwd_rows": list(m.fwd_rows), "fwd_wait": m.fwd_wait(), "fwd_in": m.fwd_in,
                         "overflow": 0})
        got = self.counters()
        assert got == want, f"cycle {self.cycle}: counters {got}, model a cycle before {want}"

    def row_fields(self, p):
        """A row payload as (src_node, src_rank, tag, token, valid, entries of the valid bits)."""
        ctx, T = self.ctx, self.cfg.relay_targets
        v = ctx.get(p.valid)
        return (ctx.get(p.src_node), ctx.get(p.src_rank), ctx.get(p.tag), ctx.get(p.token), v,
                tuple((ctx.get(p.gpu[i]), ctx.get(p.expert[i]), ctx.get(p.slot[i])) for i in range(T)))

    def set_fin(self, fe):
        (f, ent) = fe
        return offer_forward(self.ctx, self.io, self.cfg, dict(f, dst=self.rank), ent)

    def open_want(self, row, fields):
        """The open of a good relay row: its source node, token, and per entry valid, slot
        and the bench's weight (``fields``: the row as pushed)."""
        T = self.cfg.relay_targets
        ent = fields[5]
        return (row.src_node, row.token, fields[4],
                tuple(e[2] if fields[4] >> i & 1 else None for i, e in enumerate(ent)),
                tuple(entry_weight(row.token, i) if fields[4] >> i & 1 else None for i in range(T)))

    def open_fields(self, p):
        ctx, T = self.ctx, self.cfg.relay_targets
        v = ctx.get(p.valid)
        return (ctx.get(p.src_node), ctx.get(p.token), v,
                tuple(ctx.get(p.slot[i]) if v >> i & 1 else None for i in range(T)),
                tuple(ctx.get(p.weight[i]) if v >> i & 1 else None for i in range(T)))

    async def run(self, rows, bad, p_fin=0.2):
        ctx, io, rc, cfg, m, rng = self.ctx, self.io, self.rc, self.cfg, self.model, self.rng
        M, W = cfg.max_targets, cfg.relay_window
        fu_row = rc.fu.row
        opens = not isinstance(io, RelayHub)           # (the whole top: the reduce takes them)
        await place(ctx, io, self.node, self.rank)
        await reduce_cleared(ctx, io)
        token, sent, idle, p_ready, fin = 0, 0, 0, 0.7, None
        while sent < rows or m.queue or self.pushed or ctx.get(io.rcredit.valid) or self.out or idle < 6 \
                or (opens and self.opened):
            self.check_counters()
            if self.cycle % 40 == 0:                 # phases: free-flowing, or long stalls that fill the FIFO
                p_ready = rng.choice([0.9, 0.7, 0.15])
            self.apply_credits()
            push = None
            if sent < rows and self.outstanding < W and rng.random() < 0.8:
                token = (token + 1) % (1 << cfg.token_bits)
                fields, row = random_entries(rng, cfg, self.node, self.rank, bad)
                push = RelayRow(row.src_node, row.src_rank, row.tag, token, row.targets)
                self.set_row(fields, token)
            ctx.set(io.row.valid, push is not None)
            self.drive_outputs(p_ready)
            if opens:                                # (RelayControl: the reduce's side, at random)
                ctx.set(io.open.ready, rng.random() < p_ready)
                if ctx.get(io.open.valid) and ctx.get(io.open.ready):
                    assert self.opened, f"cycle {self.cycle}: an open for no good row taken"
                    want, got = self.opened.pop(0), self.open_fields(io.open.payload)
                    assert got == want, f"cycle {self.cycle}: open {got}, the row taken {want}"
            # a forward row offered on fin (never refused)
            if fin is None and sent < rows and rng.random() < p_fin:
                fe, fin = random_forward(rng, cfg, self.node, self.rank)
                verdict = self.set_fin(fe)
            ctx.set(io.fin.valid, fin is not None)
            busy = False
            # ---- the cycle's handshakes, against the model
            if fin is not None:
                want = m.forward_verdict(fin)
                bs, bt, src = verdict
                got = (RelayReason.FWD_BAD_SOURCE if ctx.get(bs) else
                       RelayReason.FWD_BAD_TARGETS if ctx.get(bt) else None)
                assert got == want, f"cycle {self.cycle}: forward row {fin}: verdict {got}, model {want}"
                if want is None:
                    assert ctx.get(src) == global_gpu(cfg, fin.src_node, fin.src_rank)
                assert ctx.get(io.fin.ready), f"cycle {self.cycle}: {fin} refused"
                m.forward_row(fin)
                self.fins += 1
                fin = None
            out_busy, credited = self.check_outputs(M)
            busy = busy or out_busy
            if credited:
                self.outstanding -= 1
            if ctx.get(fu_row.valid) and ctx.get(fu_row.ready):
                busy = True
                fields, row = self.pushed.pop(0)
                got = self.row_fields(fu_row.payload)
                assert got == fields, f"cycle {self.cycle}: the FIFO gave {got}, pushed {fields}"
                if m.relay_verdict(row) == RelayReason.FWD_BAD_SOURCE:
                    self.outstanding -= 1            # (no credit: it leaves the window as it is taken)
                fx = m.relay_row(row)
                if fx.drop is None:
                    self.opened.append(self.open_want(row, got))
                self.taken = self.cycle
                if fx.local is not None:
                    self.locals.append(fx.local)
                self.log.append((self.cycle, "take", row.token))
            if push is not None:
                busy = True
                assert ctx.get(io.row.ready), f"cycle {self.cycle}: the row FIFO refused a row"
                self.pushed.append((self.row_fields(io.row.payload), push))
                self.outstanding += 1
                sent += 1
                self.log.append((self.cycle, "push", push.token))
            self.peak_queued = max(self.peak_queued, ctx.get(io.queued))
            idle = 0 if busy else idle + 1
            await ctx.tick()
            self.cycle += 1
            assert self.cycle < 60 * rows + 500, f"no progress by cycle {self.cycle}"
        self.check_counters()
        assert self.credits == m.credits and not self.locals and not m.queue and not self.pushed
        assert not opens or not self.opened, f"{len(self.opened)} opens never came"


def simulate(cfg, seed, rows=120, bad=0.3, node=0, rank=1, top=RelayControl):
    """Run the bench on ``top(cfg)``; returns it (an AssertionError names the seed)."""
    dut = top(cfg)
    rc = dut.relay if isinstance(dut, RelayHub) else dut
    return run_bench(dut, lambda ctx, rng: HubBench(cfg, dut, rc, ctx, rng, node, rank), cfg, seed,
                     rows, bad, node, rank)


def _check_reach(b, cfg):
    m = b.model
    assert m.relay_rows > 30 and b.forwarded > 30 and m.relay_local > 5, (m.relay_rows, b.forwarded)
    assert all(m.relay_drops), m.relay_drops
    assert m.fwd_in > 3 and b.fins > m.fwd_in
    # the FIFO filled to the window (less the row the forward unit holds) and never refused
    # (every push asserted ready, relay_overflow 0 every cycle)
    assert cfg.relay_window - 1 <= b.peak_queued <= cfg.relay_window, b.peak_queued


@pytest.mark.parametrize("cfg", [R2, R3, R22], ids=["2x4", "3x3", "2x2"])
@pytest.mark.parametrize("seed", range(2))
def test_relay_control_random_against_model(cfg, seed):
    b = simulate(cfg, seed, node=seed % cfg.nodes, rank=(seed + 1) % cfg.node_gpus)
    _check_reach(b, cfg)


def test_relay_hub_refuses_non_relay():
    tiny = load_hub_config("tiny")
    for top in (RelayHub, RelayControl):
        with pytest.raises(ValueError, match=r"\.relay = False"):
            top(tiny)


# ------------------------------------------------------------------ directed cases
def entry(gpu, expert, slot, valid=1):
    return dict(valid=valid, gpu=gpu, expert=expert, slot=slot)


NONE = entry(0, 0, 0, valid=0)
#: where the register test puts the reduce's accumulators (RED_ACC_BASE)
ACC_BASE = 0x10000
PSTAGE_BASE = 0x40000


async def csr_write(ctx, dut, name, value, index=0):
    """One register write on the top's CSR bus (a cycle)."""
    reg = CsrMap(dut.cfg).registers[name]
    ctx.set(dut.csr.addr, reg.offset + index * reg.words)
    ctx.set(dut.csr.w_data, value)
    ctx.set(dut.csr.w_stb, 1)
    await ctx.tick()
    ctx.set(dut.csr.w_stb, 0)


async def csr_read(ctx, dut, name, index=0):
    """One register read on the top's CSR bus (the data two cycles after the strobe)."""
    reg = CsrMap(dut.cfg).registers[name]
    ctx.set(dut.csr.addr, reg.offset + index * reg.words)
    ctx.set(dut.csr.r_stb, 1)
    await ctx.tick()
    ctx.set(dut.csr.r_stb, 0)
    await ctx.tick()
    return ctx.get(dut.csr.r_data)


async def place(ctx, dut, node, rank):
    """The relay's node and rank: RelayControl's ports, or (the whole top) software's writes
    of NODE_ID and LOCAL_RANK, which the relay reads from the hub's CSR bank."""
    if isinstance(dut, RelayHub):
        await csr_write(ctx, dut, "NODE_ID", node)
        await csr_write(ctx, dut, "LOCAL_RANK", rank)
    else:
        ctx.set(dut.node, node)
        ctx.set(dut.rank, rank)


async def reduce_cleared(ctx, dut):
    """(The whole top) until the reduce's clearing sweep after reset is over: the relay
    takes no row before it can open the row's sum."""
    if isinstance(dut, RelayHub):
        await ctx.tick().until(~dut.red_clearing)


async def _directed(ctx, dut, cfg):
    """Hub (node 0, rank 1) of R2 (2 nodes x 4 GPUs, window 3): the cases of
    ``test_relay_hub_directed``; returns the events seen, by cycle."""
    rc = dut.relay if isinstance(dut, RelayHub) else dut
    b = HubBench(cfg, dut, rc, ctx, random.Random(0), 0, 1)
    await place(ctx, dut, 0, 1)
    for s in (dut.local, dut.fwd, dut.rcredit) + (() if isinstance(dut, RelayHub) else (dut.open,)):
        ctx.set(s.ready, 1)
    await reduce_cleared(ctx, dut)
    log = []

    async def cycle(n=1):
        for _ in range(n):
            c = b.cycle
            assert ctx.get(dut.row.ready)
            if ctx.get(dut.fwd.valid) and ctx.get(dut.fwd.ready):
                p = dut.fwd.payload
                log.append((c, "fwd", ctx.get(p.dst), ctx.get(p.ftag), ctx.get(p.token), b.entries(p, 3)))
            if ctx.get(dut.local.valid) and ctx.get(dut.local.ready):
                log.append((c, "local", ctx.get(dut.local.payload.src), ctx.get(dut.local.payload.token),
                            b.entries(dut.local.payload, 3)))
            if ctx.get(dut.rcredit.valid) and ctx.get(dut.rcredit.ready):
                log.append((c, "credit", ctx.get(dut.rcredit.payload.src), ctx.get(dut.rcredit.payload.tag)))
            await ctx.tick()
            b.cycle += 1
            ctx.set(dut.row.valid, 0)
            ctx.set(dut.fin.valid, 0)
            ctx.set(dut.fcredit.valid, 0)

    async def push(entries, token, src_node=1, src_rank=1, tag=0):
        b.set_row(dict(src_node=src_node, src_rank=src_rank, tag=tag, entries=entries), token)
        ctx.set(dut.row.valid, 1)
        log.append((b.cycle, "push", token))
        await cycle()

    # (a) all targets on this GPU: a local request and the credit, no forward
    await push([entry(1, 0, 0), entry(1, 2, 1), NONE], 1, tag=0)
    await cycle(6)
    # (b) targets on GPUs 0 and 3: two forwards (tag 0 each), the credit after them
    await push([entry(3, 1, 0), NONE, entry(0, 2, 2)], 2, tag=1)
    await cycle(8)
    # (c) GPU 0 again: its only forward tag is out, so the row waits for the credit
    await push([entry(0, 0, 1), NONE, NONE], 3, tag=2)
    await cycle(5)
    ctx.set(dut.fcredit.valid, 1)
    ctx.set(dut.fcredit.payload.dst, 0)
    ctx.set(dut.fcredit.payload.ftag, 0)
    log.append((b.cycle, "fcredit", 0))
    await cycle(6)
    # (d) a relay row naming a GPU outside the node: FWD_BAD_GPU, counted, its credit back
    await push([entry(5, 0, 0), NONE, NONE], 4, tag=0)
    # (e) a relay row of another rail: FWD_BAD_SOURCE, counted, no credit
    await push([entry(0, 0, 0), NONE, NONE], 5, src_rank=2, tag=1)
    await cycle(6)
    # received forward rows: a good one, an unknown source (forwarder outside the node;
    # the original source in this node), bad targets (an expert twice)
    fins = [dict(fwd=2, ftag=0, src_node=1, src_rank=2, token=7, valid=0b011, expert=[0, 2, 0]),
            dict(fwd=5, ftag=0, src_node=1, src_rank=5, token=8, valid=0b001, expert=[0, 0, 0]),
            dict(fwd=2, ftag=0, src_node=0, src_rank=2, token=9, valid=0b001, expert=[0, 0, 0]),
            dict(fwd=3, ftag=0, src_node=1, src_rank=3, token=10, valid=0b101, expert=[1, 0, 1])]
    verdicts = []
    for f in fins:
        head = {k: f[k] for k in ("fwd", "ftag", "src_node", "src_rank", "token")}
        ent = [(f["valid"] >> i & 1, x, 0) for i, x in enumerate(f["expert"])]
        sigs = offer_forward(ctx, dut, cfg, dict(head, dst=1), ent)
        verdicts.append(tuple(ctx.get(v) for v in sigs))
        await cycle()
    await cycle(2)
    counters = b.counters()
    # (f) the window overrun: all outputs stalled, window + 3 rows pushed back to back (the
    # forward unit holds one, the FIFO the next relay_window + 1: its output register is
    # one entry beyond the window): the last is counted lost
    for s in (dut.local, dut.fwd, dut.rcredit):
        ctx.set(s.ready, 0)
    for k in range(cfg.relay_window + 3):
        await push([entry(2, 0, 0), NONE, NONE], 20 + k, tag=k % cfg.tags_per_source)
    await cycle(3)
    overrun = (ctx.get(dut.relay_overflow), ctx.get(dut.queued))
    return log, verdicts, counters, overrun


def _check_directed(log, verdicts, counters, overrun, cfg):
    ev = lambda kind, *key: [e for e in log if e[1] == kind and e[2:2 + len(key)] == key]  # noqa: E731
    pushes = {e[2]: e[0] for e in log if e[1] == "push"}
    # (a) local (source node 1 rank 1 = global 5, token 1, both entries), the credit, no forward
    assert [e[1:] for e in log if e[1] != "push" and e[0] < pushes[2]] == \
        [("local", 5, 1, ((0, 0), (2, 1))), ("credit", 5, 0)], log
    # (b) forwards to GPU 0 then GPU 3, tag 0, one entry each; then the credit (5, 1)
    b_fwd = [e for e in log if e[1] == "fwd" and e[4] == 2]
    assert [(e[2], e[3], e[5]) for e in b_fwd] == [(0, 0, ((2, 2),)), (3, 0, ((1, 0),))], log
    cr_b = ev("credit", 5, 1)
    assert len(cr_b) == 1 and cr_b[0][0] > b_fwd[-1][0], log
    # (c) waits for GPU 0's forward credit; forwarded CREDIT_LATENCY cycles after it
    c_fwd = [e for e in log if e[1] == "fwd" and e[4] == 3]
    fc = [e[0] for e in log if e[1] == "fcredit"][0]
    assert len(c_fwd) == 1 and c_fwd[0][0] == fc + CREDIT_LATENCY, log
    assert ev("credit", 5, 2)
    # (d) FWD_BAD_GPU: its credit (5, 0) returned a second time; (e) FWD_BAD_SOURCE: no credit
    assert len(ev("credit", 5, 0)) == 2 and not ev("credit", 6), log
    assert not [e for e in log if e[1] in ("fwd", "local") and e[-2:-1] in ((4,), (5,))]
    # forward rows in: good (source node 1 rank 2 = global 6), unknown source twice, bad targets
    assert verdicts[0] == (0, 0, 6) and [v[:2] for v in verdicts[1:]] == [(1, 0), (1, 0), (0, 1)], verdicts
    drops = [0] * len(RelayReason)
    drops[RelayReason.FWD_BAD_GPU] = 1
    drops[RelayReason.FWD_BAD_SOURCE] = 1 + 2
    drops[RelayReason.FWD_BAD_TARGETS] = 1
    assert counters == {"drops": drops, "rows": 3, "local": 1, "fwd_rows": [2, 0, 0, 1], "fwd_wait": 0,
                        "fwd_in": 1, "overflow": 0}, counters
    assert overrun == (1, cfg.relay_window + 1), overrun


def _latency(log):
    """(push -> first forward, push -> local request, push -> credit) of rows 1 and 2, in cycles."""
    at = lambda kind, tok: min(e[0] for e in log if e[1] == kind and  # noqa: E731
                               (e[4] if kind == "fwd" else e[3] if kind == "local" else None) == tok)
    pushes = {e[2]: e[0] for e in log if e[1] == "push"}
    credit_a = min(e[0] for e in log if e[1] == "credit")
    return {"local": at("local", 1) - pushes[1], "credit_local_only": credit_a - pushes[1],
            "first_fwd": at("fwd", 2) - pushes[2],
            "credit_two_fwd": [e[0] for e in log if e[1] == "credit" and e[3] == 1][0] - pushes[2]}


#: cycles from a row at ``row`` to its outputs, outputs ready: the FIFO (2), the forward
#: unit's accept and packing (PREP_CYCLES + 1); the credit a cycle after the last output
LATENCY = {"local": 4, "credit_local_only": 5, "first_fwd": 4, "credit_two_fwd": 6}


def run_directed(top):
    cfg = R2
    dut = top(cfg)
    out = {}

    async def bench(ctx):
        out["r"] = await _directed(ctx, dut, cfg)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return dut, out["r"]


def test_relay_control_directed():
    _, (log, verdicts, counters, overrun) = run_directed(RelayControl)
    _check_directed(log, verdicts, counters, overrun, R2)
    assert _latency(log) == LATENCY, _latency(log)


def test_relay_hub_top_ports():
    """The whole top: MoEHub's ports and the relay path's side by side; the MoEHub inside
    is MoEHub(cfg)."""
    hub = RelayHub(R2)
    for part in (hub, hub.hub, hub.relay, hub.relay.fu, hub.relay.check, hub.ingress, *hub.ingress.checks,
                 hub.reduce, hub.reduce.unit, hub.reduce.engine, hub.stage, hub.egress,
                 hub.join, hub.pstage, hub.feed):                                                   # (not elaborated)
        part._MustUse__silence = True
    assert isinstance(hub.hub, MoEHub) and hub.hub.cfg is R2
    members = hub.signature.members
    plain = MoEHub(R2)
    plain._MustUse__silence = True                  # (only its signature is wanted)
    for k, v in plain.signature.members.items():       # every port of the hub's, as the hub has it,
        if k in RelayHub.HUB_INNER:                     # but those wired to the relay inside (its
            assert k in ("i", "credit") or k not in members, k   # lanes behind the relay input,
            continue                                    # its credits through the credit join)
        assert k in members and repr(members[k]) == repr(v), k
    assert repr(members["credit"]) == repr(plain.signature.members["credit"])
    assert {"fcredit", "relay_drops", "fwd_in", "fwd_out", "stage_wr", "stage_rd", "stage_rdata"} < set(members)
    # (relay and forward rows come in on the lanes; the relay control's rows from the
    # staging, its forwards and credits through the egress: none of them the top's)
    assert not {"fin", "fin_bad_source", "row", "local", "fwd", "rcredit"} & set(members)
    assert members["i"].signature.members["payload"].shape == RelayFormats(R2).lane_bits
    assert not {"node", "rank", "flush", "open", "acc_base"} & set(members)   # (from NODE_ID, LOCAL_RANK,
    # RED_ACC_BASE, RED_CTRL; opens from the relay; partial rows from the lanes through the
    # partial staging): the accumulators' and the partial staging's memory ports, the
    # reduced rows out, the P credits
    assert {"acc_rd", "acc_rdata", "acc_wr", "reduced", "red_drops", "pstage_wr", "pstage_rd", "pstage_rdata",
            "pcredit"} < set(members)
    assert "partial" not in members


@pytest.mark.slow
def test_relay_registers_read_through_the_hubs_csr_bank():
    """The whole top: NODE_ID and LOCAL_RANK written by software place the relay and the
    reduce; after a relay row forwarded to two GPUs (its sum opened at the reduce) and one
    of another rail (dropped: no sum), both through the lanes, one part in, a part for no
    sum and RED_CTRL.RED_FLUSH, the relay and reduce registers read through the CSR bus
    hold the counts."""
    cfg, dut = R2, RelayHub(R2)
    got = {}

    async def bench(ctx):
        await place(ctx, dut, 0, 1)
        for s in (dut.fwd_out, dut.stage_wr, dut.stage_rd, dut.credit, dut.stage_rdata):
            ctx.set(s.ready if s is not dut.stage_rdata else s.valid, 1)   # (a memory of zeros)
        await reduce_cleared(ctx, dut)
        fm = RelayFormats(cfg)
        for token, src_rank, ent in ((2, 1, [entry(3, 1, 0), entry(1, 0, 1), entry(0, 2, 2)]),
                                     (5, 2, [entry(0, 0, 0), NONE, NONE])):
            head = dict(cls=RowClass.RELAY, src_node=1, src_rank=src_rank, tag=0, token=token)
            for i, e in enumerate(ent):
                head.update({f"{k}{i}": e[k] for k in ("valid", "gpu", "expert", "slot")},
                            **{f"weight{i}": entry_weight(token, i)})
            for c in range(cfg.chunks_per_row):          # the row's chunks on lane 0
                ctx.set(dut.i[0].payload, fm.relay_row.pack(**head, chunk=c))
                ctx.set(dut.i[0].valid, 1)
                while not ctx.get(dut.i[0].ready):
                    await ctx.tick()
                await ctx.tick()
            ctx.set(dut.i[0].valid, 0)
        await ctx.tick().repeat(12 + 2 * cfg.chunks_per_row)
        # the reduce: the good row opened its sum (slots 0, 1, 2); one part in, a part for no
        # sum, then RED_FLUSH: the open sum sent as it is. Its accumulators at RED_ACC_BASE
        # in a memory that answers reads in order from the cycle after; the reduced rows taken at once
        await csr_write(ctx, dut, "RED_ACC_BASE", ACC_BASE)
        mem, ops, reduced = {}, [], []
        ctx.set(dut.reduced.ready, 1)
        ctx.set(dut.acc_wr.ready, 1)
        ctx.set(dut.acc_rd.ready, 1)

        await csr_write(ctx, dut, "PARTIAL_STAGE_BASE", PSTAGE_BASE)
        pmem, pcredits = {}, []
        ctx.set(dut.pstage_wr.ready, 1)
        ctx.set(dut.pstage_rd.ready, 1)
        ctx.set(dut.pcredit.ready, 1)

        async def cycles(n, token=None, src_rank=1, ptag=0):
            """``n`` cycles of the memories and the reduced rows (and a partial row of
            ``token``, owner (node 1, ``src_rank``), slot 1, 1.0 in every element, from
            GPU 0 with P tag ``ptag``, its chunks on lane 0 last first)."""
            pending, ppending, words = [], [], []
            if token is not None:
                words = [fm.partial_row.pack(cls=RowClass.PARTIAL, sender=0, ptag=ptag, src_node=1,
                                             src_rank=src_rank, token=token, slot=1, chunk=c, data=0x3F80)
                         for c in reversed(range(cfg.chunks_per_row))]
            for _ in range(n):
                ctx.set(dut.i[0].valid, bool(words))
                ctx.set(dut.i[0].payload, words[0] if words else 0)
                ctx.set(dut.acc_rdata.valid, bool(pending))
                ctx.set(dut.acc_rdata.payload, pending[0] if pending else 0)
                ctx.set(dut.pstage_rdata.valid, bool(ppending))
                ctx.set(dut.pstage_rdata.payload, ppending[0] if ppending else 0)
                if ctx.get(dut.acc_wr.valid):
                    mem[ctx.get(dut.acc_wr.payload.addr)] = ctx.get(dut.acc_wr.payload.data)
                if ctx.get(dut.pstage_wr.valid):
                    pmem[ctx.get(dut.pstage_wr.payload.addr)] = ctx.get(dut.pstage_wr.payload.data)
                if pending and ctx.get(dut.acc_rdata.ready):
                    pending.pop(0)
                if ppending and ctx.get(dut.pstage_rdata.ready):
                    ppending.pop(0)
                if ctx.get(dut.acc_rd.valid):
                    pending.append(mem[ctx.get(dut.acc_rd.payload.addr)])
                if ctx.get(dut.pstage_rd.valid):
                    ppending.append(pmem[ctx.get(dut.pstage_rd.payload)])
                if ctx.get(dut.pcredit.valid):
                    pcredits.append((ctx.get(dut.pcredit.payload.sender), ctx.get(dut.pcredit.payload.ptag)))
                uo = dut.reduce.unit.op
                if ctx.get(uo.valid) and ctx.get(uo.ready):
                    ops.append(ctx.get(uo.payload.kind))
                if ctx.get(dut.reduced.valid):
                    o = dut.reduced.payload
                    reduced.append((ctx.get(o.src_node), ctx.get(o.src_rank), ctx.get(o.token),
                                    ctx.get(o.parts), ctx.get(o.chunk), ctx.get(o.data)))
                if words and ctx.get(dut.i[0].ready):
                    words.pop(0)
                await ctx.tick()
            ctx.set(dut.i[0].valid, 0)
            assert not words, "the partial row was not taken"

        # token 2's part; a part for no sum (token 3); a part of an owner of another rank
        # (dropped at the input, its credit owed)
        for token, src_rank, ptag in ((2, 1, 0), (3, 1, 1), (2, 0, 0)):
            await cycles(80, token, src_rank, ptag)
        await csr_write(ctx, dut, "RED_CTRL", 1)
        await cycles(3 * dut.reduce.unit.depth + 60)
        got["reduced"] = reduced
        got["mem"] = sorted(mem)
        got["pmem"] = sorted(pmem)
        got["pcredits"] = pcredits
        got["ops"] = ops
        names = [("RELAY_ROWS", 0), ("RELAY_LOCAL", 0), ("FWD_ROWS", 0), ("FWD_ROWS", 3), ("FWD_ROWS", 1),
                 ("RELAY_DROPS", int(RelayReason.FWD_BAD_SOURCE)), ("RELAY_OVERFLOW", 0), ("RED_ROWS", 0),
                 ("RED_OPEN", 0), ("RED_INCOMPLETE", 0), ("RED_DROPS", int(ReduceReason.BAD_PARTIAL)),
                 ("RED_ACC_READS", 0), ("RED_ACC_WRITES", 0), ("RED_ACC_BASE", 0), ("PARTIAL_STAGE_DROPS", 0)]
        for name, i in names:
            got[(name, i)] = await csr_read(ctx, dut, name, i)
        got["ports"] = (ctx.get(dut.relay_rows), ctx.get(dut.relay_local), ctx.get(dut.fwd_rows[0]))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got.pop("ports") == (1, 1, 1)
    assert got.pop("ops") == [Op.WRITE, Op.FLUSH]
    # the flushed sum: one row from (node 1, rank 1), token 2, one part in, each element the
    # part's 1.0 times slot 1's weight; its accumulator row written at RED_ACC_BASE
    # (record: token 2 of the one other node) and read back
    assert cfg.data_bits == 16                  # (an element a chunk: 1.0 x w is w, exact)
    assert got.pop("reduced") == [(1, 1, 2, 1, c, entry_weight(2, 1)) for c in range(cfg.chunks_per_row)]
    row = ACC_BASE + 2 * 2 * cfg.row_bytes
    assert got.pop("mem") == [row + 2 * cfg.chunk_bytes * c for c in range(cfg.chunks_per_row)]
    # the two good parts staged at their P-window slots (sender 0: its tags 0 and 1), the
    # dropped one not; every part's credit returned, in order
    assert got.pop("pmem") == [PSTAGE_BASE + slot * cfg.stride_bytes + cfg.chunk_bytes * c
                               for slot in (0, 1) for c in range(cfg.chunks_per_row)]
    assert got.pop("pcredits") == [(0, 0), (0, 1), (0, 0)]
    assert got == {("RELAY_ROWS", 0): 1, ("RELAY_LOCAL", 0): 1, ("FWD_ROWS", 0): 1, ("FWD_ROWS", 3): 1,
                   ("FWD_ROWS", 1): 0, ("RELAY_DROPS", int(RelayReason.FWD_BAD_SOURCE)): 1,
                   ("RELAY_OVERFLOW", 0): 0, ("RED_ROWS", 0): 1, ("RED_OPEN", 0): 0,
                   ("RED_INCOMPLETE", 0): 1, ("RED_DROPS", int(ReduceReason.BAD_PARTIAL)): 2,
                   ("RED_ACC_READS", 0): 1, ("RED_ACC_WRITES", 0): 1, ("RED_ACC_BASE", 0): ACC_BASE,
                   ("PARTIAL_STAGE_DROPS", 0): 0}, got


# ------------------------------------------------------------------ a planted bug
PLANTS = {
    # two forward rows' destinations swapped: the pick's GPU reported as the next one up
    "dst-swapped": ("fp.dst.eq(select([(pick[g], Const(g, cfg.gpu_bits)) for g in range(G)], cfg.gpu_bits)),",
                    "fp.dst.eq(select([(pick[g], Const((g + 1) % G, cfg.gpu_bits)) for g in range(G)], cfg.gpu_bits)),"),
    # the relay row's credit never returned
    "credit-dropped": ("m.d.comb += [self.rcredit.valid.eq(all_out & credit),",
                       "m.d.comb += [self.rcredit.valid.eq(0),"),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(plant, monkeypatch):
    import moehub.rtl.relay.hub as hub_mod
    old, new = PLANTS[plant]
    monkeypatch.setattr(hub_mod, "ForwardUnit", broken_class("moehub.rtl.relay.forward_unit", old, new, "ForwardUnit"))
    with pytest.raises(AssertionError, match="seed 0"):
        simulate(R2, 0, rows=60)
