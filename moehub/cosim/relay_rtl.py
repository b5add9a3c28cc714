"""RTL in the loop for a relay GPU (protocol v3): the relay's control path and its reduce
control run in the Amaranth simulator on the rows the co-simulation routes through that
GPU, beside the reference model, and each decision is compared with the co-simulation's.

What runs in RTL, and against what:

* :class:`~moehub.rtl.relay.hub.RelayControl` (the row FIFO, the forward unit, the
  forward check, the relay counters, the opens for the reduce) takes the GPU's relay rows -- one per (remote
  source of its local rank, token) with a target in its node -- in the order their last
  chunk reached its hub in the co-simulation, each tagged in its source's window, at most
  ``relay_window`` between arrival and credit (the R credits); the node's GPUs return
  each forward credit a few cycles after the forward. Per relay row, the targets it
  reports for this GPU and the forward rows it sends (destination, targets) must be the
  co-simulation's routes (:func:`.systems.relay.routes`: which wire rows the relay
  writes, which it forwards, to whom) and :class:`~moehub.spec.relay.RelayHubModel`'s;
  its counters (rows, local rows, forwards per GPU, drops) the model's and the
  co-simulation's counts; the sum it opens at the reduce per row (source, token, slots,
  weights) the row's, in order.
* The combine side (with ``reduce``; :func:`combine_side`: the partial staging, its feed
  and :class:`~moehub.rtl.relay.reduce_path.ReducePath` -- the reduce unit, its engine and
  the accumulate datapath, one element wide -- wired as the whole hub wires them) takes an
  open per relay row (its slots and gate weights), then the partial output rows that
  reach the relay in the combine, in the order the co-simulation accumulates them, each
  with seeded random BF16 data (:data:`LOOP_CHUNKS` chunks: the co-simulation routes no
  data), chunk by chunk, each sender within its window of P tags, the rows in flight
  interleaved and each row's chunks in a seeded random order; the staging in a memory of
  :data:`LOOP_STAGE_LATENCY` cycles, the accumulators in one of
  :data:`LOOP_MEMORY_LATENCY`. Every partial row must be staged whole and its P credit
  returned once, nothing dropped; the reduce's operations (write, add, last, only, with
  record, slot and parts) :class:`~moehub.spec.relay.ReduceModel`'s (fed each row as the
  reduce takes it), every reduced row the model's to the bit, every sum final exactly
  when the co-simulation's has all its parts, one reduced row per (token, node) the
  co-simulation sends, nothing refused, and the accumulator rows it read and wrote, at
  the layer's row size, the HBM bytes the co-simulation charges that relay.

* The relay side (:func:`relay_side`: the relay staging, :class:`RelayControl`, the
  forward egress and the credit join, wired as the whole hub wires them) takes the same
  relay rows chunk by chunk (:data:`LOOP_STAGE_CHUNKS` seeded random chunks a row: the
  co-simulation routes no data), each source within its window of tags, and stages them
  in a memory of :data:`LOOP_STAGE_LATENCY` cycles; the packet manager's credit of a row
  naming this GPU comes a seeded random delay after its last chunk, each forward's credit
  after its last chunk. Every forward the routes name must leave to its rank with the
  row's targets there and its chunks in order, each the staged data of that chunk; no
  other forward; every relay row credited once, only after its forwards' last chunks and
  (naming this GPU) the packet manager's credit; nothing dropped, every row naming
  another GPU staged whole.

Both sides take their chunks through the relay hub's input
(:class:`~moehub.rtl.relay.ingress.RelayIngress`, its output registers and lowest-lane
grants): the loop puts each chunk, as the lane word its source sends (``relay_row``,
``partial_row``), on a free input lane, the lanes looked at in a seeded order, so chunks
of one row arrive on several lanes at once. The relay side also takes the input's packets
for the packet manager: a relay row naming this GPU must give one multicast packet a
chunk, of its original source and tag, its entries the targets the routes leave on this
GPU, its data the chunk's; the combine side must give none. The row data path stays the
hub's: the targets this GPU writes enter its hub as protocol v2's multicast rows
(:func:`.systems.hub.assemble`), which an RTL GPU's hub runs in Verilog as any multicast
row. The co-simulation routes no gate weights; every open carries ``1/k`` (BF16).
"""
from __future__ import annotations

import time
from collections import defaultdict, deque
import numpy as np

#: cycles between a forward row leaving the relay and its credit coming back (the
#: destination writes the row, its credit returns): the loop's environment, not a timing
FCREDIT_DELAY = 4


class RelayDisagrees(AssertionError):
    """The RTL, the reference model and the co-simulation disagree on a relay GPU's row."""


def relay_rows(L, routes, last1, g: int) -> list:
    """The relay rows GPU ``g`` receives, in the order their last chunk reached its hub
    (``last1`` per first-hop row; ties by source and token): ``[(src, token,
    ((rank, expert, slot), ...)), ...]``, the targets of the token in ``g``'s node in top-k
    slot order."""
    gpn = min(L.sys.gpus_per_node, L.G)
    h1, w = routes.hop1, routes.w
    hop_of = routes.hop1_of[w.of]                      # per routed row: its first-hop row
    mine = (h1.dest == g) & (h1.src // gpn != g // gpn)
    idx = np.nonzero(mine)[0]
    idx = idx[np.lexsort((h1.tok[idx], h1.src[idx], last1[idx]))]
    by_hop = defaultdict(list)
    for i in np.nonzero(mine[hop_of])[0].tolist():
        by_hop[int(hop_of[i])].append((int(L.dest[i]) % gpn, int(L.lexp[i]), int(L.slot[i])))
    return [(int(h1.src[h]), int(h1.tok[h]), tuple(sorted(by_hop[int(h)], key=lambda t: t[2])))
            for h in idx.tolist()]


def routed_forwards(routes, g: int, gpn: int) -> tuple:
    """What the co-simulation moved for relay ``g``: per (source, token), the ranks its
    forward network carried a row to, and the (source, token)s it wrote on ``g`` itself
    (:func:`.systems.relay.routes`' wire rows)."""
    w = routes.w
    fwd = defaultdict(set)
    for i in np.nonzero(routes.fwd & (routes.relay == g))[0].tolist():
        fwd[(int(w.src[i]), int(w.tok[i]))].add(int(w.dest[i]) % gpn)
    here = np.nonzero(routes.remote & ~routes.fwd & (routes.relay == g))[0]
    return dict(fwd), {(int(w.src[i]), int(w.tok[i])) for i in here.tolist()}


def expected_routes(rows, rank: int) -> list:
    """What the co-simulation's routes say each relay row does at the relay of local rank
    ``rank``: ``(local targets, {destination rank: targets})``, targets as ((expert,
    slot), ...) in slot order."""
    out = []
    for _, _, targets in rows:
        local = tuple((x, s) for r, x, s in targets if r == rank)
        fwd = defaultdict(list)
        for r, x, s in targets:
            if r != rank:
                fwd[r].append((x, s))
        out.append((local, {r: tuple(v) for r, v in fwd.items()}))
    return out


def _entries(ctx, payload, n):
    v = ctx.get(payload.valid)
    return tuple(sorted(((ctx.get(payload.expert[i]), ctx.get(payload.slot[i])) for i in range(n)
                         if v >> i & 1), key=lambda t: t[1]))


def run_control(rcfg, node: int, rank: int, rows, max_cycles: int | None = None) -> dict:
    """The relay rows ``rows`` (:func:`relay_rows`) through :class:`RelayControl` of GPU
    (``node``, ``rank``), beside :class:`RelayHubModel`. Returns per row what the RTL did
    (``local``, ``fwd``: as :func:`expected_routes`), the model's, the counters and the
    cycles; a row the RTL reports twice, a credit that does not come, or a hang is a
    :class:`RelayDisagrees`."""
    from amaranth.sim import Simulator

    from ..rtl.relay.hub import RelayControl
    from ..spec.relay import RelayHubModel, RelayRow, bf16_bits
    gpn, T, M = rcfg.node_gpus, rcfg.relay_targets, rcfg.max_targets
    dut = RelayControl(rcfg)
    model = RelayHubModel(rcfg, node=node, rank=rank)
    key_of = {(s, t): i for i, (s, t, _) in enumerate(rows)}
    got = [[None, {}] for _ in rows]
    mod = [[(), {}] for _ in rows]
    tags = defaultdict(int)
    opens = []
    wbits = bf16_bits(1.0 / rcfg.topk)
    out = {"cycles": 0}
    limit = max_cycles or 64 * (len(rows) + 16) * max(1, gpn)

    def fail(msg):
        raise RelayDisagrees(f"relay GPU {node * gpn + rank} (node {node}, rank {rank}): {msg}")

    async def bench(ctx):
        ctx.set(dut.node, node)
        ctx.set(dut.rank, rank)
        for s in (dut.local, dut.fwd, dut.rcredit, dut.open):
            ctx.set(s.ready, 1)
        pending, outstanding, nxt, credits = deque(), 0, 0, 0
        for cycle in range(limit):
            # the sources: a relay row while the R credits allow
            push = nxt < len(rows) and outstanding < rcfg.relay_window
            if push:
                src, tok, targets = rows[nxt]
                p = dut.row.payload
                tag = tags[src] % rcfg.tags_per_source
                tags[src] += 1
                ctx.set(p.src_node, src // gpn)
                ctx.set(p.src_rank, src % gpn)
                ctx.set(p.tag, tag)
                ctx.set(p.token, tok)
                ctx.set(p.valid, (1 << len(targets)) - 1)
                for i in range(T):
                    r, x, sl = targets[i] if i < len(targets) else (0, 0, 0)
                    ctx.set(p.gpu[i], r)
                    ctx.set(p.expert[i], x)
                    ctx.set(p.slot[i], sl)
                    ctx.set(p.weight[i], wbits if i < len(targets) else 0)
                w = 1.0 / rcfg.topk
                fx = model.relay_row(RelayRow(src // gpn, src % gpn, tag, tok,
                                              tuple((r, x, sl, w) for r, x, sl in targets)))
                if fx.local is not None:
                    mod[nxt][0] = tuple(sorted(fx.local.targets, key=lambda t: t[1]))
                nxt, outstanding = nxt + 1, outstanding + 1
            ctx.set(dut.row.valid, push)
            # the node's GPUs: forward credits back after FCREDIT_DELAY cycles
            if pending and pending[0][0] <= cycle:
                _, dst, ftag, model_ftag = pending.popleft()
                ctx.set(dut.fcredit.valid, 1)
                ctx.set(dut.fcredit.payload.dst, dst)
                ctx.set(dut.fcredit.payload.ftag, ftag)
                model.forward_credit(dst, model_ftag)
            else:
                ctx.set(dut.fcredit.valid, 0)
            if ctx.get(dut.local.valid):
                pl = dut.local.payload
                i = key_of.get((ctx.get(pl.src), ctx.get(pl.token)))
                if i is None or got[i][0] is not None:
                    fail(f"cycle {cycle}: a local report for no relay row or twice: "
                         f"source {ctx.get(pl.src)}, token {ctx.get(pl.token)}")
                got[i][0] = _entries(ctx, pl, M)
            if ctx.get(dut.fwd.valid):
                pl = dut.fwd.payload
                src = ctx.get(pl.src_node) * gpn + ctx.get(pl.src_rank)
                i, dst = key_of.get((src, ctx.get(pl.token))), ctx.get(pl.dst)
                if i is None or dst in got[i][1]:
                    fail(f"cycle {cycle}: a forward to rank {dst} for no relay row or twice: "
                         f"source {src}, token {ctx.get(pl.token)}")
                got[i][1][dst] = _entries(ctx, pl, M)
                f = model.emit(dst)
                if f is None:
                    fail(f"cycle {cycle}: the RTL forwards to rank {dst}, the model has nothing for it")
                mod[i][1][dst] = tuple(sorted(f.targets, key=lambda t: t[1]))
                pending.append((cycle + FCREDIT_DELAY, dst, ctx.get(pl.ftag), f.ftag))
            if ctx.get(dut.rcredit.valid):
                outstanding -= 1
                credits += 1
            if ctx.get(dut.open.valid):             # the sum the row opens at the reduce
                po, n = dut.open.payload, len(opens)
                v = ctx.get(po.valid)
                got_open = (ctx.get(po.src_node), ctx.get(po.token),
                            tuple((ctx.get(po.slot[j]), ctx.get(po.weight[j])) for j in range(T) if v >> j & 1))
                src, tok, targets = rows[n] if n < len(rows) else (None, None, ())
                if got_open != (None if src is None else src // gpn, tok,
                                tuple((sl, wbits) for _, _, sl in targets)):
                    fail(f"cycle {cycle}: open {n} is {got_open}, relay row {n} is {rows[n:n + 1]}")
                opens.append(got_open)
            await ctx.tick()
            if nxt == len(rows) and credits == len(rows) and len(opens) == len(rows) and not pending:
                break
        else:
            fail(f"{credits} of {len(rows)} relay credits back after {limit} cycles (a hang)")
        await ctx.tick()                          # (the counters lag their events by a cycle)
        out["cycles"] = cycle + 1
        out["counters"] = {"relay_rows": ctx.get(dut.relay_rows), "relay_local": ctx.get(dut.relay_local),
                           "fwd_rows": [ctx.get(dut.fwd_rows[r]) for r in range(gpn)],
                           "drops": [ctx.get(d) for d in dut.relay_drops],
                           "overflow": ctx.get(dut.relay_overflow)}

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    out.update(got=[(g[0] or (), g[1]) for g in got], model=[(m[0], m[1]) for m in mod], model_hub=model)
    return out


#: the relay side in the loop: rows of this many chunks (the co-simulation routes no data;
#: each relay row's chunks are seeded random words, staged, read back by the forwards)
LOOP_STAGE_CHUNKS = 4
#: cycles the loop's staging memory takes to answer a read (in order)
LOOP_STAGE_LATENCY = 6
#: cycles from a relay row's last chunk into the hub to the packet manager's credit of
#: its own targets, drawn per row from this range (the loop's environment, not a timing:
#: the packet manager's credit comes before or after the egress's, either order must work)
PM_CREDIT_DELAY = (4, 64)


def relay_side(rcfg):
    """The relay side of :class:`~moehub.rtl.relay.hub.RelayHub` with its input (the relay
    input's relay stream into the staging, as the hub wires it), wired by
    the hub's own :func:`~moehub.rtl.relay.side.connect_relay_side`: the relay staging (:class:`~moehub.rtl.relay.stage.RelayStage`)
    whose whole rows feed :class:`~moehub.rtl.relay.hub.RelayControl`, its forwards and
    rows' credits into the forward egress (:class:`~moehub.rtl.relay.egress.ForwardEgress`),
    the egress's, the staging's and the packet manager's credits into the credit join
    (:class:`~moehub.rtl.relay.credit_join.RelayCredits`). The loop drives the parts' outer
    ports (the staging's chunks and memory, the egress's reads and words, the forward and
    packet-manager credits) and reads the join's credits; it feeds the input's lanes and
    takes its packets for the packet manager."""
    from amaranth import Elaboratable, Module, Signal

    from ..rtl.relay.credit_join import RelayCredits
    from ..rtl.relay.egress import ForwardEgress
    from ..rtl.relay.hub import RelayControl
    from ..rtl.relay.ingress import RelayIngress
    from ..rtl.relay.side import connect_relay_side
    from ..rtl.relay.stage import RelayStage

    class RelaySide(Elaboratable):
        def __init__(self):
            self.ingress = RelayIngress(rcfg)
            self.stage, self.relay = RelayStage(rcfg), RelayControl(rcfg)
            self.egress, self.join = ForwardEgress(rcfg), RelayCredits(rcfg)
            self.node, self.rank = Signal(rcfg.node_bits), Signal(rcfg.gpu_bits)
            self.base = Signal(rcfg.addr_bits)

        def elaborate(self, platform):
            m = Module()
            m.submodules.relay = relay = self.relay
            m.submodules.ingress = ing = self.ingress
            m.submodules.stage, m.submodules.egress, m.submodules.join = self.stage, self.egress, self.join
            connect_relay_side(m, ing, self.stage, relay, self.egress, self.join,
                               node=self.node, rank=self.rank, base=self.base)
            m.d.comb += [relay.fin.valid.eq(0), relay.node.eq(self.node), relay.rank.eq(self.rank),
                         ing.node.eq(self.node), ing.rank.eq(self.rank)]
            return m
    return RelaySide()


def _relay_word(fmts, row, tag, chunk, word) -> int:
    """Chunk ``chunk`` of the relay row ``row`` (tagged ``tag``, data ``word``) as an input
    lane's word (:class:`~moehub.spec.formats.RelayFormats` ``relay_row``)."""
    from ..spec.formats import RowClass
    src, tok, targets = row
    gpn = fmts.cfg.node_gpus
    vals = {"cls": RowClass.RELAY, "src_node": src // gpn, "src_rank": src % gpn, "tag": tag, "token": tok,
            "chunk": chunk, "data": word}
    for i, (r, x, sl) in enumerate(targets):
        vals.update({f"valid{i}": 1, f"gpu{i}": r, f"expert{i}": x, f"slot{i}": sl})
    return fmts.relay_row.pack(**vals)


def _offer_lanes(ctx, ing, pending):
    """Drive the input lanes with their pending words (``None``: idle)."""
    for j, w in enumerate(pending):
        ctx.set(ing.i[j].valid, w is not None)
        ctx.set(ing.i[j].payload, 0 if w is None else w[-1])


def _input_drops(ctx, ing) -> int:
    """Rows the input dropped, every reason, and partial rows it dropped."""
    return sum(ctx.get(d) for d in ing.drops) + ctx.get(ing.bad_partials)


def run_side(rcfg, node: int, rank: int, rows, seed: int = 0, max_cycles: int | None = None) -> dict:
    """The relay rows ``rows`` (:func:`relay_rows`), each of :data:`LOOP_STAGE_CHUNKS`
    seeded random chunks, through the relay side (:func:`relay_side`) of GPU (``node``,
    ``rank``): chunk by chunk on the input lanes, each source within its window (a row waits
    for its tag's credit); the staging's memory answering after
    :data:`LOOP_STAGE_LATENCY`; each forward's credit back :data:`FCREDIT_DELAY` cycles after
    its last chunk, the packet manager's credit of a row naming this GPU a seeded random
    :data:`PM_CREDIT_DELAY` after its last chunk in. Returns what left: per (source,
    token, destination rank) the forward's entries and chunks (chunk, data), each row's
    credit cycle, the cycle of its forwards' last chunk and of its packet-manager credit,
    the staged data, the staging's writes, the input's packets for the packet manager per
    (source, token) as (chunk, data, entries), what the input and the staging dropped, the
    cycles. A forward word for no relay row, a credit for none or twice, or a hang is a
    :class:`RelayDisagrees`."""
    from amaranth.hdl import Value
    from amaranth.sim import Simulator


    from ..spec.formats import HubFormats, RelayFormats, RowClass
    C = LOOP_STAGE_CHUNKS
    scfg = rcfg.replace(row_bytes=C * rcfg.chunk_bytes)
    gpn, tps, L = scfg.node_gpus, scfg.tags_per_source, scfg.lanes
    dut = relay_side(scfg)
    fmts, pkt_fmt = RelayFormats(scfg), HubFormats(scfg).packet
    fmt = fmts.forward_row
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 1 << scfg.data_bits, size=(len(rows), C)).tolist()
    pm_delay = rng.integers(*PM_CREDIT_DELAY, size=len(rows)).tolist()
    key_of = {(s, t): i for i, (s, t, _) in enumerate(rows)}
    out = {"fwd": defaultdict(lambda: {"entries": None, "chunks": []}), "credits": {}, "data": data,
           "last_fwd": defaultdict(int), "pm": {}, "writes": 0, "own": defaultdict(list)}
    limit = max_cycles or 32 * (len(rows) + 16) * C * max(1, gpn)

    def fail(msg):
        raise RelayDisagrees(f"relay GPU {node * gpn + rank} (node {node}, rank {rank}), relay side: {msg}")

    async def bench(ctx):
        ing, stg, eg, join, relay = dut.ingress, dut.stage, dut.egress, dut.join, dut.relay
        ctx.set(dut.node, node)
        ctx.set(dut.rank, rank)
        ctx.set(dut.base, 0x4000_0000)
        for s in (stg.wr.ready, eg.rd.ready, eg.out.ready, join.credit.ready, relay.open.ready,
                  *(o.ready for o in ing.o)):
            ctx.set(s, 1)
        busy, tag_of, next_tag = {}, {}, defaultdict(int)     # (source, tag) in flight: its row
        nxt, chunk, mem, reads, fcredits, pms = 0, 0, {}, deque(), deque(), deque()
        lanes, taken = [None] * L, defaultdict(int)            # per lane (row, word); chunks in

        def tag_next():
            if nxt < len(rows) and nxt not in tag_of:
                src = rows[nxt][0]
                if (src, next_tag[src] % tps) not in busy:
                    tag_of[nxt] = next_tag[src] % tps
                    busy[(src, tag_of[nxt])] = nxt
                    next_tag[src] += 1
        for cycle in range(limit):
            # the sources: the next row's chunks, once its tag is free, each on a free lane
            # (the lanes looked at in a seeded order)
            tag_next()
            for j in rng.permutation(L).tolist():
                if lanes[j] is None and nxt in tag_of:
                    lanes[j] = (nxt, _relay_word(fmts, rows[nxt], tag_of[nxt], chunk, data[nxt][chunk]))
                    chunk += 1
                    if chunk == C:
                        nxt, chunk = nxt + 1, 0
                        tag_next()
            _offer_lanes(ctx, ing, lanes)
            # the memory, the forward and the packet manager's credits
            due = bool(reads) and reads[0][0] <= cycle
            ctx.set(eg.rdata.valid, due)
            ctx.set(eg.rdata.payload, reads[0][1] if due else 0)
            fc = bool(fcredits) and fcredits[0][0] <= cycle
            ctx.set(relay.fcredit.valid, fc)
            if fc:
                ctx.set(relay.fcredit.payload.dst, fcredits[0][1])
                ctx.set(relay.fcredit.payload.ftag, fcredits[0][2])
            pc = bool(pms) and pms[0][0] <= cycle
            ctx.set(join.pm.valid, pc)
            if pc:
                ctx.set(join.pm.payload.src, pms[0][1])
                ctx.set(join.pm.payload.tag, pms[0][2])
            # this cycle's handshakes
            for j in range(L):
                if lanes[j] is not None and ctx.get(ing.i[j].ready):
                    i = lanes[j][0]
                    lanes[j], taken[i] = None, taken[i] + 1
                    src, _, targets = rows[i]
                    if taken[i] == C and any(r == rank for r, _, _ in targets):
                        out["pm"][i] = cycle + pm_delay[i]
                        pms.append((out["pm"][i], src, tag_of[i]))
                        pms = deque(sorted(pms))
                if ctx.get(ing.o[j].valid):
                    pk = pkt_fmt.unpack(ctx.get(Value.cast(ing.o[j].payload)))
                    entries = tuple(sorted(((pk[f"expert{t}"], pk[f"slot{t}"]) for t in range(scfg.max_targets)
                                            if pk[f"valid{t}"]), key=lambda e: e[1]))
                    out["own"][(pk["src"], pk["token"])].append((pk["chunk"], pk["data"], entries))
            if ctx.get(stg.wr.valid):
                mem[ctx.get(stg.wr.payload.addr)] = ctx.get(stg.wr.payload.data)
                out["writes"] += 1
            if due and ctx.get(eg.rdata.ready):
                reads.popleft()
            if ctx.get(eg.rd.valid):
                reads.append((cycle + LOOP_STAGE_LATENCY, mem.get(ctx.get(eg.rd.payload), 0)))
            if fc and ctx.get(relay.fcredit.ready):
                fcredits.popleft()
            if pc and ctx.get(join.pm.ready):
                pms.popleft()
            if ctx.get(eg.out.valid):
                w = fmt.unpack(ctx.get(eg.out.payload.word))
                src, dst = w["src_node"] * gpn + w["src_rank"], ctx.get(eg.out.payload.dst)
                i = key_of.get((src, w["token"]))
                if i is None or w["cls"] != RowClass.FORWARD or w["fwd"] != rank:
                    fail(f"cycle {cycle}: a forward word for no relay row: {w}")
                f = out["fwd"][(src, w["token"], dst)]
                entries = tuple(sorted(((w[f"expert{t}"], w[f"slot{t}"]) for t in range(scfg.max_targets)
                                        if w[f"valid{t}"]), key=lambda e: e[1]))
                if f["entries"] not in (None, entries):
                    fail(f"cycle {cycle}: a forward of source {src}, token {w['token']} to rank {dst} changed "
                         f"its entries within the row: {f['entries']}, then {entries}")
                f["entries"] = entries
                f["chunks"].append((w["chunk"], w["data"]))
                if w["chunk"] == C - 1:
                    fcredits.append((cycle + FCREDIT_DELAY, dst, w["ftag"]))
                    out["last_fwd"][i] = max(out["last_fwd"][i], cycle)
            if ctx.get(join.credit.valid):
                cr = (ctx.get(join.credit.payload.src), ctx.get(join.credit.payload.tag))
                if cr not in busy:
                    fail(f"cycle {cycle}: an R credit of source {cr[0]}, tag {cr[1]}: no relay row holds it")
                out["credits"][busy.pop(cr)] = cycle
            await ctx.tick()
            if nxt == len(rows) and not busy and not (reads or fcredits or pms) \
                    and not any(ctx.get(o.valid) for o in ing.o):
                break
        else:
            fail(f"{len(out['credits'])} of {len(rows)} R credits back after {limit} cycles (a hang)")
        out.update(cycles=cycle + 1, drops=ctx.get(stg.drops) + _input_drops(ctx, ing))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return out


def check_side(rcfg, g: int, rows, want) -> dict:
    """Relay GPU ``g``'s relay side in RTL (:func:`run_side`) against the co-simulation's
    routes (``want``: :func:`expected_routes`): every forward the routes name, to its rank,
    with the row's targets there, its :data:`LOOP_STAGE_CHUNKS` chunks in order, each the
    relay row's staged data; no other forward; every relay row credited once, after the
    last chunk of each of its forwards and, naming this GPU, the packet manager's credit;
    a row naming this GPU handed the packet manager a packet a chunk, with the targets the
    routes leave here and the chunk's data; nothing dropped, each row naming another GPU
    staged whole. Raises
    :class:`RelayDisagrees`."""
    gpn = rcfg.node_gpus
    side = run_side(rcfg, g // gpn, g % gpn, rows, seed=g)
    C = LOOP_STAGE_CHUNKS

    def fail(msg):
        raise RelayDisagrees(f"relay GPU {g}, relay side: {msg}")
    expect = {}
    for i, ((src, tok, _), (_, fwd)) in enumerate(zip(rows, want)):
        for dst, targets in fwd.items():
            expect[(src, tok, dst)] = (targets, [(c, side["data"][i][c]) for c in range(C)])
    got = {k: (f["entries"], f["chunks"]) for k, f in side["fwd"].items()}
    for k in sorted(set(expect) | set(got)):
        if got.get(k) != expect.get(k):
            fail(f"forward of source {k[0]}, token {k[1]} to rank {k[2]}: RTL {got.get(k)}, "
                 f"co-simulation and staged data {expect.get(k)}")
    for i, (src, tok, _) in enumerate(rows):
        after = max(side["last_fwd"].get(i, -1), side["pm"].get(i, -1))
        if side["credits"].get(i, -1) <= after:
            fail(f"relay row {i} (source {src}, token {tok}): its R credit at cycle {side['credits'].get(i)}, "
                 f"not after its forwards' last chunk and its own targets' credit (cycle {after})")
    own = {(src, tok): sorted((c, side["data"][i][c], local) for c in range(C))
           for i, ((src, tok, _), (local, _)) in enumerate(zip(rows, want)) if local}
    got_own = {k: sorted(v) for k, v in side["own"].items()}
    for k in sorted(set(own) | set(got_own)):
        if got_own.get(k) != own.get(k):
            fail(f"own targets of source {k[0]}, token {k[1]} to the packet manager: RTL (chunk, data, "
                 f"entries) {got_own.get(k)}, co-simulation and the row's data {own.get(k)}")
    remote = sum(bool(fwd) for _, fwd in want)
    if len(side["credits"]) != len(rows) or side["drops"] or side["writes"] != remote * C:
        fail(f"{len(side['credits'])} R credits for {len(rows)} relay rows, {side['drops']} chunks or rows "
             f"dropped by the input or the staging, {side['writes']} chunks staged for {remote} rows naming "
             f"another GPU")
    return {"staged_chunks": side["writes"], "forward_chunks": sum(len(c) for _, c in got.values()),
            "own_packets": sum(len(v) for v in got_own.values()), "side_cycles": side["cycles"]}


#: the combine side in the loop (:func:`combine_side`): partial rows of this many chunks,
#: each one BF16 element (a datapath one element wide) -- the co-simulation routes no
#: data, so each partial row is seeded random BF16; what is compared is the sums to the bit
#: and the accumulator traffic in rows (scaled to the layer's rows for the bytes)
LOOP_CHUNKS = 2
#: cycles the loop's accumulator memory takes to answer a read (in order)
LOOP_MEMORY_LATENCY = 8


def combine_config(rcfg):
    """The relay config the combine side runs in the loop: rows of :data:`LOOP_CHUNKS`
    chunks of one BF16 element (16 data bits), the rest the layer's relay config."""
    return rcfg.replace(row_bytes=LOOP_CHUNKS * rcfg.chunk_bytes, data_bits=16)


def combine_side(rcfg):
    """The combine side of :class:`~moehub.rtl.relay.hub.RelayHub` with its input (the
    input's partial stream into the partial staging, as the hub wires it), wired
    by the hub's own :func:`~moehub.rtl.relay.side.connect_combine_side`: the partial
    staging (:class:`~moehub.rtl.relay.stage.PartialStage`), its feed
    (:class:`~moehub.rtl.relay.partial_feed.PartialFeed`) and the reduce path
    (:class:`~moehub.rtl.relay.reduce_path.ReducePath`: the reduce unit, its engine, the
    accumulate datapath, ``data_bits / 16`` elements a chunk). The loop drives the partial
    chunks in on the input's lanes, the staging's and the accumulators' memories, the opens, and takes the
    P credits and the reduced rows."""
    from amaranth import Elaboratable, Module, Signal

    from ..rtl.relay.ingress import RelayIngress
    from ..rtl.relay.partial_feed import PartialFeed
    from ..rtl.relay.reduce_path import ReducePath
    from ..rtl.relay.side import connect_combine_side
    from ..rtl.relay.stage import PartialStage

    class CombineSide(Elaboratable):
        def __init__(self):
            self.ingress = RelayIngress(rcfg)
            self.pstage, self.feed, self.reduce = PartialStage(rcfg), PartialFeed(rcfg), ReducePath(rcfg)
            self.node, self.rank = Signal(rcfg.node_bits), Signal(rcfg.gpu_bits)
            self.base = Signal(rcfg.addr_bits)

        def elaborate(self, platform):
            m = Module()
            m.submodules.ingress = ing = self.ingress
            m.submodules.pstage, m.submodules.feed = self.pstage, self.feed
            m.submodules.reduce = self.reduce
            connect_combine_side(m, ing, self.pstage, self.feed, self.reduce, base=self.base)
            m.d.comb += [self.reduce.node.eq(self.node), self.reduce.rank.eq(self.rank),
                         ing.node.eq(self.node), ing.rank.eq(self.rank), ing.relay.ready.eq(1)]
            return m
    return CombineSide()


def _partial_word(fmts, part, ptag, chunk, word) -> int:
    """Chunk ``chunk`` of the partial row ``part`` (owner, token, slot, sender; P tag
    ``ptag``, data ``word``) as an input lane's word (``partial_row``)."""
    from ..spec.formats import RowClass
    owner, tok, slot, sender = part
    gpn = fmts.cfg.node_gpus
    return fmts.partial_row.pack(cls=RowClass.PARTIAL, sender=sender, ptag=ptag, src_node=owner // gpn,
                                 src_rank=owner % gpn, token=tok, slot=slot, chunk=chunk, data=word)


def run_reduce(rcfg, node: int, rank: int, rows, parts, seed: int = 0,
               max_cycles: int | None = None) -> dict:
    """The opens of ``rows`` (each with its targets' slots, weight ``1/k``), then the
    partial rows ``parts`` (``[(src, token, slot, sender), ...]`` in accumulate order, the
    sender the local rank of the part's GPU, each with seeded random BF16 data) through the
    combine side (:func:`combine_side`, :func:`combine_config`) of a relay of ``rank`` in
    ``node``: chunk by chunk on the input lanes, each sender within its window of
    ``partial_span`` P tags (a row waits for its tag's credit), the chunks of the rows in
    flight interleaved and each row's in a seeded random order; the staging's memory
    answering after :data:`LOOP_STAGE_LATENCY`, the accumulators' after
    :data:`LOOP_MEMORY_LATENCY`. Beside it :class:`ReduceModel`, fed each partial row as the
    reduce takes it. Returns the operations of both, the reduced rows of both (BF16 bits),
    the accumulator rows read and written, the unit's counters, the chunks staged, the
    staging's drops, the P credits, the cycles."""
    from amaranth.sim import Simulator

    from ..rtl.relay.reduce_unit import Op
    from ..spec.formats import RelayFormats
    from ..spec.relay import ReduceModel, bf16_bits, bf16_value, to_bf16
    pcfg = combine_config(rcfg)
    dut, model = combine_side(pcfg), ReduceModel(pcfg, node=node)
    red, st, fd, ing = dut.reduce, dut.pstage, dut.feed, dut.ingress
    fmts, lanes = RelayFormats(pcfg), [None] * pcfg.lanes      # per lane (flight entry, word)
    rng = np.random.default_rng(seed)
    T, gpn, C, span = pcfg.relay_targets, pcfg.node_gpus, LOOP_CHUNKS, pcfg.partial_span
    wbits = bf16_bits(1.0 / pcfg.topk)
    names = {Op.WRITE: "write", Op.ADD: "add", Op.LAST: "last", Op.ONLY: "only", Op.FLUSH: "flush"}
    ops, got, out = [], [], {"writes": 0, "pcredits": 0}
    # (values around 1 of both signs: BF16 bits of N(0, 1) samples)
    data = [to_bf16(rng.standard_normal(C).astype(np.float32)).view(np.uint32) >> 16 for _ in parts]
    orders = [rng.permutation(C).tolist() for _ in parts]
    pick = rng.integers(0, 1 << 30, size=C * len(parts) + 1).tolist()
    index = {(o // gpn, t, sl): j for j, (o, t, sl, _) in enumerate(parts)}
    limit = max_cycles or pcfg.reduce_records + (2 * C + 8) * (len(rows) + 4 * len(parts)) + 256

    def fail(msg):
        raise RelayDisagrees(f"relay GPU {node * gpn + rank} (node {node}, rank {rank}), combine side: {msg}")

    async def bench(ctx):
        ctx.set(dut.node, node)
        ctx.set(dut.rank, rank)
        ctx.set(dut.base, 0x5000_0000)
        for s in (red.out.ready, red.wr.ready, red.rd.ready, st.wr.ready, fd.rd.ready, fd.pcredit.ready,
                  *(o.ready for o in ing.o)):
            ctx.set(s, 1)
        await ctx.tick().until(~red.clearing)      # (its clearing sweep, simulated alone)
        po = red.open.payload
        i, nxt, cycle, row = 0, 0, pcfg.reduce_records, []
        mem, smem, pending, sreads = {}, {}, deque(), deque()
        busy, next_tag, flight, n_pick = {}, defaultdict(int), [], 0   # (sender, tag): part; [part, tag, left]
        while cycle < limit:
            ctx.set(red.open.valid, i < len(rows))
            if i < len(rows):
                src, tok, targets = rows[i]
                ctx.set(po.src_node, src // gpn)
                ctx.set(po.token, tok)
                ctx.set(po.valid, (1 << len(targets)) - 1)
                for t in range(T):
                    ctx.set(po.slot[t], targets[t][2] if t < len(targets) else 0)
                    ctx.set(po.weight[t], wbits if t < len(targets) else 0)
            # the senders: once the opens are in, the next part starts when its sender's
            # next tag is free; each free lane takes a chunk of one of the rows in flight
            if i == len(rows) and nxt < len(parts):
                sender = parts[nxt][3]
                tag = next_tag[sender] % span
                if (sender, tag) not in busy:
                    busy[(sender, tag)] = nxt
                    next_tag[sender] += 1
                    flight.append([nxt, tag, list(orders[nxt])])
                    nxt += 1
            for lane in range(len(lanes)):
                if lanes[lane] is None and flight:
                    k = pick[n_pick] % len(flight)
                    j, tag, left = flight[k]
                    lanes[lane] = (j, _partial_word(fmts, parts[j], tag, left[0], int(data[j][left[0]])))
                    left.pop(0)
                    n_pick += 1
                    if not left:
                        flight.pop(k)
            _offer_lanes(ctx, ing, lanes)
            due = bool(pending) and pending[0][0] <= cycle
            ctx.set(red.rdata.valid, due)
            ctx.set(red.rdata.payload, pending[0][1] if due else 0)
            sdue = bool(sreads) and sreads[0][0] <= cycle
            ctx.set(fd.rdata.valid, sdue)
            ctx.set(fd.rdata.payload, sreads[0][1] if sdue else 0)
            # this cycle's handshakes
            for lane, o in enumerate(ing.o):
                if lanes[lane] is not None and ctx.get(ing.i[lane].ready):
                    lanes[lane] = None
                if ctx.get(o.valid):
                    fail(f"cycle {cycle}: the input sent the packet manager a packet on lane {lane}: "
                         f"partial rows are the reduce's")
            if ctx.get(st.wr.valid):
                smem[ctx.get(st.wr.payload.addr)] = ctx.get(st.wr.payload.data)
                out["writes"] += 1
            if sdue and ctx.get(fd.rdata.ready):
                sreads.popleft()
            if ctx.get(fd.rd.valid) and ctx.get(fd.rd.ready):
                sreads.append((cycle + LOOP_STAGE_LATENCY, smem.get(ctx.get(fd.rd.payload), 0)))
            if ctx.get(fd.pcredit.valid):
                pc = (ctx.get(fd.pcredit.payload.sender), ctx.get(fd.pcredit.payload.ptag))
                if pc not in busy:
                    fail(f"cycle {cycle}: a P credit of sender {pc[0]}, tag {pc[1]}: no partial row holds it")
                busy.pop(pc)
                out["pcredits"] += 1
            if ctx.get(red.wr.valid):
                mem[ctx.get(red.wr.payload.addr)] = ctx.get(red.wr.payload.data)
            if due and ctx.get(red.rdata.ready):
                pending.popleft()
            if ctx.get(red.rd.valid):
                pending.append((cycle + LOOP_MEMORY_LATENCY, mem.get(ctx.get(red.rd.payload.addr), 0)))
            uo = red.unit.op
            if ctx.get(uo.valid) and ctx.get(uo.ready):
                ops.append((names[Op(ctx.get(uo.payload.kind))], ctx.get(uo.payload.index),
                            ctx.get(uo.payload.slot), ctx.get(uo.payload.parts)))
            if i < len(rows) and ctx.get(red.open.ready):
                src, tok, targets = rows[i]
                model.open(src, tok, tuple((sl, float(bf16_value(wbits))) for _, _, sl in targets))
                i += 1
            up = red.unit.part
            if ctx.get(up.valid) and ctx.get(up.ready):
                key = (ctx.get(up.payload.src_node), ctx.get(up.payload.token), ctx.get(up.payload.slot))
                if key not in index:
                    fail(f"cycle {cycle}: the reduce took a partial row {key} no sender sent")
                j = index[key]
                model.partial(*parts[j][:3], np.array([bf16_value(int(b)) for b in data[j]], np.float32))
            if ctx.get(red.out.valid):
                o = red.out.payload
                row.append(ctx.get(o.data))
                if len(row) == C:
                    got.append((ctx.get(o.src_node) * gpn + ctx.get(o.src_rank), ctx.get(o.token),
                                ctx.get(o.parts), tuple(row)))
                    row = []
            await ctx.tick()
            cycle += 1
            if i == len(rows) and nxt == len(parts) and not (flight or busy or sreads or pending
                                                             or ctx.get(red.busy) or any(lanes)):
                break
        else:
            fail(f"{out['pcredits']} of {len(parts)} P credits back after {limit} cycles (a hang)")
        await ctx.tick()
        out.update(cycles=cycle, red_rows=ctx.get(red.red_rows), red_open=ctx.get(red.red_open),
                   drops=[ctx.get(d) for d in red.drops], acc_reads=ctx.get(red.acc_reads),
                   acc_writes=ctx.get(red.acc_writes), stage_drops=ctx.get(st.drops) + _input_drops(ctx, ing))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    want = [(k, model.record_index(*key), -1 if slot is None else slot, n) for k, key, slot, n in model.ops]
    model_rows = [(src, tok, n, tuple(int(b) for b in (r.view(np.uint32) >> 16))) for src, tok, n, r in model.out]
    out.update(ops=[(k, i, -1 if k == "flush" else s, n) for k, i, s, n in ops], model_ops=want,
               rows=got, model_rows=model_rows, model=model)
    return out


def part_slots(L, parts, g: int) -> list:
    """The partial rows relay ``g`` accumulates, in order (``parts``: a
    :class:`.systems.relay.ReduceParts`), as (owner, token, top-k slot, sender): the slot
    is the place of (the part's GPU, its local expert) in the token's top-k, the sender
    that GPU's local rank."""
    gpn = min(L.sys.gpus_per_node, L.G)
    m = parts.relay == g
    own, tok, gpu, x = parts.owner[m], parts.tok[m], parts.gpu[m], parts.expert[m]
    base = (own * L.T + tok) * L.k
    cand = base[:, None] + np.arange(L.k)[None, :]
    hit = (L.dest[cand] == gpu[:, None]) & (L.lexp[cand] == x[:, None])
    if not hit.any(axis=1).all():
        raise RelayDisagrees(f"relay GPU {g}: a partial row whose (GPU, expert) is not in its token's top-k")
    slot = L.slot[cand[np.arange(len(cand)), hit.argmax(axis=1)]]
    return list(zip(own.tolist(), tok.tolist(), slot.tolist(), (gpu % gpn).tolist()))


def check_reduce(L, rcfg, g: int, rows, ps) -> dict:
    """Relay GPU ``g``'s reduce in RTL (:func:`run_reduce`) against the model and the
    co-simulation: every op the model's, every reduced row the model's to the bit, one per
    (token, node) the co-simulation sends, nothing refused; its accumulator rows read and
    written, at the layer's row size, the co-simulation's HBM bytes for this relay
    (:func:`~moehub.spec.relay.reduce_hbm_bytes` per sum). Raises :class:`RelayDisagrees`."""
    from ..spec.relay import reduce_hbm_bytes
    gpn = rcfg.node_gpus
    red = run_reduce(rcfg, g // gpn, g % gpn, rows, ps, seed=g)
    sums = {}
    for o, t, *_ in ps:
        sums[(o, t)] = sums.get((o, t), 0) + 1
    if red["ops"] != red["model_ops"] or red["red_rows"] != len(sums) or any(red["drops"]) \
            or red["red_open"] != len(rows) - len(sums):
        first = next((i for i, (a, b) in enumerate(zip(red["ops"], red["model_ops"])) if a != b),
                     min(len(red["ops"]), len(red["model_ops"])))
        raise RelayDisagrees(f"relay GPU {g}: reduce op {first}: RTL "
                             f"{red['ops'][first:first + 1]}, model {red['model_ops'][first:first + 1]}; "
                             f"reduced rows {red['red_rows']} (co-simulation {len(sums)}), "
                             f"open {red['red_open']}, refused {red['drops']}")
    if red["rows"] != red["model_rows"]:
        first = next((i for i, (a, b) in enumerate(zip(red["rows"], red["model_rows"])) if a != b),
                     min(len(red["rows"]), len(red["model_rows"])))
        raise RelayDisagrees(f"relay GPU {g}: reduced row {first}: RTL {red['rows'][first:first + 1]}, "
                             f"model {red['model_rows'][first:first + 1]}")
    if red["stage_drops"] or red["pcredits"] != len(ps) or red["writes"] != LOOP_CHUNKS * len(ps):
        raise RelayDisagrees(f"relay GPU {g}: the input and the partial staging dropped {red['stage_drops']} chunks, staged "
                             f"{red['writes']} of {len(ps)} rows' {LOOP_CHUNKS * len(ps)}, returned "
                             f"{red['pcredits']} P credits")
    row_bytes = 4 * L.model.hidden                     # an FP32 accumulator row of the layer
    rtl_bytes = (red["acc_reads"] + red["acc_writes"]) * row_bytes
    cosim_bytes = sum(reduce_hbm_bytes(k, L.model.hidden) for k in sums.values())
    if rtl_bytes != cosim_bytes:
        raise RelayDisagrees(f"relay GPU {g}: the reduce's accumulators moved {rtl_bytes:,} HBM bytes "
                             f"in RTL ({red['acc_reads']} accumulator rows read, {red['acc_writes']} "
                             f"written), the co-simulation counts {cosim_bytes:,}")
    return {"partial_rows": len(ps), "partial_staged_chunks": red["writes"], "reduced_rows": red["red_rows"],
            "reduce_cycles": red["cycles"], "reduce_hbm_bytes": rtl_bytes}


def check_relay_gpu(L, rcfg, routes, last1, g: int, parts=None) -> dict:
    """Relay GPU ``g`` in RTL (module docstring): raises :class:`RelayDisagrees` where the
    RTL, the model and the co-simulation differ; returns the comparison's summary (rows,
    forwards, sums, cycles, simulator seconds)."""
    gpn = rcfg.node_gpus
    node, rank = g // gpn, g % gpn
    t0 = time.perf_counter()
    rows = relay_rows(L, routes, last1, g)
    want = expected_routes(rows, rank)
    moved, here = routed_forwards(routes, g, gpn)
    for (src, tok, _), (local, fwd) in zip(rows, want):
        if set(fwd) != moved.get((src, tok), set()) or bool(local) != ((src, tok) in here):
            raise RelayDisagrees(f"relay GPU {g}: source {src}, token {tok}: its targets say forwards "
                                 f"to {sorted(fwd)} and {'a' if local else 'no'} local write, the "
                                 f"co-simulation's network moved {sorted(moved.get((src, tok), ()))}")
    ctl = run_control(rcfg, node, rank, rows)
    for i, (w, got, mod) in enumerate(zip(want, ctl["got"], ctl["model"])):
        if not (got == w == mod):
            raise RelayDisagrees(f"relay GPU {g}: relay row {i} (source {rows[i][0]}, token "
                                 f"{rows[i][1]}): co-simulation {w}, RTL {got}, model {mod}")
    c = ctl["counters"]
    fwd = [sum(r in f for _, f in want) for r in range(gpn)]
    local = sum(bool(loc) for loc, _ in want)
    if (c["relay_rows"], c["relay_local"], c["fwd_rows"], any(c["drops"]), c["overflow"]) != \
            (len(rows), local, fwd, False, 0):
        raise RelayDisagrees(f"relay GPU {g}: RTL counters {c}, co-simulation rows {len(rows)}, "
                             f"local {local}, forwards {fwd}, no drop")
    summary = {"gpu": g, "unit": "relay", "relay_rows": len(rows), "relay_local": local,
               "forward_rows": int(sum(fwd)), "control_cycles": ctl["cycles"]}
    summary.update(check_side(rcfg, g, rows, want))
    if parts is not None:
        summary.update(check_reduce(L, rcfg, g, rows, part_slots(L, parts, g)))
    summary["sim_s"] = time.perf_counter() - t0
    return summary
