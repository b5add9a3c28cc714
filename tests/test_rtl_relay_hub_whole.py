"""The whole relay hub (moehub/rtl/relay/hub.py, ``RelayHub``) on a layer of protocol v3's
rows: its input, the packet manager behind it, the staging, the relay control, the
forward egress and the credit join, through the top's ports only.

The bench plays every sender of one relay hub (node, rank):

* the GPUs of its node send direct rows (protocol v2's multicast rows);
* the node's other relays send forward rows of remote sources of their rank;
* the remote GPUs of its rank send relay rows naming targets on any GPU of the node, with
  their gate weights -- a share broken (a GPU outside the node, a slot twice: dropped and
  counted, their credit still owed), a few from another rail (an unknown source: dropped,
  no credit);
* every source its end-of-stream packet, with the rows this GPU's packet manager opens of
  it (direct, forwarded, and relay rows naming this GPU).

Each source keeps its window: a row of (source, tag) -- a forward row's of (its relay,
forward tag) -- starts only after the credit of the one before it came back on the top's
``credit`` port. The node's GPUs return each forward row's F credit (``fcredit``) a random
while after its last chunk left on ``fwd_out``; the staging's memory answers reads in
order after a random delay; every output is back-pressured at random.

At the end (the layer done; a bound in cycles catches a hang):

* each good relay row naming other GPUs was forwarded once to each of them, every chunk
  the relay row's data, the entries those of that GPU in the row's order -- the model's
  forward rows (:class:`~moehub.spec.relay.RelayHubModel`), as a set;
* each relay row's credit (but an unknown source's) came back exactly once, and only
  after every chunk of its forwards had left;
* every metadata word of a remote source is one of a good forward row's or a good relay
  row's own targets, each exactly once; the packet manager dropped nothing;
* the relay registers, read over the CSR bus, are the model's: rows relayed, with own
  targets, forwards per GPU, forward rows in, drops per reason, sums opened at the reduce,
  the staging's drops (0).

With the combine (:func:`play_combine`), after the dispatch: every good relay row's
targets send their partial rows (class PARTIAL) through the lanes, each GPU keeping its P
window (credits on ``pcredit``), with a part for a token no sum has, a second part of a
slot and a part of an owner of another rank; the partial staging's and the accumulators'
memories answer in order after a random delay. Then every partial row the reduce took is
one that was sent, all good ones reach it, every reduced row is :class:`ReduceModel`'s to
the bit (fed the same rows in the order the reduce took them), every P credit comes back
once, and RED_ROWS, RED_DROPS (the input's refusal among them), RED_ACC_READS/WRITES and
PARTIAL_STAGE_DROPS are the model's.
"""
import random
from collections import defaultdict

import numpy as np

import pytest

from conftest import run_testbench

from moehub.rtl.relay.hub import RelayHub
from moehub.spec.csr_map import CTRL_START
from moehub.spec.formats import (CtlKind, HubFormats, PacketKind, RelayFormats, RelayReason, RowClass,
                                 config_reasons)
from moehub.spec.formats import ReduceReason
from moehub.spec.relay import (ReduceModel, RelayHubModel, bf16_bits, bf16_value, global_gpu, ingress,
                               relay_row_of)
from moehub.verif.formal.plant import broken_class
from test_rtl_relay_hub import csr_read, csr_write
from test_rtl_relay_ingress import R22, R33

STAGE_BASE, ACC_BASE, PSTAGE_BASE = 0x3000_0000, 0x4000_0000, 0x5000_0000


class Row:
    """One row of the layer as its sender sends it: ``key`` its window (cleared by the
    credit), ``words`` its chunks, ``kind`` direct / forward / relay."""

    def __init__(self, kind, key, words, info=None):
        self.kind, self.key, self.words, self.info, self.begun = kind, key, words, info, False


def make_rows(rng, cfg, node, rank, n):
    """``n`` rows of every kind at hub (node, rank) (see the module docstring); returns
    (rows, EOS counts per source, the good relay rows' RelayRow and chunk data)."""
    fm, G, T, M = RelayFormats(cfg), cfg.node_gpus, cfg.relay_targets, cfg.max_targets
    rows, eos, relays, tags = [], [0] * cfg.sources, [], defaultdict(int)
    others = [x for x in range(cfg.nodes) if x != node]
    while len(rows) < n:
        kind = rng.choices(["direct", "forward", "relay"], [0.25, 0.25, 0.5])[0]
        data = [rng.getrandbits(cfg.data_bits) for _ in range(cfg.chunks_per_row)]
        token = len(rows) % (1 << cfg.token_bits)
        if kind == "direct":
            src = node * G + rng.choice([g for g in range(G) if g != rank])
            xs = rng.sample(range(cfg.experts), M)
            ent = {f"{k}{i}": v for i in range(M)
                   for k, v in (("valid", int(i == 0 or rng.random() < 0.5)), ("expert", xs[i]), ("slot", i))}
            tag = tags["D", src] % cfg.tags_per_source
            tags["D", src] += 1
            head = dict(cls=RowClass.DIRECT, kind=PacketKind.DATA, src=src, tag=tag, token=token, **ent)
            words = [fm.direct.pack(**head, chunk=c, data=d) for c, d in enumerate(data)]
            rows.append(Row(kind, ("D", src, tag), words))
            eos[src] += 1
        elif kind == "forward":
            fwd = rng.choice([g for g in range(G) if g != rank])
            s_node = rng.choice(others)
            xs = rng.sample(range(cfg.experts), M)
            ent = {f"{k}{i}": v for i in range(M)
                   for k, v in (("valid", int(i == 0 or rng.random() < 0.5)), ("expert", xs[i]), ("slot", i))}
            ftag = tags["F", fwd] % cfg.forward_tags
            tags["F", fwd] += 1
            head = dict(cls=RowClass.FORWARD, fwd=fwd, ftag=ftag, src_node=s_node, src_rank=fwd, token=token, **ent)
            words = [fm.forward_row.pack(**head, chunk=c, data=d) for c, d in enumerate(data)]
            rows.append(Row(kind, ("F", fwd, ftag), words, sum(head[f"valid{i}"] for i in range(M))))
            eos[global_gpu(cfg, s_node, fwd)] += 1
        else:
            s_node = rng.choice(others)
            src = global_gpu(cfg, s_node, rank)
            tag = tags["R", src] % cfg.tags_per_source
            tags["R", src] += 1
            pairs = rng.sample([(g, x) for g in range(G) for x in range(cfg.experts)], T)
            slots = rng.sample(range(cfg.topk), T)
            head = dict(cls=RowClass.RELAY, src_node=s_node, src_rank=rank, tag=tag, token=token)
            for i in range(T):
                head.update({f"valid{i}": int(i == 0 or rng.random() < 0.6), f"gpu{i}": pairs[i][0],
                             f"expert{i}": pairs[i][1], f"slot{i}": slots[i],
                             f"weight{i}": bf16_bits(rng.uniform(-2.0, 2.0))})
            broken = rng.random()
            if broken < 0.08:
                head["gpu0"] = G                          # a GPU outside the node
            elif broken < 0.15 and T > 1:
                head.update(valid1=1, slot1=head["slot0"])  # a slot twice
            elif broken < 0.19:
                head["src_rank"] = (rank + 1) % G         # another rail: an unknown source
            words = [fm.relay_row.pack(**head, chunk=c, data=d) for c, d in enumerate(data)]
            verdict = ingress(cfg, node, rank, words[0])
            row = relay_row_of(cfg, fm.relay_row.unpack(words[0]))
            key = None if verdict.to == "drop" else ("R", src, tag)
            rows.append(Row(kind, key, words, (row, data, verdict)))
            if verdict.reason is None:
                relays.append((row, data))
                eos[src] += verdict.local
    return rows, eos, relays


class Senders:
    """The layer's words as the senders send them (rows interleaved chunk by chunk, each
    window kept), then the EOS packets."""

    def __init__(self, rng, rows, eos_words):
        self.rng, self.rows, self.eos, self.busy, self.in_flight = rng, rows, eos_words, set(), {}

    def empty(self):
        return not self.rows and not self.eos

    def next(self):
        if not self.rows:
            return self.eos.pop(0) if self.eos else None
        head = self.rows[:3]
        ok = [r for i, r in enumerate(head)
              if r.begun or ((r.key is None or r.key not in self.busy) and r.key not in [h.key for h in head[:i]])]
        if not ok:
            return None
        r = self.rng.choice(ok)
        if not r.begun and r.key is not None:
            self.busy.add(r.key)
            self.in_flight[r.key] = r
        r.begun = True
        w = r.words.pop(0)
        if not r.words:
            self.rows.remove(r)
        return w


def credit_key(cfg, node, rank, src, tag):
    """The window a credit (src, tag) on the top's port closes."""
    s_node, s_rank = divmod(src, cfg.node_gpus)
    if s_node == node:
        return ("D", src, tag)
    return ("R", src, tag) if s_rank == rank else ("F", s_rank, tag)


def partial_rows(rng, cfg, relays, rank):
    """The combine's partial rows for the good relay rows ``relays``: one per target, from
    the target's GPU (its P tags in turn), random BF16 data; and three the reduce or the
    input refuses: a slot no sum expects, a second part of a slot, an owner of another
    rank. Returns Rows (kind ``partial``, ``info`` (header, data bits))."""
    fm, tags, out = RelayFormats(cfg), defaultdict(int), []
    heads = [(g, dict(src_node=row.src_node, src_rank=row.src_rank, token=row.token, slot=sl))
             for row, _ in relays for g, _x, sl, _w in row.targets]
    if heads:
        g, h = heads[0]
        heads += [(g, dict(h, token=(1 << cfg.token_bits) - 1)), (g, dict(h)),
                  (g, dict(h, src_rank=(rank + 1) % cfg.node_gpus))]
    rng.shuffle(heads)
    for g, h in heads:
        ptag = tags[g] % cfg.partial_span
        tags[g] += 1
        data = [bf16_bits(rng.gauss(0.0, 1.0)) for _ in range(cfg.chunks_per_row)]
        words = [fm.partial_row.pack(cls=RowClass.PARTIAL, sender=g, ptag=ptag, **h, chunk=c, data=d)
                 for c, d in enumerate(data)]
        out.append(Row("partial", ("P", g, ptag), words, (h, data)))
    return out


async def play_combine(ctx, dut, cfg, rng, layer_parts, seed):
    """The combine after the dispatch: the partial rows through the lanes (each sender's P
    window kept, credits from ``pcredit``), the partial staging's and the accumulators'
    memories answering in order after a random delay, every output back-pressured. Returns
    (the rows as the reduce took them: (src_node, token, slot, data), the reduced rows'
    chunks, credits seen)."""
    L, C = cfg.lanes, cfg.chunks_per_row
    send = Senders(rng, list(layer_parts), [])
    pending, pmem, acc, preads, areads = [None] * L, {}, {}, [], []
    intake, beats, reduced, pcredits, idle = [], 0, [], [], 0
    for cycle in range(200 * C * max(1, len(layer_parts))):
        where = f"seed {seed} combine cycle {cycle}"
        if send.empty() and not send.busy and not any(p is not None for p in pending) \
                and not preads and not areads and cycle > 0 and idle > 3 * C + 40:
            break
        for j in range(L):
            if pending[j] is None and rng.random() < 0.7:
                pending[j] = send.next()
            ctx.set(dut.i[j].valid, pending[j] is not None)
            ctx.set(dut.i[j].payload, pending[j] or 0)
        for s_ in (dut.pstage_wr, dut.pstage_rd, dut.pcredit, dut.acc_rd, dut.acc_wr, dut.reduced):
            ctx.set(s_.ready, rng.random() < 0.8)
        for port, q in ((dut.pstage_rdata, preads), (dut.acc_rdata, areads)):
            ctx.set(port.valid, bool(q) and q[0][0] <= cycle)
            ctx.set(port.payload, q[0][1] if q else 0)
        # ---- the cycle's handshakes
        if ctx.get(dut.pstage_wr.valid) and ctx.get(dut.pstage_wr.ready):
            pmem[ctx.get(dut.pstage_wr.payload.addr)] = ctx.get(dut.pstage_wr.payload.data)
        if ctx.get(dut.acc_wr.valid) and ctx.get(dut.acc_wr.ready):
            acc[ctx.get(dut.acc_wr.payload.addr)] = ctx.get(dut.acc_wr.payload.data)
        for port, q in ((dut.pstage_rdata, preads), (dut.acc_rdata, areads)):
            if ctx.get(port.valid) and ctx.get(port.ready):
                q.pop(0)
        for port, q, mem in ((dut.pstage_rd, preads, pmem), (dut.acc_rd, areads, acc)):
            if ctx.get(port.valid) and ctx.get(port.ready):
                a = ctx.get(port.payload.addr) if mem is acc else ctx.get(port.payload)
                assert a in mem, f"{where}: a read of {a:#x}, never written"
                q.append((max(cycle + rng.randrange(1, 6), q[-1][0] if q else 0), mem[a]))
        part = dut.reduce.partial                       # (inside: the rows the reduce takes)
        if ctx.get(part.valid) and ctx.get(part.ready):
            if beats == 0:
                intake.append([ctx.get(part.payload.src_node), ctx.get(part.payload.token),
                               ctx.get(part.payload.slot), []])
            intake[-1][3].append(ctx.get(part.payload.data))
            beats = (beats + 1) % C
        if ctx.get(dut.reduced.valid) and ctx.get(dut.reduced.ready):
            o = dut.reduced.payload
            reduced.append(tuple(ctx.get(getattr(o, k)) for k in ("src_node", "src_rank", "token", "parts",
                                                                    "chunk", "data")))
        if ctx.get(dut.pcredit.valid) and ctx.get(dut.pcredit.ready):
            key = ("P", ctx.get(dut.pcredit.payload.sender), ctx.get(dut.pcredit.payload.ptag))
            assert key in send.busy, f"{where}: P credit {key} for no row in flight"
            send.busy.discard(key)
            send.in_flight.pop(key, None)
            pcredits.append(key)
        idle = 0 if any(ctx.get(x.valid) for x in (dut.reduced, part, dut.acc_wr)) else (idle + 1 if cycle else 0)
        for j in range(L):
            if pending[j] is not None and ctx.get(dut.i[j].ready):
                pending[j] = None
        await ctx.tick()
    else:
        raise AssertionError(f"seed {seed}: the combine hangs ({len(send.busy)} P credits owed)")
    for j in range(L):
        ctx.set(dut.i[j].valid, 0)
    assert beats == 0, f"seed {seed}: a partial row left the feed in part"
    return intake, reduced, pcredits


def run_whole(cfg, seed, rows=30, node=0, rank=1, combine=False):
    """The bench (see the module docstring); returns what it saw. ``combine``: then the
    combine's partial rows for the good relay rows (:func:`play_combine`)."""
    dut = RelayHub(cfg)
    L, C, fm, hf = cfg.lanes, cfg.chunks_per_row, RelayFormats(cfg), HubFormats(cfg)
    out = {}

    async def write(ctx, name, value, index=0):
        await csr_write(ctx, dut, name, value, index)

    async def read(ctx, name, index=0):
        return await csr_read(ctx, dut, name, index)

    async def bench(ctx):
        rng = random.Random(seed)
        layer, eos, relays = make_rows(rng, cfg, node, rank, rows)
        eos_words = [fm.direct.pack(cls=RowClass.DIRECT, kind=PacketKind.EOS, src=s, count=eos[s])
                     for s in range(cfg.sources)]
        send = Senders(rng, list(layer), eos_words)
        by_key = {}                                        # relay rows in flight by window
        await write(ctx, "NODE_ID", node)
        await write(ctx, "LOCAL_RANK", rank)
        span = cfg.max_rows_per_expert * cfg.stride_bytes
        for e in range(cfg.experts):
            await write(ctx, "REGION_BASE", 0x1000_0000 + e * span, e)
            await write(ctx, "REGION_CAP", cfg.max_rows_per_expert, e)
        for name, value in (("POOL_BASE", 0x2000_0000), ("POOL_CAP", cfg.pool_rows), ("FLAG_BASE", 0x7000_0000),
                            ("META_BASE", 0x6000_0000), ("COUNT_BASE", 0x7F00_0000), ("EPOCH", 1),
                            ("RELAY_STAGE_BASE", STAGE_BASE), ("RED_ACC_BASE", ACC_BASE), ("CTRL", CTRL_START)):
            await write(ctx, name, value)
        ctx.set(dut.reduced.ready, 1)
        pending, mem, reads, own_done = [None] * L, {}, [], set()
        fwd_chunks, fcredits = defaultdict(dict), []
        credits, metas, fwd_done_at = [], [], {}
        cycle, done, stage_writes = 0, None, 0
        while (not send.empty() or any(p is not None for p in pending) or done is None or send.busy) \
                and cycle < 30_000:
            where = f"seed {seed} cycle {cycle}"
            for j in range(L):
                if pending[j] is None and rng.random() < 0.6:
                    pending[j] = send.next()
                ctx.set(dut.i[j].valid, pending[j] is not None)
                ctx.set(dut.i[j].payload, pending[j] or 0)
            r = rng.random() < 0.85
            for j in range(L):
                ctx.set(dut.wr[j].ready, r)
            for s in (dut.ctl, dut.credit, dut.fwd_out, dut.stage_wr, dut.stage_rd):
                ctx.set(s.ready, rng.random() < 0.8)
            # the staging's memory: reads answered in order, after a few cycles
            ctx.set(dut.stage_rdata.valid, bool(reads) and reads[0][0] <= cycle)
            ctx.set(dut.stage_rdata.payload, mem.get(reads[0][1], 0) if reads else 0)
            # the node's GPUs' forward credits
            due = [f for f in fcredits if f[0] <= cycle]
            ctx.set(dut.fcredit.valid, bool(due))
            if due:
                ctx.set(dut.fcredit.payload.dst, due[0][1])
                ctx.set(dut.fcredit.payload.ftag, due[0][2])
                fcredits.remove(due[0])
            # ---- the cycle's handshakes
            if ctx.get(dut.stage_wr.valid) and ctx.get(dut.stage_wr.ready):
                mem[ctx.get(dut.stage_wr.payload.addr)] = ctx.get(dut.stage_wr.payload.data)
                stage_writes += 1
            if ctx.get(dut.stage_rdata.valid) and ctx.get(dut.stage_rdata.ready):
                reads.pop(0)
            if ctx.get(dut.stage_rd.valid) and ctx.get(dut.stage_rd.ready):
                reads.append((cycle + rng.randrange(1, 5), ctx.get(dut.stage_rd.payload)))
            if ctx.get(dut.fwd_out.valid) and ctx.get(dut.fwd_out.ready):
                dst = ctx.get(dut.fwd_out.payload.dst)
                w = fm.forward_row.unpack(ctx.get(dut.fwd_out.payload.word))
                assert w["cls"] == RowClass.FORWARD and w["fwd"] == rank, f"{where}: {w}"
                key = (w["src_node"], w["src_rank"], w["token"], dst)
                assert w["chunk"] not in fwd_chunks[key], f"{where}: forward chunk twice {key} {w['chunk']}"
                fwd_chunks[key][w["chunk"]] = w
                if len(fwd_chunks[key]) == C:
                    fwd_done_at[key] = cycle
                    fcredits.append((cycle + rng.randrange(1, 12), dst, w["ftag"]))
            pmc = dut.hub.credit                     # (inside: the packet manager's credits)
            if ctx.get(pmc.valid) and ctx.get(pmc.ready):
                own_done.add(credit_key(cfg, node, rank, ctx.get(pmc.payload.src), ctx.get(pmc.payload.tag)))
            if ctx.get(dut.credit.valid) and ctx.get(dut.credit.ready):
                src, tag = ctx.get(dut.credit.payload.src), ctx.get(dut.credit.payload.tag)
                key = credit_key(cfg, node, rank, src, tag)
                assert key in send.busy, f"{where}: credit {key} for no row in flight"
                if key[0] == "R":                        # a relay row naming this GPU: its own
                    row = send.in_flight.pop(key)        # targets' credit came first
                    assert not row.info[2].local or key in own_done, \
                        f"{where}: relay row {key} credited before the packet manager wrote its own targets"
                    own_done.discard(key)
                send.busy.discard(key)
                credits.append((cycle, key))
            if ctx.get(dut.ctl.valid) and ctx.get(dut.ctl.ready) and ctx.get(dut.ctl.payload.kind) == CtlKind.META:
                meta = hf.meta_word.unpack(ctx.get(dut.ctl.payload.data))
                if meta["src"] // cfg.node_gpus != node:
                    metas.append((meta["src"], meta["token"], meta["slot"]))
            for j in range(L):
                if pending[j] is not None and ctx.get(dut.i[j].ready):
                    pending[j] = None
            if ctx.get(dut.layer_done):
                done = cycle
            await ctx.tick()
            cycle += 1
        await ctx.tick().repeat(40)
        if combine:
            await write(ctx, "PARTIAL_STAGE_BASE", PSTAGE_BASE)
            parts = partial_rows(rng, cfg, relays, rank)
            out["parts"] = parts
            out["intake"], out["reduced"], out["pcredits"] = await play_combine(ctx, dut, cfg, rng, parts, seed)
        out.update(cycles=cycle, done=done, layer=layer, relays=relays, fwd_chunks=dict(fwd_chunks),
                   credits=credits, metas=metas, fwd_done_at=fwd_done_at, stage_writes=stage_writes,
                   busy=set(send.busy))
        out["regs"] = {(name, i): await read(ctx, name, i)
                       for name, n in (("RELAY_ROWS", 1), ("RELAY_LOCAL", 1), ("FWD_ROWS", cfg.node_gpus),
                                       ("FWD_IN", 1), ("RELAY_DROPS", len(RelayReason)), ("RED_OPEN", 1),
                                       ("RELAY_STAGE_DROPS", 1), ("RELAY_OVERFLOW", 1), ("RED_ROWS", 1),
                                       ("RED_DROPS", len(ReduceReason)), ("RED_ACC_READS", 1),
                                       ("RED_ACC_WRITES", 1), ("PARTIAL_STAGE_DROPS", 1))
                       for i in range(n)}
        out["hub_drops"] = [await read(ctx, "DROPS", r) for r in range(len(config_reasons(cfg)))]

    run_testbench(dut, bench)
    return out


def model_of(cfg, layer, node, rank):
    """The model fed the layer's relay rows in order, every forward emitted and credited:
    (the model, its forward rows by (source node, rank, token, GPU) with the row's data,
    the metadata words of relay rows' own targets)."""
    model = RelayHubModel(cfg, node, rank)
    forwards, metas = {}, []
    for r in layer:
        if r.kind != "relay":
            continue
        row, data, _ = r.info
        fx = model.relay_row(row)
        while model.queue:
            f = model.emit()
            model.forward_credit(f.dst, f.ftag)
            forwards[(f.src_node, f.src_rank, f.token, f.dst)] = (tuple(f.targets), data)
        if fx.local is not None:
            metas += [(fx.local.src, fx.local.token, sl) for _x, sl in fx.local.targets]
    return model, forwards, metas


def check_whole(cfg, out, node, rank, seed):
    """The end-of-layer checks (see the module docstring) against the model."""
    where, M = f"seed {seed}", cfg.max_targets
    assert out["done"] is not None, f"{where}: the layer never finished ({out['cycles']} cycles)"
    assert not out["busy"], f"{where}: credits never came: {sorted(out['busy'])}"
    assert not any(out["hub_drops"]), f"{where}: the packet manager dropped {out['hub_drops']}"
    model, want_fwd, want_meta = model_of(cfg, out["layer"], node, rank)
    # the forwards: once per (relay row, GPU), the model's entries, the relay row's data
    got = out["fwd_chunks"]
    assert set(got) == set(want_fwd), f"{where}: forwards {sorted(got)} against the model's {sorted(want_fwd)}"
    for key, chunks in got.items():
        targets, data = want_fwd[key]
        assert sorted(chunks) == list(range(cfg.chunks_per_row)), f"{where}: forward {key} chunks {sorted(chunks)}"
        ent = tuple((chunks[0][f"expert{i}"], chunks[0][f"slot{i}"]) for i in range(M) if chunks[0][f"valid{i}"])
        assert ent == targets, f"{where}: forward {key} entries {ent}, the model's {targets}"
        assert [chunks[c]["data"] for c in range(cfg.chunks_per_row)] == data, f"{where}: forward {key} data"
    # each relay row credited once (its window's credits in order), after its forwards' last chunks
    credit_at = defaultdict(list)
    for c, k in out["credits"]:
        credit_at[k].append(c)
    seen = defaultdict(int)
    for r in out["layer"]:
        if r.kind != "relay" or r.key is None:
            continue
        row = r.info[0]
        n = seen[r.key]
        seen[r.key] += 1
        assert n < len(credit_at[r.key]), f"{where}: relay row {r.key} (token {row.token}) never credited"
        at = credit_at[r.key][n]
        for key, done in out["fwd_done_at"].items():
            if key[:3] == (row.src_node, row.src_rank, row.token):
                assert done < at, f"{where}: relay row {r.key} credited at {at}, its forward {key} done at {done}"
    assert all(len(credit_at[k]) == n for k, n in seen.items()), f"{where}: a relay row credited twice"
    # the metadata words of remote sources: good relay rows' own targets, good forward rows'
    assert sorted(m for m in out["metas"] if m[0] % cfg.node_gpus == rank) == sorted(want_meta), where
    n_fwd_targets = sum(r.info for r in out["layer"] if r.kind == "forward")
    assert sum(1 for m in out["metas"] if m[0] % cfg.node_gpus != rank) == n_fwd_targets, where
    # the registers
    drops = [0] * len(RelayReason)
    for r in out["layer"]:
        if r.kind == "relay" and r.info[2].reason is not None:
            drops[r.info[2].reason] += 1
    red = check_combine(cfg, out, node, rank, seed) if "parts" in out else None
    red_regs = {("RED_ROWS", 0): len(red.out) if red else 0, ("RED_ACC_READS", 0): red.rows_read if red else 0,
                ("RED_ACC_WRITES", 0): red.rows_written if red else 0, ("PARTIAL_STAGE_DROPS", 0): 0,
                **{("RED_DROPS", i): (red.drops()[i] + (i == ReduceReason.BAD_PARTIAL) * out["input_bad_partials"]
                                      if red else 0) for i in range(len(ReduceReason))}}
    want = {("RELAY_ROWS", 0): model.relay_rows, ("RELAY_LOCAL", 0): model.relay_local,
            ("FWD_IN", 0): sum(1 for r in out["layer"] if r.kind == "forward"), **red_regs,
            ("RED_OPEN", 0): len(red.acc) if red else model.relay_rows, ("RELAY_STAGE_DROPS", 0): 0,
            ("RELAY_OVERFLOW", 0): 0,
            **{("FWD_ROWS", g): model.fwd_rows[g] for g in range(cfg.node_gpus)},
            **{("RELAY_DROPS", i): drops[i] for i in range(len(RelayReason))}}
    assert out["regs"] == want, f"{where}: registers {out['regs']}, the model's {want}"
    return model


def check_combine(cfg, out, node, rank, seed):
    """The combine against :class:`ReduceModel`: the good relay rows' sums opened, the
    partial rows added in the order the reduce took them (which the partial staging's own
    test checks: whole, in order, each row's data) -- every reduced row the model's, to
    the bit and in order; every partial row's P credit exactly once. Returns the model
    (and sets ``out['input_bad_partials']``, the rows the input refused)."""
    where = f"seed {seed}"
    model = ReduceModel(cfg, node=node)
    for row, _ in out["relays"]:
        model.open(global_gpu(cfg, row.src_node, row.src_rank), row.token,
                   tuple((sl, float(bf16_value(w))) for _g, _x, sl, w in row.targets))
    sent = {(h["src_node"], h["token"], h["slot"], tuple(d)) for h, d in (r.info for r in out["parts"])
            if h["src_rank"] == rank}
    out["input_bad_partials"] = sum(1 for r in out["parts"] if r.info[0]["src_rank"] != rank)
    for src_node, token, slot, data in out["intake"]:
        assert (src_node, token, slot, tuple(data)) in sent, f"{where}: the reduce took a row never sent"
        model.partial(global_gpu(cfg, src_node, rank), token, slot,
                      np.array([bf16_value(d) for d in data], np.float32))
    assert len(out["intake"]) == len(sent), f"{where}: {len(out['intake'])} rows reached the reduce of {len(sent)}"
    want = [(src // cfg.node_gpus, src % cfg.node_gpus, token, parts, c, bf16_bits(v))
            for src, token, parts, row in model.out for c, v in enumerate(row)]
    assert out["reduced"] == want, f"{where}: reduced rows {out['reduced'][:4]}..., the model's {want[:4]}..."
    assert sorted(out["pcredits"]) == sorted(r.key for r in out["parts"]), f"{where}: P credits"
    return model


@pytest.mark.slow
def test_whole_relay_hub_against_the_model():
    """2 nodes x 2 GPUs, 24 rows, every reason reached (slow set: a whole hub simulated
    every cycle, 25 s)."""
    out = run_whole(R22, 1, rows=24, node=0, rank=1)
    model = check_whole(R22, out, 0, 1, 1)
    assert model.relay_rows >= 5 and len(out["fwd_chunks"]) >= 3 and model.relay_local >= 2, out["regs"]
    assert all(out["regs"][("RELAY_DROPS", r)] for r in (RelayReason.FWD_BAD_GPU, RelayReason.FWD_BAD_TARGETS))


@pytest.mark.slow
@pytest.mark.parametrize("cfg,node,rank,seed", [(R22, 1, 0, 2), (R33, 2, 1, 3), (R33, 0, 2, 4)])
def test_whole_relay_hub_against_the_model_slow(cfg, node, rank, seed):
    out = run_whole(cfg, seed, rows=60, node=node, rank=rank)
    model = check_whole(cfg, out, node, rank, seed)
    assert model.relay_rows >= 15 and len(out["fwd_chunks"]) >= 10, out["regs"]


# ------------------------------------------------------------------ planted bugs
PLANTS = {
    # the egress passes a row's credit on before its forwards' reads are answered
    "egress-credit-early": ("moehub.rtl.relay.egress", "ForwardEgress",
                            "m.d.comb += idle.eq((xq.level == 0) & ~xq.r_rdy)", "m.d.comb += idle.eq(1)"),
    # the staging hands the forward unit a row at its first chunk, not its last
    "stage-row-early": ("moehub.rtl.relay.stage", "RelayStage",
                        "m.d.comb += [self.row.valid.eq(whole & ~s4.drop),",
                        "m.d.comb += [self.row.valid.eq(first & ~s4.drop),"),
}


#: planted in the combine's side: run with the combine
COMBINE_PLANTS = {
    # the feed hands the reduce each row's chunks with its slot lost
    "feed-slot-lost": ("moehub.rtl.relay.partial_feed", "PartialFeed", "o.slot.eq(front.slot)", "o.slot.eq(0)"),
    # the partial staging hands a row on at its first chunk, not its last
    "pstage-row-early": ("moehub.rtl.relay.stage", "PartialStage", "m.d.comb += [rq.w_en.eq(whole),",
                         "m.d.comb += [rq.w_en.eq(first),"),
}


#: each plant with the layer that shows it: (seed, with the combine)
ALL_PLANTS = {**{k: (v, 1, False) for k, v in PLANTS.items()},
              **{k: (v, 5, True) for k, v in COMBINE_PLANTS.items()}}


@pytest.mark.slow
@pytest.mark.parametrize("plant", list(ALL_PLANTS))
def test_planted_bug_is_caught(plant, monkeypatch):
    import moehub.rtl.relay.hub as hub_mod
    (mod, cls, old, new), seed, combine = ALL_PLANTS[plant]
    monkeypatch.setattr(hub_mod, cls, broken_class(mod, old, new, cls))
    with pytest.raises(AssertionError, match=f"seed {seed}"):
        check_whole(R22, run_whole(R22, seed, rows=24, node=0, rank=1, combine=combine), 0, 1, seed)


@pytest.mark.slow
@pytest.mark.parametrize("cfg,node,rank,seed", [(R22, 0, 1, 5), (R33, 1, 2, 6)])
def test_whole_relay_hub_dispatch_and_combine(cfg, node, rank, seed):
    """A layer's dispatch, then its combine: every good relay row's targets send their
    partial rows through the lanes, the reduce's sums the model's to the bit."""
    out = run_whole(cfg, seed, rows=24, node=node, rank=rank, combine=True)
    check_whole(cfg, out, node, rank, seed)
    assert len(out["reduced"]) >= 5 * cfg.chunks_per_row and out["input_bad_partials"] == 1, out["regs"]
    assert out["regs"][("RED_DROPS", int(ReduceReason.BAD_PARTIAL))] == 3, out["regs"]
