"""The relay hub's forward unit (protocol v3): one accepted relay row in, its own targets
reported, one forward row out per other destination GPU of the node, its credit back.

Reference: :class:`moehub.spec.relay.RelayHubModel` (``relay_row``, ``emit``,
``forward_credit``), which tests/test_rtl_relay.py runs in lock-step with this unit and
the formal harness :mod:`moehub.verif.formal.relay` checks against its own shadow.

Per row (``row``, a stream: one row held at a time; the hub's ``relay_window``-deep FIFO
in front of it never refuses, see :mod:`moehub.rtl.relay`):

1. **Accept** (the cycle ``row`` fires): the verdict, first reason first, exactly the
   model's ``relay_verdict`` -- FWD_BAD_SOURCE (source node out of range or this node,
   another local rank, tag outside the window), FWD_BAD_GPU (a valid entry's GPU outside
   the node), FWD_BAD_TARGETS (no valid entry, an expert out of range, one (gpu, expert)
   twice, a slot out of range or twice) -- counted in ``drops`` (a cycle late, as every
   counter: see below); per destination GPU ``g`` the entries naming it (``mem[g]``, a
   ``relay_targets``-bit mask), registered with the row. Left to do: the local report if any entry names this GPU (``rank``), and
   a forward to each other GPU named (``left``).
2. **Local** (``local`` stream): the entries on this GPU packed into protocol v2's
   multicast row (entry order kept), with the original source as a global id (node x
   gpus_per_node + rank) and the token. Independent of the forwards.
3. **Forward** (``fwd`` stream, one a cycle): to the lowest GPU of ``left`` that holds a
   free forward tag (the model's ``emit()``: a GPU waiting for its credit does not hold
   up the others); the tag is that GPU's lowest free one (``free[g]``, a bit per tag,
   cleared as the row leaves and set again by ``fcredit``); the entries packed as for the
   local row, the original source (node, rank) and token kept. ``fwd_rows[g]`` counts.
4. **Credit** (``rcredit`` stream): when nothing is left -- for a dropped row at once,
   except FWD_BAD_SOURCE (no window to return it to, no credit) -- the row's (global
   source, tag); the unit then takes the next row in the same cycle.

Forward credits (``fcredit``, one a cycle) return a tag of a destination GPU: registered,
then set in its free bits, so a credit presented in cycle c can be handed out again from
cycle c + 2. One that is not out is ignored (the node's own hubs never send one: the
environment the proof assumes).

Counters (``drops``, ``relay_rows``, ``relay_local``, ``fwd_rows``) lag their events by
one cycle: an event (a row accepted; of them, one with targets here; a row dropped, per
reason; a forward sent, per GPU) is a bit registered in the cycle it happens and added to
its counter in the next, so a counter read in cycle c counts the events of the cycles
before c - 1. ``fwd_wait`` is no counter (the held row's forwards not yet sent, from
``left``) and does not lag.

Exactly once, by construction: a target is reported or forwarded only while its GPU's
bit of ``left`` (or ``local_left``) is set, and the bit is cleared by that very
handshake; every accepted row's named GPUs are in ``left``/``local_left`` at accept and
the credit waits for both to clear.

Depth: the verdict at accept is a few compare-and-OR levels (``relay_targets``^2/2
pair compares); the packing (per output entry an AND-OR over the relay entries, selected
by prefix counts of the mask) is done for every GPU in the row's first held cycle
(``prep``: the local report and the forwards start a cycle later) into registers, so the
forward path is a priority pick over ``gpus_per_node`` GPUs of ``left & has_free``
(registered bits: ``has_free[g]``, whether GPU ``g`` holds a free tag, is a register of
its own, updated with the free bits) and a one-hot AND-OR of the registered packed rows.
(The first version packed behind the pick: 25.7 FO4 on DeepSeek-V3 x 2 nodes, held ->
fwd payload, over the 1.98 GHz budget.) No 32-bit increment sits behind the verdict or
the pick (the registered events above: with the counters incremented in the accept and
forward cycles, the free bits through the pick into a forward counter and the row
through the verdict into ``relay_local`` were 22.4-23.6 FO4 at 2-8 nodes, just over the
budget); a picked GPU's free bits lose that GPU's own lowest free tag (the tag sent, with
no select over the GPUs in front of the free bits); the lowest-one picks are an OR tree
per bit, not a carry chain.
"""
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import RelayReason
from ..logic import count_onehot, select
from .layouts import RelayLayouts, refuse_without_relay


def lowest_one(m: Module, bits, name: str):
    """The lowest set bit of ``bits`` as a one-hot (0 if none): ``bits & -bits``, written
    as each bit and none below it (an OR tree per bit, not a carry chain through all)."""
    oh = Signal(len(bits), name=name)
    m.d.comb += oh.eq(Cat(bits[i] & ~bits[:i].any() if i else bits[0] for i in range(len(bits))))
    return oh


def pack_entries(m: Module, mask, valid_n: int, src_expert, src_slot, n_out: int, name: str):
    """The entries of ``mask`` (a bit per source entry) packed into ``n_out`` outputs in
    entry order: output ``i`` is the source entry ``j`` with ``mask[j]`` and exactly ``i``
    set bits of ``mask`` below ``j``. Returns (valid bits, experts, slots) of the outputs;
    entries past ``n_out`` are dropped (a config check rules that out)."""
    T = valid_n
    valid = Signal(n_out, name=f"{name}_valid")
    experts = [Signal(len(src_expert[0]), name=f"{name}_expert{i}") for i in range(n_out)]
    slots = [Signal(len(src_slot[0]), name=f"{name}_slot{i}") for i in range(n_out)]
    below = [count_onehot([mask[k] for k in range(j)]) for j in range(T)]   # one-hot counts below j
    for i in range(n_out):
        pick = [mask[j] & below[j][i] if i < len(below[j]) else Const(0) for j in range(T)]
        m.d.comb += [valid[i].eq(Cat(*pick).any()),
                     experts[i].eq(select([(pick[j], src_expert[j]) for j in range(T)], len(experts[i]))),
                     slots[i].eq(select([(pick[j], src_slot[j]) for j in range(T)], len(slots[i])))]
    return valid, experts, slots


def relay_verdict(m: Module, cfg: HubConfig, node, rank, p, name: str = ""):
    """(bad_source, bad_gpu, bad_targets) of relay row payload ``p`` (a
    :class:`~.layouts.RelayLayouts` ``row``) at hub (``node``, ``rank``) -- each only if no
    earlier reason holds (the model's ``relay_verdict``, first reason first)."""
    T, G, E = cfg.relay_targets, cfg.node_gpus, cfg.experts
    v = p.valid
    src_bad = (p.src_node >= cfg.nodes) | (p.src_node == node) | (p.src_rank != rank) \
        | (p.tag >= cfg.tags_per_source)
    gpu_bad = Cat(*(v[i] & (p.gpu[i] >= G) for i in range(T))).any()
    twice = Cat(*(v[i] & v[k] & (p.gpu[i] == p.gpu[k]) & (p.expert[i] == p.expert[k])
                  for i in range(T) for k in range(i + 1, T))).any() if T > 1 else Const(0)
    slot_bad = Cat(*(v[i] & (p.slot[i] >= cfg.topk) for i in range(T))).any()
    slot_twice = Cat(*(v[i] & v[k] & (p.slot[i] == p.slot[k])
                       for i in range(T) for k in range(i + 1, T))).any() if T > 1 else Const(0)
    tgt_bad = ~v.any() | Cat(*(v[i] & (p.expert[i] >= E) for i in range(T))).any() | twice \
        | slot_bad | slot_twice
    bs, bg, bt = (Signal(name=f"{name}bad_source"), Signal(name=f"{name}bad_gpu"),
                  Signal(name=f"{name}bad_targets"))
    m.d.comb += [bs.eq(src_bad), bg.eq(~src_bad & gpu_bad), bt.eq(~src_bad & ~gpu_bad & tgt_bad)]
    return bs, bg, bt


class ForwardUnit(wiring.Component):
    """The relay's forward unit (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``relay: true``.

    Attributes
    ----------
    row : In(stream of RelayLayouts.row)
        Accepted relay rows' target sets.
    accepted : Out(1); held_row : Out(RelayLayouts.row)
        A pulse the cycle after a good row (no drop) was taken, with that row: its sum opens
        at the reduce (:class:`~.hub.RelayControl`'s ``open``).
    node, rank : In
        This hub's node and local rank (the NODE_ID and LOCAL_RANK registers).
    local : Out(stream of RelayLayouts.local)
        Targets on this GPU, for the multicast path.
    fwd : Out(stream of RelayLayouts.fwd)
        Forward rows.
    fcredit : In(stream of RelayLayouts.fcredit)
        (ready always 1: a credit is never refused)
        Forward credits returned by the node's GPUs.
    rcredit : Out(stream of RelayLayouts.rcredit)
        Relay rows' credits (global source, tag).
    drops : Out(32).array(len(RelayReason))
        Rows dropped by reason (the RELAY_DROPS registers), a cycle late.
    relay_rows, relay_local, fwd_wait : Out(32)
        Rows accepted; of them, with targets here (both a cycle late); forwards not yet
        sent (the row held, current).
    fwd_rows : Out(32).array(gpus_per_node)
        Forward rows sent per destination GPU, a cycle late.
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a forward unit")
        self.cfg = cfg
        self.lay = lay = RelayLayouts(cfg)
        G = cfg.node_gpus
        super().__init__({
            "row": In(stream.Signature(lay.row)),
            "accepted": Out(1), "held_row": Out(lay.row),
            "node": In(cfg.node_bits), "rank": In(cfg.gpu_bits),
            "local": Out(stream.Signature(lay.local)),
            "fwd": Out(stream.Signature(lay.fwd)),
            "fcredit": In(stream.Signature(lay.fcredit)),
            "rcredit": Out(stream.Signature(lay.rcredit)),
            "drops": Out(32).array(len(RelayReason)),
            "relay_rows": Out(32), "relay_local": Out(32), "fwd_wait": Out(32),
            "fwd_rows": Out(32).array(G),
        })

    def verdict(self, m: Module, p):
        """(bad_source, bad_gpu, bad_targets) of relay row payload ``p`` (:func:`relay_verdict`)."""
        return relay_verdict(m, self.cfg, self.node, self.rank, p)


    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.lay
        T, G, M, F = cfg.relay_targets, cfg.node_gpus, cfg.max_targets, cfg.forward_tags

        # ---- the row held
        held = Signal(name="held")
        r = Signal(lay.row, name="r")                 # the row's fields
        mem = [Signal(T, name=f"mem{g}") for g in range(G)]     # entries naming GPU g
        loc = Signal(T, name="loc")                   # entries naming this GPU
        left = Signal(G, name="left")                 # GPUs still to forward to
        local_left = Signal(name="local_left")        # the local report still to make
        credit = Signal(name="credit_due")            # the row returns a credit
        src = Signal(cfg.src_bits, name="src_global")

        # ---- forward tags per destination
        free = [Signal(F, init=(1 << F) - 1, name=f"free{g}") for g in range(G)]
        # (free[g].any(), kept in a register of its own beside the free bits: no OR over a
        # GPU's tags in front of the pick)
        has_free = Signal(G, init=(1 << G) - 1, name="has_free")

        # ---- counters: each adds a one-bit event registered in the cycle it happens (ev_*),
        # so a counter lags its events by one cycle and no verdict or pick sits in front of
        # a 32-bit increment
        drops = [Signal(32, name=f"drops_{r_.name.lower()}") for r_ in RelayReason]
        n_rows, n_local = Signal(32, name="n_rows"), Signal(32, name="n_local")
        n_fwd = [Signal(32, name=f"n_fwd{g}") for g in range(G)]
        ev_drop = [Signal(name=f"ev_drop_{r_.name.lower()}") for r_ in RelayReason]
        ev_row, ev_local = Signal(name="ev_row"), Signal(name="ev_local")
        ev_fwd = Signal(G, name="ev_fwd")
        m.d.sync += [ev_drop[i].eq(0) for i in range(len(RelayReason))]
        m.d.sync += [ev_row.eq(0), ev_local.eq(0), ev_fwd.eq(0)]
        m.d.sync += [drops[i].eq(drops[i] + ev_drop[i]) for i in range(len(RelayReason))]
        m.d.sync += [n_rows.eq(n_rows + ev_row), n_local.eq(n_local + ev_local)]
        m.d.sync += [n_fwd[g].eq(n_fwd[g] + ev_fwd[g]) for g in range(G)]
        m.d.comb += [self.drops[i].eq(drops[i]) for i in range(len(RelayReason))]
        m.d.comb += [self.fwd_rows[g].eq(n_fwd[g]) for g in range(G)]
        m.d.comb += [self.relay_rows.eq(n_rows), self.relay_local.eq(n_local)]
        m.d.comb += self.fwd_wait.eq(Mux(held, sum(left[g] for g in range(G)), 0))

        # ---- the packed entries, registered: formed in the row's first held cycle (prep)
        # from the registered masks, so no packing sits between the pick and the outputs
        prep = Signal(name="prep")
        m.d.sync += prep.eq(0)

        def packed(mask, name):
            v, x, s_ = pack_entries(m, mask, T, r.expert, r.slot, M, name)
            rv = Signal(M, name=f"{name}_pv")
            rx = [Signal(len(x[i]), name=f"{name}_px{i}") for i in range(M)]
            rs = [Signal(len(s_[i]), name=f"{name}_ps{i}") for i in range(M)]
            m.d.sync += [rv.eq(v)] + [rx[i].eq(x[i]) for i in range(M)] + [rs[i].eq(s_[i]) for i in range(M)]
            return rv, rx, rs

        # ---- local report
        lv, lx, ls = packed(loc, "loc")
        m.d.comb += [self.local.valid.eq(held & ~prep & local_left),
                     self.local.payload.src.eq(src), self.local.payload.token.eq(r.token),
                     self.local.payload.valid.eq(lv)]
        m.d.comb += [self.local.payload.expert[i].eq(lx[i]) for i in range(M)]
        m.d.comb += [self.local.payload.slot[i].eq(ls[i]) for i in range(M)]
        with m.If(self.local.valid & self.local.ready):
            m.d.sync += local_left.eq(0)

        # ---- forwards
        pick = lowest_one(m, Mux(held & ~prep, left & has_free, 0), "fwd_pick")
        per_gpu = [packed(mem[g], f"g{g}") for g in range(G)]
        fv = select([(pick[g], per_gpu[g][0]) for g in range(G)], M)
        fx = [select([(pick[g], per_gpu[g][1][i]) for g in range(G)], cfg.expert_bits) for i in range(M)]
        fs = [select([(pick[g], per_gpu[g][2][i]) for g in range(G)], cfg.slot_bits) for i in range(M)]
        tag_oh = [lowest_one(m, free[g], f"tag_oh{g}") for g in range(G)]
        ftag_oh = Signal(F, name="ftag_oh")
        m.d.comb += ftag_oh.eq(select([(pick[g], tag_oh[g]) for g in range(G)], F))
        fp = self.fwd.payload
        m.d.comb += [self.fwd.valid.eq(pick.any()),
                     fp.dst.eq(select([(pick[g], Const(g, cfg.gpu_bits)) for g in range(G)], cfg.gpu_bits)),
                     fp.fwd.eq(self.rank),
                     fp.ftag.eq(select([(ftag_oh[t], Const(t, len(fp.ftag))) for t in range(F)], len(fp.ftag))),
                     fp.src_node.eq(r.src_node), fp.src_rank.eq(r.src_rank), fp.token.eq(r.token),
                     fp.valid.eq(fv)]
        m.d.comb += [fp.expert[i].eq(fx[i]) for i in range(M)]
        m.d.comb += [fp.slot[i].eq(fs[i]) for i in range(M)]
        sent = Signal(name="fwd_sent")
        m.d.comb += sent.eq(self.fwd.valid & self.fwd.ready)

        # free bits: the tag sent leaves; a credit (registered) returns one
        cr_v = Signal(name="cr_valid")
        cr = Signal(lay.fcredit, name="cr")
        m.d.comb += self.fcredit.ready.eq(1)
        m.d.sync += [cr_v.eq(self.fcredit.valid), cr.eq(self.fcredit.payload)]
        for g in range(G):
            back = Signal(F, name=f"back{g}")
            m.d.comb += back.eq(Cat(*(cr_v & (cr.dst == g) & (cr.ftag == t) for t in range(F))))
            # (GPU g's own lowest free tag, not the tag picked among the GPUs: the same bits
            # while pick is one-hot, and no pick-wide select in front of the free bits)
            taking = self.fwd.ready & pick[g]
            take = Mux(taking, tag_oh[g], 0)
            m.d.sync += free[g].eq((free[g] & ~take) | back)
            # any free bit next cycle: one returned, or one left beside the tag taken
            m.d.sync += has_free[g].eq(back.any() | Mux(taking, (free[g] & ~tag_oh[g]).any(), free[g].any()))
        with m.If(sent):
            m.d.sync += left.eq(left & ~pick)
            m.d.sync += ev_fwd.eq(pick)

        # ---- credit and the next row: the credit goes out the cycle after the last forward
        # and the local report (left and local_left are registers)
        all_out = Signal(name="all_out")
        m.d.comb += all_out.eq(held & ~local_left & (left == 0))
        m.d.comb += [self.rcredit.valid.eq(all_out & credit),
                     self.rcredit.payload.src.eq(src), self.rcredit.payload.tag.eq(r.tag)]
        release = Signal(name="release")
        m.d.comb += release.eq(all_out & (~credit | self.rcredit.ready))
        m.d.comb += self.row.ready.eq(~held | release)
        with m.If(release):
            m.d.sync += held.eq(0)

        # a good row's take, a cycle later (its event), with the row held: the relay opens
        # its sum at the reduce from these
        m.d.comb += [self.accepted.eq(ev_row), self.held_row.eq(r)]

        p = self.row.payload
        bs, bg, bt = self.verdict(m, p)
        bad = bs | bg | bt
        with m.If(self.row.valid & self.row.ready):
            in_mem = [Cat(*(p.valid[j] & (p.gpu[j] == g) for j in range(T))) for g in range(G)]
            in_loc = Cat(*(p.valid[j] & (p.gpu[j] == self.rank) for j in range(T)))
            named = Cat(*(in_mem[g].any() & (self.rank != g) for g in range(G)))
            m.d.sync += [held.eq(1), prep.eq(1), r.eq(p), credit.eq(~bs),
                         src.eq(p.src_node * G + p.src_rank)]
            m.d.sync += [mem[g].eq(in_mem[g]) for g in range(G)]
            m.d.sync += loc.eq(in_loc)
            with m.If(bad):
                m.d.sync += [left.eq(0), local_left.eq(0)]
            with m.Else():
                m.d.sync += [left.eq(named), local_left.eq(in_loc.any()), ev_row.eq(1),
                             ev_local.eq(in_loc.any())]
            m.d.sync += [ev_drop[RelayReason.FWD_BAD_GPU].eq(bg), ev_drop[RelayReason.FWD_BAD_SOURCE].eq(bs),
                         ev_drop[RelayReason.FWD_BAD_TARGETS].eq(bt)]
        return m
