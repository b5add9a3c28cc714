"""The relay hub's input (moehub/rtl/relay/ingress.py): every lane's packet sorted by its
class and a forward row turned into protocol v2's packet, against the reference
(moehub.spec.relay.ingress), lane by lane and cycle by cycle; then the whole RelayHub in
lock-step with a plain MoEHub fed the reference's packets (the packet manager behind the
input is exactly the v1/v2 hub's, so a forward row is written as a multicast row of its
original source).

The lane bench drives random words of every class on every lane -- forward rows mostly
well formed (good, or broken in one field), relay rows likewise, direct packets of this
node's GPUs, of another node's and out of range, partial rows likewise, random bits
above each format -- each held until the lane takes it, with random ready on all three
outputs, then drains. Every word a lane takes must come out as the reference says, in
the lane's order: the packet for the packet manager to the bit, out of the lane's buffer;
the relay chunk's stage payload, on the relay stream, and the partial chunk's, on the
partial stream (each one a cycle, the lowest lane first); nothing for a drop. At the end
nothing is left inside and the counters (FWD_IN, RELAY_DROPS per reason, the partial
rows dropped) are the reference's counts. A failure names the seed.
"""
import random

import pytest
from amaranth import Elaboratable, Module, Value
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from moehub.rtl.hub import MoEHub
from moehub.rtl.relay.hub import RelayHub
from moehub.rtl.layouts import HubLayouts
from moehub.rtl.relay.ingress import LANE_DEPTH, RelayIngress
from moehub.spec.config import ConfigError, load_hub_config
from moehub.spec.csr_map import CTRL_START, CsrMap
from moehub.spec.formats import (CtlKind, HubFormats, PacketKind, ReduceReason, RelayFormats, RelayPorts,
                                 RelayReason, RowClass, config_reasons, pack_fields)
from moehub.spec.relay import Ingress, global_gpu, ingress
from moehub.verif.formal.plant import broken_class

TINY = load_hub_config("tiny")
#: 2 nodes x 2 GPUs, multicast rows of 3 targets, 2 tags per source (1 forward tag)
R22 = TINY.replace(sources=4, nodes=2, gpus_per_node=2, relay=True, forward_tags=1, topk=3, max_targets=3,
                   tags_per_source=2)
#: 3 nodes x 3 GPUs, 2 forward tags
R33 = TINY.replace(sources=9, nodes=3, gpus_per_node=3, relay=True, forward_tags=2, topk=3, max_targets=3)
#: one expert per GPU: plain rows (max_targets 1)
R1 = TINY.replace(experts=1, sources=8, nodes=2, gpus_per_node=4, relay=True, forward_tags=1, topk=3,
                  max_targets=1)


# ------------------------------------------------------------------ words
def pack(fmt, values: dict) -> int:
    """``values`` packed as ``fmt`` (each value masked to its field)."""
    return fmt.pack(**{k: v & ((1 << fmt.widths[k]) - 1) for k, v in values.items() if k in fmt.widths})


def forward_fields(rng, cfg, node, rank) -> dict:
    """A forward row's header and entries at hub (node, rank): mostly well formed (distinct
    experts in range), else one field anything its width holds."""
    M, others = cfg.max_targets, [g for g in range(cfg.node_gpus) if g != rank]
    fwd = rng.choice(others)
    f = dict(cls=RowClass.FORWARD, fwd=fwd, ftag=rng.randrange(cfg.forward_tags),
             src_node=rng.choice([n for n in range(cfg.nodes) if n != node]), src_rank=fwd,
             token=rng.randrange(1 << cfg.token_bits))
    xs = rng.sample(range(cfg.experts), min(M, cfg.experts)) + [0] * M
    for i in range(M):
        f.update({f"valid{i}": int(i == 0 or rng.random() < 0.5), f"expert{i}": xs[i],
                  f"slot{i}": rng.randrange(cfg.topk)})
    if rng.random() < 0.4:
        k = rng.choice(["fwd", "ftag", "src_node", "src_rank", "valid0", "expert0", f"expert{M - 1}"])
        f[k] = rng.randrange(1 << RelayFormats(cfg).forward_row.widths[k])
        if k == f"expert{M - 1}" and M > 1:
            f[f"valid{M - 1}"] = 1
    return f


def relay_fields(rng, cfg, node, rank) -> dict:
    """A relay row's fields at hub (node, rank): mostly well formed (targets on this GPU
    and others of the node, distinct slots and (GPU, expert) pairs), else one field
    anything its width holds."""
    T, fm = cfg.relay_targets, RelayFormats(cfg)
    f = dict(cls=RowClass.RELAY, src_node=rng.choice([n for n in range(cfg.nodes) if n != node]), src_rank=rank,
             tag=rng.randrange(cfg.tags_per_source), token=rng.randrange(1 << cfg.token_bits))
    pairs = rng.sample([(g, x) for g in range(cfg.node_gpus) for x in range(cfg.experts)], T)
    slots = rng.sample(range(cfg.topk), min(T, cfg.topk)) + [0] * T
    for i in range(T):
        f.update({f"valid{i}": int(i == 0 or rng.random() < 0.6), f"gpu{i}": pairs[i][0],
                  f"expert{i}": pairs[i][1], f"slot{i}": slots[i], f"weight{i}": rng.getrandbits(16)})
    if rng.random() < 0.4:
        k = rng.choice(["src_node", "src_rank", "tag", "gpu0", "gpu0", "gpu0", "expert0", "slot0", "valid0"])
        f[k] = rng.randrange(1 << fm.relay_row.widths[k])
    return f


def partial_fields(rng, cfg, node, rank) -> dict:
    """A partial row's header at hub (node, rank): mostly well formed (a sender of the node
    with a P tag, the owner a remote GPU of this rank), else one field anything its width
    holds."""
    f = dict(cls=RowClass.PARTIAL, sender=rng.randrange(cfg.node_gpus), ptag=rng.randrange(cfg.partial_span),
             src_node=rng.choice([n for n in range(cfg.nodes) if n != node]), src_rank=rank,
             token=rng.randrange(1 << cfg.token_bits), slot=rng.randrange(cfg.topk))
    if rng.random() < 0.4:
        k = rng.choice(["sender", "ptag", "src_node", "src_rank", "slot"])
        f[k] = rng.randrange(1 << RelayFormats(cfg).partial_row.widths[k])
    return f


def random_word(rng, cfg, node, rank) -> int:
    """One lane's word of any class (see the module docstring)."""
    fm = RelayFormats(cfg)
    cls = rng.choices([RowClass.DIRECT, RowClass.RELAY, RowClass.FORWARD, RowClass.PARTIAL],
                      [0.25, 0.25, 0.3, 0.2])[0]
    tail = dict(chunk=rng.choice([0, rng.randrange(1 << cfg.chunk_bits)]), data=rng.getrandbits(cfg.data_bits))
    if cls == RowClass.FORWARD:
        word = pack(fm.forward_row, {**forward_fields(rng, cfg, node, rank), **tail})
        width = fm.forward_row.width
    elif cls == RowClass.DIRECT:
        src = rng.choice([node * cfg.node_gpus + rng.randrange(cfg.node_gpus), rng.randrange(cfg.sources),
                          rng.randrange(1 << cfg.src_bits)])
        vals = {f.name: rng.getrandbits(f.width) for f in fm.direct.fields}
        vals.update(cls=RowClass.DIRECT, src=src, kind=rng.choice([PacketKind.DATA] * 3 + [PacketKind.EOS]), **tail)
        word, width = pack(fm.direct, vals), fm.direct.width
    elif cls == RowClass.RELAY:
        word = pack(fm.relay_row, {**relay_fields(rng, cfg, node, rank), **tail})
        width = fm.relay_row.width
    else:
        word = pack(fm.partial_row, {**partial_fields(rng, cfg, node, rank), **tail})
        width = fm.partial_row.width
    if rng.random() < 0.2:                       # bits above the format: ignored
        word |= rng.getrandbits(fm.lane_bits - width) << width
    return word


# ------------------------------------------------------------------ the lane bench
def run_lanes(cfg, seed, cycles=400, node=1, rank=0, unit=RelayIngress):
    """Drive ``unit(cfg)`` at random, then drain it; returns the outcomes seen (an
    AssertionError names the seed)."""
    dut = unit(cfg)
    L, hf = cfg.lanes, HubFormats(cfg)
    seen = {"hub": 0, "relay": 0, "both": 0, "drop": 0, "partial": 0, "fwd_hub": 0, "reasons": set()}

    async def bench(ctx):
        rng = random.Random(seed)
        ctx.set(dut.node, node)
        ctx.set(dut.rank, rank)
        counts = {"fwd_in": 0, "drops": [0] * len(RelayReason), "bad_partials": 0}
        pending = [None] * L
        # expected out, per lane: packets, relay chunks, partial chunks
        to_hub, to_rel, to_par = [[] for _ in range(L)], [[] for _ in range(L)], [[] for _ in range(L)]
        par_at = [[] for _ in range(L)]          # the cycle each expected partial chunk was taken
        for cycle in range(cycles + 40):
            feeding = cycle < cycles
            for j in range(L):
                if pending[j] is None and feeding and rng.random() < 0.8:
                    pending[j] = random_word(rng, cfg, node, rank)
                ctx.set(dut.i[j].valid, pending[j] is not None)
                ctx.set(dut.i[j].payload, pending[j] or 0)
                ctx.set(dut.o[j].ready, not feeding or rng.random() < 0.7)
            ctx.set(dut.relay.ready, not feeding or rng.random() < 0.7)
            ctx.set(dut.part.ready, not feeding or rng.random() < 0.7)
            where = f"seed {seed} cycle {cycle}"
            for j in range(L):
                if ctx.get(dut.o[j].valid) and ctx.get(dut.o[j].ready):
                    assert to_hub[j], f"{where} lane {j}: a packet for no word"
                    pkt, want = ctx.get(Value.cast(dut.o[j].payload)), to_hub[j].pop(0)
                    assert pkt == want, f"{where} lane {j}: packet {hf.packet.unpack(pkt)}, want {hf.packet.unpack(want)}"
            if ctx.get(dut.relay.valid) and ctx.get(dut.relay.ready):
                got = ctx.get(Value.cast(dut.relay.payload))
                lanes = [j for j in range(L) if to_rel[j] and to_rel[j][0] == got]
                assert lanes, f"{where}: relay chunk {got:#x} is no lane's next"
                to_rel[lanes[0]].pop(0)
            if ctx.get(dut.part.valid) and ctx.get(dut.part.ready):
                got = ctx.get(Value.cast(dut.part.payload))
                lanes = [j for j in range(L) if to_par[j] and to_par[j][0] == got]
                assert lanes, f"{where}: partial chunk {got:#x} is no lane's next"
                # (through the output register: a lower lane's chunk taken no later than this
                # one was in its lane's register when this one was granted, and should have won)
                taken = par_at[lanes[0]][0]
                assert not any(par_at[j] and par_at[j][0] <= taken for j in range(lanes[0])), \
                    f"{where}: a lower lane's partial chunk waits"
                to_par[lanes[0]].pop(0)
                par_at[lanes[0]].pop(0)
            for j in range(L):
                if pending[j] is not None and ctx.get(dut.i[j].ready):
                    _taken(cfg, node, rank, pending[j], (to_hub[j], to_rel[j], to_par[j]), counts, seen)
                    par_at[j] += [cycle] * (len(to_par[j]) - len(par_at[j]))
                    pending[j] = None
            await ctx.tick()
        assert not any(to_hub) and not any(to_rel) and not any(to_par), \
            f"seed {seed}: never out: {to_hub}, {to_rel}, {to_par}"
        got = {"fwd_in": ctx.get(dut.fwd_in), "drops": [ctx.get(d) for d in dut.drops],
               "bad_partials": ctx.get(dut.bad_partials)}
        assert got == counts, f"seed {seed}: counters {got}, reference {counts}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


def stage_word(cfg, word, want: Ingress) -> int:
    """The relay stream's payload (RelayPorts ``stage``) for a relay row's chunk ``word``."""
    T, r = cfg.relay_targets, RelayFormats(cfg).relay_row.unpack(word)
    vals = {k: r[k] for k in ("src_node", "src_rank", "tag", "token", "chunk", "data")}
    vals.update(valid=sum(r[f"valid{i}"] << i for i in range(T)), drop=int(want.reason is not None),
                local=int(want.local), **{k: [r[f"{k}{i}"] for i in range(T)] for k in ("gpu", "expert", "slot", "weight")})
    return pack_fields(RelayPorts(cfg).stage, vals)


def partial_stage_word(cfg, word, want: Ingress) -> int:
    """The partial stream's payload (RelayPorts ``pstage``) for a partial row's chunk ``word``."""
    p = RelayFormats(cfg).partial_row.unpack(word)
    vals = {k: p[k] for k in ("sender", "ptag", "src_node", "token", "slot", "chunk", "data")}
    return pack_fields(RelayPorts(cfg).pstage, {**vals, "drop": int(want.reason is not None)})


def _taken(cfg, node, rank, word, outs, counts, seen):
    """A word the input took: what the reference says comes out of it (into ``outs``, the
    lane's expected packets, relay chunks and partial chunks), and its counts."""
    to_hub, to_rel, to_par = outs
    want: Ingress = ingress(cfg, node, rank, word)
    if want.to in ("hub", "both"):
        to_hub.append(HubFormats(cfg).packet.pack(**want.packet))
    if want.to in ("relay", "both"):
        to_rel.append(stage_word(cfg, word, want))
    if want.to == "partial":
        to_par.append(partial_stage_word(cfg, word, want))
    seen[want.to] += 1
    if want.to == "hub" and word & 3 == RowClass.FORWARD:
        seen["fwd_hub"] += 1
        counts["fwd_in"] += want.counted
    if want.reason is not None and want.counted:
        if word & 3 == RowClass.PARTIAL:
            counts["bad_partials"] += 1
        else:
            counts["drops"][want.reason] += 1
        seen["reasons"].add((word & 3, want.to, want.reason))


@pytest.mark.parametrize("cfg,node,rank", [(R22, 1, 0), (R33, 2, 1), (R1, 0, 3)], ids=["2x2", "3x3", "plain"])
def test_lanes_against_reference(cfg, node, rank):
    seen = run_lanes(cfg, 1, cycles=600, node=node, rank=rank)
    # every outcome reached: packets to the hub (forward rows among them), relay rows,
    # partial rows, drops of every reason the input finds (a direct row of another node's
    # GPU as an unknown source, a forward row's bad source and bad targets, a partial row
    # outside the window and one whose owner is not served here)
    assert seen["hub"] > 100 and seen["fwd_hub"] > 30 and seen["drop"] > 100, seen
    assert seen["relay"] > 10 and seen["both"] > 10 and seen["partial"] > 30, seen
    assert {(RowClass.DIRECT, "drop", RelayReason.FWD_BAD_SOURCE),
            (RowClass.FORWARD, "drop", RelayReason.FWD_BAD_SOURCE),
            (RowClass.FORWARD, "drop", RelayReason.FWD_BAD_TARGETS),
            (RowClass.RELAY, "drop", RelayReason.FWD_BAD_SOURCE), (RowClass.RELAY, "relay", RelayReason.FWD_BAD_GPU),
            (RowClass.RELAY, "relay", RelayReason.FWD_BAD_TARGETS),
            (RowClass.PARTIAL, "drop", ReduceReason.BAD_PARTIAL),
            (RowClass.PARTIAL, "partial", ReduceReason.BAD_PARTIAL)} <= seen["reasons"], seen["reasons"]


# ------------------------------------------------------------------ the reference by hand
def test_reference_by_hand():
    """Hub (node 0, rank 1) of R22 (GPUs 0, 1 in node 0; 2, 3 in node 1)."""
    fm, cfg = RelayFormats(R22), R22
    good = dict(cls=RowClass.FORWARD, fwd=0, ftag=0, src_node=1, src_rank=0, token=5, valid0=1, expert0=2,
                slot0=1, valid1=1, expert1=0, slot1=2, chunk=0, data=0x1234)
    r = ingress(cfg, 0, 1, fm.forward_row.pack(**good))
    assert r.to == "hub" and r.counted and r.reason is None
    # the original source (node 1, rank 0 = GPU 2) with the forward tag as the row's tag
    assert {k: r.packet[k] for k in ("kind", "src", "tag", "token", "chunk", "data", "valid0", "expert0",
                                     "slot0", "valid1", "expert1", "slot1", "valid2")} == \
        dict(kind=PacketKind.DATA, src=2, tag=0, token=5, chunk=0, data=0x1234, valid0=1, expert0=2, slot0=1,
             valid1=1, expert1=0, slot1=2, valid2=0)
    assert not ingress(cfg, 0, 1, fm.forward_row.pack(**dict(good, chunk=3))).counted   # (a row once)
    bad = {"fwd": 1, "ftag": 1, "src_node": 0, "src_rank": 1}             # each: an unknown source
    for k, v in bad.items():
        r = ingress(cfg, 0, 1, fm.forward_row.pack(**dict(good, **{k: v})))
        assert (r.to, r.reason, r.counted) == ("drop", RelayReason.FWD_BAD_SOURCE, True), k
    r = ingress(cfg, 0, 1, fm.forward_row.pack(**dict(good, expert1=2)))    # an expert twice
    assert (r.to, r.reason) == ("drop", RelayReason.FWD_BAD_TARGETS)
    # direct: this node's GPU 0 passes unchanged, GPU 3's data packet is dropped, its EOS
    # passes; an out-of-range source is left to the packet manager (BAD_SOURCE there)
    d = dict(cls=RowClass.DIRECT, kind=PacketKind.DATA, src=0, tag=1, valid0=1, expert0=1, chunk=2, data=7)
    r = ingress(cfg, 0, 1, fm.direct.pack(**d))
    assert r.to == "hub" and HubFormats(cfg).packet.pack(**r.packet) == fm.direct.pack(**d) >> 2
    r = ingress(cfg, 0, 1, fm.direct.pack(**dict(d, src=3, chunk=0)))
    assert (r.to, r.reason, r.counted) == ("drop", RelayReason.FWD_BAD_SOURCE, True)
    assert ingress(cfg, 0, 1, fm.direct.pack(**dict(d, src=3, kind=PacketKind.EOS))).to == "hub"
    assert ingress(cfg, 0, 1, fm.direct.pack(**dict(d, src=5))).to == "hub"
    # relay rows of GPU 3 (node 1, rank 1): targets here (rank 1) and on GPU 0
    rel = dict(cls=RowClass.RELAY, src_node=1, src_rank=1, tag=1, token=9, valid0=1, gpu0=0, expert0=2, slot0=0,
               valid1=1, gpu1=1, expert1=1, slot1=2, valid2=1, gpu2=1, expert2=0, slot2=1, chunk=0, data=5)
    r = ingress(cfg, 0, 1, fm.relay_row.pack(**rel))
    assert (r.to, r.local, r.reason) == ("both", True, None)
    assert {k: r.packet[k] for k in ("src", "tag", "token", "valid0", "expert0", "slot0", "valid1", "expert1",
                                     "slot1", "valid2")} == \
        dict(src=3, tag=1, token=9, valid0=1, expert0=1, slot0=2, valid1=1, expert1=0, slot1=1, valid2=0)
    r = ingress(cfg, 0, 1, fm.relay_row.pack(**dict(rel, valid1=0, valid2=0)))     # GPU 0's alone
    assert (r.to, r.local, r.packet) == ("relay", False, None)
    r = ingress(cfg, 0, 1, fm.relay_row.pack(**dict(rel, src_rank=0)))             # another rail
    assert (r.to, r.reason, r.counted) == ("drop", RelayReason.FWD_BAD_SOURCE, True)
    r = ingress(cfg, 0, 1, fm.relay_row.pack(**dict(rel, gpu0=2, chunk=1)))        # a GPU outside the node
    assert (r.to, r.reason, r.counted) == ("relay", RelayReason.FWD_BAD_GPU, False)
    r = ingress(cfg, 0, 1, fm.relay_row.pack(**dict(rel, slot2=2)))                 # a slot twice
    assert (r.to, r.reason, r.counted) == ("relay", RelayReason.FWD_BAD_TARGETS, True)
    # partial rows for hub (node 0, rank 1): owners of rank 1 in node 1 (GPU 3)
    par = dict(cls=RowClass.PARTIAL, sender=0, ptag=1, src_node=1, src_rank=1, token=9, slot=2, chunk=0, data=5)
    r = ingress(cfg, 0, 1, fm.partial_row.pack(**par))
    assert (r.to, r.reason, r.counted) == ("partial", None, False)
    for k, v in {"sender": 2, "ptag": 2}.items():                                  # outside the P window
        r = ingress(cfg, 0, 1, fm.partial_row.pack(**dict(par, **{k: v})))
        assert (r.to, r.reason, r.counted) == ("drop", ReduceReason.BAD_PARTIAL, True), k
    for k, v in {"src_node": 0, "src_rank": 0}.items():                            # no owner served here
        r = ingress(cfg, 0, 1, fm.partial_row.pack(**dict(par, **{k: v})))
        assert (r.to, r.reason, r.counted) == ("partial", ReduceReason.BAD_PARTIAL, True), k
    assert not ingress(cfg, 0, 1, fm.partial_row.pack(**dict(par, src_rank=0, chunk=1))).counted


def test_forward_tags_beyond_the_window_refused():
    """A forward row is the packet manager's row of (source, forward tag): the contract
    refuses more forward tags than tags per source, naming the key."""
    with pytest.raises(ConfigError, match=r"forward_tags.*4.*tags_per_source = 3"):
        TINY.replace(sources=4, nodes=2, gpus_per_node=2, relay=True, forward_tags=4, topk=2, max_targets=2)


# ------------------------------------------------------------------ planted bugs
PLANTS = {
    # the forward row's tag taken from its forwarder's rank
    "tag-from-fwd": ("pkt.tag.eq(f.ftag)", "pkt.tag.eq(f.fwd)"),
    # a direct data packet of another node's GPU passed on
    "remote-direct-kept": ("in_hub = ((in_cls == RowClass.DIRECT) & ~in_remote)", "in_hub = (in_cls == RowClass.DIRECT)"),
    # a dropped relay row's own targets written all the same
    "bad-relay-written": ("& ~(in_verdict[0] | in_verdict[1] | in_verdict[2]) & in_loc.any())",
                          "& in_loc.any())"),
    # the relay and the partial streams granted to every lane holding a chunk for them, not
    # the lowest alone
    "every-lane-granted": ("m.d.comb += [ok[j].eq(grant[j] & ready)", "m.d.comb += [ok[j].eq(want[j] & ready)"),
    # a forward row counted on every chunk
    "counted-every-chunk": ("m.d.sync += ev_in[j].eq(fire & good & first)", "m.d.sync += ev_in[j].eq(fire & good)"),
    # a partial row of an owner not served here staged as good
    "partial-owner-kept": ("st.drop.eq(drop)", "st.drop.eq(0)"),
}


@pytest.mark.plants
@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_bug_is_caught(plant):
    old, new = PLANTS[plant]
    unit = broken_class("moehub.rtl.relay.ingress", old, new, "RelayIngress")
    with pytest.raises(AssertionError, match="seed 1"):
        run_lanes(R22, 1, cycles=120, node=1, rank=0, unit=unit)


# ------------------------------------------------------------------ the whole top in lock-step
class _Row:
    """A row's words and its (source, tag) key at the packet manager; ``to_hub``: whether
    it reaches the packet manager (a broken forward row does not: no credit comes back)."""

    def __init__(self, key, to_hub, words):
        self.key, self.to_hub, self.words, self.begun = key, to_hub, words, False


class _Sources:
    """The layer's words as the sources send them: rows interleaved chunk by chunk at
    random, a row starting only once its (source, tag) key's credit of the row before has
    come back (the protocol's windows), noise words now and then, the end-of-stream packets
    last."""

    def __init__(self, rng, rows, noise, eos):
        self.rng, self.rows, self.noise, self.eos, self.busy = rng, rows, noise, eos, set()

    def empty(self) -> bool:
        return not self.rows and not self.eos

    def credit(self, src, tag):
        self.busy.discard((src, tag))

    def next(self):
        """The next word, or None (every row in reach waits for a credit)."""
        if self.rng.random() < 0.05:
            return self.rng.choice(self.noise)
        if not self.rows:
            return self.eos.pop(0) if self.eos else None
        head = self.rows[:3]
        ok = [r for i, r in enumerate(head)
              if r.begun or (r.key not in self.busy and r.key not in [h.key for h in head[:i]])]
        if not ok:
            return None
        r = self.rng.choice(ok)
        if not r.begun and r.to_hub:
            self.busy.add(r.key)
        r.begun = True
        w = r.words.pop(0)
        if not r.words:
            self.rows.remove(r)
        return w


class _Pair(Elaboratable):
    """A RelayHub and a plain MoEHub of one config, side by side, the plain hub's lanes
    behind buffers like the relay input's (the bench writes them)."""

    def __init__(self, cfg):
        self.relay, self.plain = RelayHub(cfg), MoEHub(cfg)
        self.bufs = [SyncFIFOBuffered(width=HubLayouts(cfg).packet.size, depth=LANE_DEPTH) for _ in range(cfg.lanes)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.relay, m.submodules.plain = self.relay, self.plain
        for j, buf in enumerate(self.bufs):
            m.submodules[f"buf{j}"] = buf
            lane = self.plain.i[j]
            m.d.comb += [lane.valid.eq(buf.r_rdy), lane.payload.eq(buf.r_data), buf.r_en.eq(lane.ready)]
        return m


def lockstep(cfg, seed, rows=24, node=0, rank=1):
    """The relay hub (``node``, ``rank``) fed direct rows of its node's GPUs, forward rows
    of the other nodes' GPUs (some broken), EOS from every source, and some noise (direct
    rows of other nodes' GPUs, partial rows outside the P window); the plain hub fed, on the same lanes in the
    same cycles, the reference's packets for the words that go to the packet manager (into
    buffers like the relay input's, each as the relay input writes its own).
    Every cycle both hubs' outputs (writes, control writes, layer done), the packet
    managers' credits and each lane's ready must agree; the relay hub's credits, through
    its credit join (all passed through: no relay rows here), must be the plain hub's. Returns (cycles, writes, META words of remote sources, the
    relay hub's FWD_IN and RELAY_DROPS at the end)."""
    pair = _Pair(cfg)
    rh, ph = pair.relay, pair.plain
    L, fm, hf, cmap = cfg.lanes, RelayFormats(cfg), HubFormats(cfg), CsrMap(cfg)
    out = {}

    async def write(ctx, name, value, index=0):
        reg = cmap.registers[name]
        for h in (rh, ph):
            ctx.set(h.csr.addr, reg.offset + index * reg.words)
            ctx.set(h.csr.w_data, value)
            ctx.set(h.csr.w_stb, 1)
        await ctx.tick()
        for h in (rh, ph):
            ctx.set(h.csr.w_stb, 0)

    def traffic(rng):
        """The words of the layer, in order: each row's chunks in order, rows interleaved."""
        gpn, nodes = cfg.node_gpus, cfg.nodes
        rows, n_rows = [], [0] * cfg.sources
        want = out["want"] = {"fwd_in": 0, "bad_targets": 0, "remote_targets": 0}
        tags = {}
        while len(rows) < rows_n:
            src = rng.randrange(cfg.sources)
            s_node, s_rank = divmod(src, gpn)
            xs = rng.sample(range(cfg.experts), cfg.max_targets)
            ent = {f"{k}{i}": v for i in range(cfg.max_targets)
                   for k, v in (("valid", int(i == 0 or rng.random() < 0.5)), ("expert", xs[i]), ("slot", i))}
            token = len(rows) % (1 << cfg.token_bits)
            if s_node == node:
                if src == global_gpu(cfg, node, rank):
                    continue
                tag = tags.get(src, 0)
                tags[src] = (tag + 1) % cfg.tags_per_source
                head = dict(cls=RowClass.DIRECT, kind=PacketKind.DATA, src=src, tag=tag, token=token, **ent)
                fmt, counted = fm.direct, True
            else:                               # forwarded by the relay of its rank in this node
                if s_rank == rank:
                    continue
                key = ("f", s_rank)
                ftag = tags.get(key, 0)
                tags[key] = (ftag + 1) % cfg.forward_tags
                head = dict(cls=RowClass.FORWARD, fwd=s_rank, ftag=ftag, src_node=s_node, src_rank=s_rank,
                            token=token, **ent)
                fmt, counted = fm.forward_row, rng.random() < 0.85
                if not counted:                 # broken: an expert twice (dropped, counted)
                    head.update(valid1=1, expert1=head["expert0"])
            if counted:
                n_rows[src] += 1
            if head["cls"] == RowClass.FORWARD:
                want["fwd_in" if counted else "bad_targets"] += 1
                want["remote_targets"] += counted * sum(head[f"valid{i}"] for i in range(cfg.max_targets))
            rows.append(_Row((src, head.get("tag", head.get("ftag"))), counted,
                             [fmt.pack(**head, chunk=c, data=rng.getrandbits(cfg.data_bits))
                              for c in range(cfg.chunks_per_row)]))
        # a direct row of another node's GPU; a partial row of no GPU of the node (outside
        # the P window: dropped at the input)
        noise = [fm.direct.pack(cls=RowClass.DIRECT, kind=PacketKind.DATA, src=((node + 1) % nodes) * gpn,
                                tag=0, chunk=0),
                 fm.partial_row.pack(cls=RowClass.PARTIAL, sender=gpn, ptag=0, src_node=(node + 1) % nodes,
                                     src_rank=rank, token=1, slot=0, chunk=rng.randrange(2), data=5)]
        eos = [fm.direct.pack(cls=RowClass.DIRECT, kind=PacketKind.EOS, src=s, count=n_rows[s])
               for s in range(cfg.sources)]
        return _Sources(rng, rows, noise, eos)

    rows_n = rows

    async def bench(ctx):
        rng = random.Random(seed)
        words = traffic(rng)                     # (the sources: next() gives a word or None)
        await write(ctx, "NODE_ID", node)
        await write(ctx, "LOCAL_RANK", rank)
        span = cfg.max_rows_per_expert * cfg.stride_bytes
        for e in range(cfg.experts):
            await write(ctx, "REGION_BASE", 0x1000_0000 + e * span, e)
            await write(ctx, "REGION_CAP", cfg.max_rows_per_expert, e)
        if cfg.multicast:
            await write(ctx, "POOL_BASE", 0x2000_0000)
            await write(ctx, "POOL_CAP", cfg.pool_rows)
        await write(ctx, "FLAG_BASE", 0x7000_0000)
        await write(ctx, "META_BASE", 0x6000_0000)
        await write(ctx, "COUNT_BASE", 0x7F00_0000)
        await write(ctx, "EPOCH", 1)
        await write(ctx, "CTRL", CTRL_START)
        pending, relay_credits, plain_credits, taken = [None] * L, [], [], [[] for _ in range(L)]
        writes, metas, cycle, done = 0, [], 0, None
        while (not words.empty() or any(p is not None for p in pending) or done is None) and cycle < 40_000:
            for j in range(L):
                if pending[j] is None and rng.random() < 0.6:
                    pending[j] = words.next()
                w = pending[j]
                ctx.set(rh.i[j].valid, w is not None)
                ctx.set(rh.i[j].payload, w or 0)
                # (the plain hub's buffer written as the relay input writes its own, with the
                # reference's packet of the next word the relay input took for it)
                pb, wen = pair.bufs[j], ctx.get(rh.ingress.bufs[j].w_en)
                assert not wen or taken[j], f"seed {seed}: lane {j} writes a packet for no word"
                ctx.set(pb.w_en, wen)
                ctx.set(pb.w_data, taken[j][0] if wen else 0)
                if wen:
                    taken[j].pop(0)
            r = rng.random() < 0.8               # the same random back-pressure on both
            for j in range(L):
                ctx.set(rh.wr[j].ready, r)
                ctx.set(ph.wr[j].ready, r)
            for s in ("ctl", "credit"):
                r = rng.random() < 0.8
                ctx.set(getattr(rh, s).ready, r)
                ctx.set(getattr(ph, s).ready, r)
            # (the relay hub's credits pass its credit join: the plain hub's credit port is
            # taken as the join takes the relay hub's packet manager's)
            ctx.set(ph.credit.ready, ctx.get(rh.hub.credit.ready))
            where = f"seed {seed} cycle {cycle}"
            for j in range(L):
                w = pending[j]
                assert ctx.get(rh.ingress.bufs[j].w_rdy) == ctx.get(pair.bufs[j].w_rdy), f"{where} lane {j}: room"
                for k in ("valid", "payload"):
                    a, b = (ctx.get(Value.cast(getattr(h.wr[j], k))) for h in (rh, ph))
                    assert a == b, f"{where}: wr[{j}].{k} {a:#x} against the plain hub's {b:#x}"
            for s, a_port in (("ctl", rh.ctl), ("credit", rh.hub.credit)):
                for k in ("valid", "payload"):
                    a, b = (ctx.get(Value.cast(getattr(port, k))) for port in (a_port, getattr(ph, s)))
                    assert a == b, f"{where}: {s}.{k} {a:#x} against the plain hub's {b:#x}"
            if ctx.get(ph.credit.valid) and ctx.get(ph.credit.ready):
                plain_credits.append((ctx.get(ph.credit.payload.src), ctx.get(ph.credit.payload.tag)))
            assert ctx.get(rh.layer_done) == ctx.get(ph.layer_done), where
            writes += sum(ctx.get(rh.wr[j].valid) & ctx.get(rh.wr[j].ready) for j in range(L))
            if ctx.get(rh.ctl.valid) and ctx.get(rh.ctl.ready) and ctx.get(rh.ctl.payload.kind) == CtlKind.META:
                meta = hf.meta_word.unpack(ctx.get(rh.ctl.payload.data))
                if meta["src"] // cfg.node_gpus != node:
                    metas.append(meta["src"])
            for j in range(L):
                if pending[j] is not None and ctx.get(rh.i[j].valid) and ctx.get(rh.i[j].ready):
                    want = ingress(cfg, node, rank, pending[j])
                    if want.to == "hub":
                        taken[j].append(hf.packet.pack(**want.packet))
                    pending[j] = None
            if ctx.get(rh.credit.valid) and ctx.get(rh.credit.ready):
                words.credit(ctx.get(rh.credit.payload.src), ctx.get(rh.credit.payload.tag))
                relay_credits.append((ctx.get(rh.credit.payload.src), ctx.get(rh.credit.payload.tag)))
            if ctx.get(rh.layer_done):
                done = cycle
            await ctx.tick()
            cycle += 1
        await ctx.tick().repeat(8)                # (the last credits through the join)
        assert relay_credits == plain_credits[:len(relay_credits)] and len(plain_credits) - len(relay_credits) <= 2, \
            f"seed {seed}: credits {relay_credits[-4:]} against the plain hub's {plain_credits[-4:]}"
        out.update(cycles=cycle, done=done, writes=writes, metas=metas, fwd_in=ctx.get(rh.fwd_in),
                   drops=[ctx.get(d) for d in rh.relay_drops])

        out["hub_drops"] = [await read(ctx, "DROPS", r) for r in range(len(config_reasons(cfg)))]

    async def read(ctx, name, index=0):
        reg = cmap.registers[name]
        ctx.set(rh.csr.addr, reg.offset + index * reg.words)
        ctx.set(rh.csr.r_stb, 1)
        await ctx.tick()
        ctx.set(rh.csr.r_stb, 0)
        await ctx.tick().repeat(2)
        return ctx.get(rh.csr.r_data)

    sim = Simulator(pair)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def _check_lockstep(cfg, out, rows):
    """Beyond the lock-step: the layer finished with no drop in the packet manager; every
    good forward row counted in FWD_IN and each of its targets' metadata word written
    with its original (remote) source; the broken ones counted as bad targets; the noise
    (a direct row of another node's GPU) as an unknown source."""
    want = out["want"]
    assert out["done"] is not None, f"the layer never finished: {out}"
    assert not any(out["hub_drops"]), out
    assert out["writes"] > rows * cfg.chunks_per_row // 2, out
    assert want["fwd_in"] > 3 and out["fwd_in"] == want["fwd_in"], out
    assert len(out["metas"]) == want["remote_targets"], out
    assert out["drops"][RelayReason.FWD_BAD_TARGETS] == want["bad_targets"], out
    assert out["drops"][RelayReason.FWD_BAD_SOURCE] >= 1, out


@pytest.mark.slow
@pytest.mark.parametrize("cfg,node,rank", [(R22, 0, 1), (R33, 1, 2)], ids=["2x2", "3x3"])
def test_relay_hub_in_lockstep_with_the_plain_hub(cfg, node, rank):
    """(Slow set: two whole hubs simulated every cycle, 30-50 s each; the fast set checks
    the input lane by lane against the reference.)"""
    out = lockstep(cfg, 3, rows=40, node=node, rank=rank)
    _check_lockstep(cfg, out, 40)
