"""Property harness of the relay's forward unit (:class:`moehub.rtl.relay.forward_unit.ForwardUnit`).

Environment: relay rows of any content (every field free, bad ones included) offered at
any time; the hub's node and local rank constant (registers written before START; the rank
a GPU of the node); every output's ready free; forward credits returned at any time for a
tag that is out (a destination returns a credit once, for a forward it received -- the
node's own hubs, which never invent one); nothing else.

Reference state (the harness's own registers, from the model's rules,
:class:`moehub.spec.relay.RelayHubModel`): the row the unit holds (captured at its
handshake), its verdict computed here (``ref_bad_source``, ``ref_bad_gpu``,
``ref_bad_targets``), which of its targets are done -- its local report made
(``ref_local_done``), the GPUs forwarded to (``ref_fwd_done``) -- whether its credit is
still due, the forward tags out per destination GPU (``ref_out<g>``), and the drops per
reason.

Properties -- every accepted row's targets written or forwarded exactly once, or the row
counted as a drop; nothing forwarded twice:

* a local report only for an accepted row with targets on this GPU, once, carrying
  exactly those targets (each output entry one of them, as many as there are) and the
  original source and token;
* a forward only for an accepted row, to a GPU of the node other than this one that the
  row names, at most once per (row, GPU), carrying exactly the row's targets on that GPU,
  the original source and token, and a tag of that GPU not out;
* the credit only when every target of the row is done (for a dropped row: at once), for
  the row's (source, tag), once, and never for a row from an unknown source;
* never a forward and the credit offered in the same cycle (the forward egress takes one
  command a cycle: its credit's ready does not look at the forward);
* a new row taken only once the held row's credit has gone (or it had none);
* the drop counters equal the reference's of the cycle before (each bad row counted once,
  under its first reason; a good row not at all): the unit's counters lag their events by
  one cycle (each adds an event registered in the cycle it happens), so the check, every
  cycle, is against a registered copy of the reference's counts.

Unbounded (k-induction, ``prove``): the properties are not inductive alone (a state where
the unit's registers disagree with the reference satisfies them until the row is
reported). The strengthening invariants tie the unit's registers (read from its elaborated
module, :func:`.common.elaborate_into`) to the reference: the held row's fields, masks and
credit bit; ``left`` = the named GPUs not yet forwarded; ``local_left`` = the local report
not made; each destination's free tags = the tags not out and not being returned (a credit
in its register), and its bit of ``has_free`` whether one is free; each drop counter and
its registered event = the reference's count.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Signal, Value

from amaranth.lib import data

from ...rtl.relay.forward_unit import ForwardUnit
from ...rtl.relay.layouts import RelayLayouts
from ...spec.formats import RelayReason
from .common import any_const, any_seq, count_ones
from .plant import Plant, PlantedHarness

#: the reduced relay config: 2 nodes x 3 GPUs (a rank out of range representable), 2
#: experts, top-2, 2 tags per source, 2 forward tags per pair, 1-bit tokens
RELAY_SMALL = dict(sources=6, nodes=2, gpus_per_node=3, relay=True, forward_tags=2, experts=2,
                   topk=2, max_targets=2, tags_per_source=2, token_bits=1, data_bits=1)

MOD = "moehub.rtl.relay.forward_unit"
#: planted bugs (tests/test_rtl_relay.py plants the same in simulation)
PLANTS = {
    "forwarded-twice": Plant(MOD, "            m.d.sync += left.eq(left & ~pick)",
                             "            m.d.sync += left.eq(left)", "ForwardUnit",
                             ("a GPU forwarded to twice",),
                             "a forward does not clear its GPU: the row goes to it again"),
    "credit-early": Plant(MOD, "        m.d.comb += all_out.eq(held & ~local_left & (left == 0))",
                          "        m.d.comb += all_out.eq(held & (left == 0))", "ForwardUnit",
                          ("credit before every target is done",),
                          "the credit does not wait for the local report"),
}


class ForwardUnitHarness(PlantedHarness):
    """A :class:`ForwardUnit` of ``cfg`` under its environment (module docstring)."""
    unit = ForwardUnit
    plants = PLANTS

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        T, G, M, F, E = cfg.relay_targets, cfg.node_gpus, cfg.max_targets, cfg.forward_tags, cfg.experts
        p, dut, regs = self.elaborate_dut(m, platform)

        # ---- environment
        node = any_const(m, cfg.node_bits, "node")
        rank = any_const(m, cfg.gpu_bits, "rank")
        p.assume(node < cfg.nodes)
        p.assume(rank < G)
        m.d.comb += [dut.node.eq(node), dut.rank.eq(rank)]
        rv = any_seq(m, 1, "row_valid")
        rp = any_seq(m, dut.row.payload.shape(), "row_payload")
        m.d.comb += [dut.row.valid.eq(rv), dut.row.payload.eq(rp)]
        for name, s in (("local", dut.local), ("fwd", dut.fwd), ("rcredit", dut.rcredit)):
            m.d.comb += s.ready.eq(any_seq(m, 1, f"{name}_ready"))
        out = [Signal(F, name=f"ref_out{g}") for g in range(G)]
        cv = any_seq(m, 1, "fcredit_valid")
        cd = any_seq(m, dut.fcredit.payload.dst.shape(), "fcredit_dst")
        ct = any_seq(m, dut.fcredit.payload.ftag.shape(), "fcredit_ftag")
        p.assume(~cv | ((cd < G) & (ct < F)))
        for g in range(G):
            for t in range(F):
                p.assume(~(cv & (cd == g) & (ct == t)) | out[g][t])
        m.d.comb += [dut.fcredit.valid.eq(cv), dut.fcredit.payload.dst.eq(cd),
                     dut.fcredit.payload.ftag.eq(ct)]

        # ---- reference verdict of the offered row (the model's rules)
        row = dut.row.payload
        v = row.valid
        r_bs = (row.src_node >= cfg.nodes) | (row.src_node == node) | (row.src_rank != rank) \
            | (row.tag >= cfg.tags_per_source)
        r_bg = ~r_bs & Cat(*(v[i] & (row.gpu[i] >= G) for i in range(T))).any()
        pairs_twice = [v[i] & v[k] & (row.gpu[i] == row.gpu[k]) & (row.expert[i] == row.expert[k])
                       for i in range(T) for k in range(i + 1, T)]
        slots_twice = [v[i] & v[k] & (row.slot[i] == row.slot[k]) for i in range(T) for k in range(i + 1, T)]
        r_bt = ~r_bs & ~r_bg & (~v.any() | Cat(*(v[i] & (row.expert[i] >= E) for i in range(T))).any()
                                | Cat(*(v[i] & (row.slot[i] >= cfg.topk) for i in range(T))).any()
                                | Cat(*pairs_twice, *slots_twice, Const(0)).any())

        # ---- reference state
        in_row = Signal(name="ref_in_row")
        fresh = Signal(name="ref_fresh")          # the cycle after a row was taken
        acc = Signal(name="ref_accepted")
        due = Signal(name="ref_credit_due")
        bs_row = Signal(name="ref_row_bad_source")
        sh = Signal(dut.row.payload.shape(), name="ref_row")
        local_done = Signal(name="ref_local_done")
        fwd_done = Signal(G, name="ref_fwd_done")
        drops = [Signal(32, name=f"ref_drops{i}") for i in range(len(RelayReason))]
        drops_lag = [Signal(32, name=f"ref_drops_lag{i}") for i in range(len(RelayReason))]
        m.d.sync += [drops_lag[i].eq(drops[i]) for i in range(len(RelayReason))]

        def names(g):          # the held row's entries on GPU g
            return Cat(*(sh.valid[j] & (sh.gpu[j] == g) for j in range(T)))
        named = Cat(*(names(g).any() for g in range(G)))
        local_named = Cat(*(sh.valid[j] & (sh.gpu[j] == rank) for j in range(T))).any()
        all_done = ~acc | ((~local_named | local_done)
                           & ((named & ~Cat(*(rank == g for g in range(G))) & ~fwd_done) == 0))

        def matches(payload, g):
            """The output entries are exactly the held row's entries on GPU g."""
            ok = Const(1)
            for j in range(T):
                want = sh.valid[j] & (sh.gpu[j] == g)
                hit = Cat(*(payload.valid[i] & (payload.expert[i] == sh.expert[j]) & (payload.slot[i] == sh.slot[j])
                            for i in range(M))).any()
                ok = ok & (~want | hit)
            n = names(g)
            return ok & (count_ones([payload.valid[i] for i in range(M)]) == count_ones([n[j] for j in range(T)]))

        # local report
        lf = dut.local.valid & dut.local.ready
        lp = dut.local.payload
        p.check(~dut.local.valid | (in_row & acc & local_named), "a local report for no accepted row with targets here")
        p.check(~lf | ~local_done, "targets written here twice")
        p.check(~dut.local.valid | matches(lp, rank), "the local report does not carry exactly the row's targets here")
        p.check(~dut.local.valid | ((lp.src == (sh.src_node * G + sh.src_rank)[:cfg.src_bits]) & (lp.token == sh.token)),
                "the local report lost the original source or token")
        # forwards
        ff = dut.fwd.valid & dut.fwd.ready
        fp = dut.fwd.payload
        dst_oh = Cat(*(fp.dst == g for g in range(G)))
        p.check(~dut.fwd.valid | (in_row & acc), "a forward for no accepted row")
        p.check(~dut.fwd.valid | ((fp.dst < G) & (fp.dst != rank) & (named & dst_oh).any()),
                "a forward to a GPU the row does not name (or this GPU, or outside the node)")
        p.check(~ff | ~(fwd_done & dst_oh).any(), "a GPU forwarded to twice")
        p.check(~dut.fwd.valid | Cat(*(dst_oh[g] & matches(fp, g) for g in range(G))).any(),
                "a forward does not carry exactly the row's targets on its GPU")
        p.check(~dut.fwd.valid | ((fp.src_node == sh.src_node) & (fp.src_rank == sh.src_rank)
                                  & (fp.token == sh.token) & (fp.fwd == rank)),
                "a forward lost the original source or token")
        p.check(~dut.fwd.valid | ((fp.ftag < F) & ~Cat(*(dst_oh[g] & out[g].bit_select(fp.ftag, 1)
                                                         for g in range(G))).any()),
                "a forward takes a tag that is out")
        # credit
        cf = dut.rcredit.valid & dut.rcredit.ready
        p.check(~dut.rcredit.valid | (in_row & due), "a credit for no row, twice, or for an unknown source")
        p.check(~dut.rcredit.valid | all_done, "credit before every target is done")
        p.check(~dut.rcredit.valid | ((dut.rcredit.payload.src == (sh.src_node * G + sh.src_rank)[:cfg.src_bits])
                                      & (dut.rcredit.payload.tag == sh.tag)), "the credit names another row")
        p.check(~(dut.fwd.valid & dut.rcredit.valid), "a forward and a credit offered in the same cycle")
        take = dut.row.valid & dut.row.ready
        p.check(~take | ~in_row | cf | ~due, "a new row taken before the held row's credit went")
        # drops (a cycle late: the counters lag their events by one cycle)
        for i, r in enumerate(RelayReason):
            p.check(dut.drops[i] == drops_lag[i], f"drops[{r.name}] differs from the bad rows seen")

        # ---- reference updates
        with m.If(lf):
            m.d.sync += local_done.eq(1)
        with m.If(ff):
            m.d.sync += fwd_done.eq(fwd_done | dst_oh)
        with m.If(cf):
            m.d.sync += [in_row.eq(0), due.eq(0)]
        m.d.sync += fresh.eq(take)
        with m.If(take):
            bad = r_bs | r_bg | r_bt
            m.d.sync += [in_row.eq(1), acc.eq(~bad), due.eq(~r_bs), bs_row.eq(r_bs), sh.eq(row),
                         local_done.eq(0), fwd_done.eq(0)]
            for i, b in ((int(RelayReason.FWD_BAD_SOURCE), r_bs), (int(RelayReason.FWD_BAD_GPU), r_bg),
                         (int(RelayReason.FWD_BAD_TARGETS), r_bt)):
                with m.If(b):
                    m.d.sync += drops[i].eq(drops[i] + 1)
        for g in range(G):
            sent = Cat(*(ff & (fp.dst == g) & (fp.ftag == t) for t in range(F)))
            back = Cat(*(cv & (cd == g) & (ct == t) for t in range(F)))
            m.d.sync += out[g].eq((out[g] | sent) & ~back)

        # ---- covers
        others = named & ~Cat(*(rank == g for g in range(G)))
        n_others = count_ones([others[g] for g in range(G)])
        p.cover(cf & acc & (n_others == 2), "a row forwarded to two GPUs, its credit back")
        p.cover(cf & acc & (n_others == 1) & local_named, "a row written here and forwarded, its credit back")
        p.cover(ff & (fp.ftag == F - 1), "the last forward tag used")
        p.cover(take & in_row & cf, "a new row taken in the cycle the last one's credit goes")
        p.cover(take & r_bt, "a row with bad targets")

        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(p, regs, locals())
        return m

    def _invariants(self, p, regs, e):
        """The strengthening invariants (module docstring): the unit's registers against the
        reference."""
        cfg = self.cfg
        T, G, F = cfg.relay_targets, cfg.node_gpus, cfg.forward_tags
        held, in_row, acc, due, sh = regs["held"], e["in_row"], e["acc"], e["due"], e["sh"]
        rank, named, names = e["rank"], e["named"], e["names"]
        p.check(held == (in_row & (due | e["fresh"])), "invariant: held is not the reference's row "
                "(a row with a credit due, or a row from an unknown source for one cycle)")
        p.check(~(in_row & acc) | due, "invariant: an accepted row held without a credit due")
        p.check(~held | (regs["r"] == Value.cast(sh)), "invariant: the held row's fields")
        p.check(~held | (regs["credit_due"] == due), "invariant: the credit bit")
        p.check(~held | (regs["src_global"] == (sh.src_node * G + sh.src_rank)[:cfg.src_bits]),
                "invariant: the global source")
        for g in range(G):
            p.check(~held | (regs[f"mem{g}"] == names(g)), f"invariant: mem{g}")
        local_named = e["local_named"]
        p.check(~held | (regs["loc"] == Cat(*(sh.valid[j] & (sh.gpu[j] == rank) for j in range(T)))),
                "invariant: loc")
        not_rank = ~Cat(*(rank == g for g in range(G)))
        p.check(~held | (regs["left"] == Cat(*(acc & named[g] & not_rank[g] & ~e["fwd_done"][g] for g in range(G)))),
                "invariant: left is not the named GPUs not yet forwarded")
        p.check(~held | (regs["local_left"] == (acc & local_named & ~e["local_done"])),
                "invariant: local_left is not the local report to make")
        cr_v, cr = regs["cr_valid"], data.View(RelayLayouts(cfg).fcredit, regs["cr"])
        for g in range(G):
            pend = Cat(*(cr_v & (cr.dst == g) & (cr.ftag == t) for t in range(F)))
            p.check(regs[f"free{g}"] == ~(e["out"][g] | pend), f"invariant: free{g} is not the tags not out")
            p.check((e["out"][g] & pend) == 0, f"invariant: a tag of {g} both out and being returned")
            p.check(regs["has_free"][g] == regs[f"free{g}"].any(), f"invariant: has_free[{g}] is not free{g}.any()")
        p.check(~cr_v | (cr.dst < G) & (cr.ftag < F), "invariant: a registered credit out of range")
        for i, r in enumerate(RelayReason):
            n = r.name.lower()
            p.check((regs[f"drops_{n}"] + regs[f"ev_drop_{n}"])[:32] == e["drops"][i],
                    f"invariant: drops[{r.name}] and its registered event are not the bad rows seen")


def small_config():
    """The reduced relay config of the property set (:data:`RELAY_SMALL` on tiny)."""
    from .common import formal_config
    return formal_config("tiny").replace(name="tiny/relay-small", **RELAY_SMALL)


def property_set() -> dict:
    """The forward unit's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it). Measured on the 2-core machine
    under load: BMC 12 25 s, k-induction k=2 14-20 s (also with 3 experts and top-3), the
    covers within 10 steps 13-24 s."""
    return dict(name="relay-forward", component="relay forward unit",
                config="tiny: 2 nodes x 3 GPUs, 2 experts, top-2, 2 tags, 2 forward tags",
                build=lambda: ForwardUnitHarness(small_config()),
                modes={"prove": 2, "bmc": 12, "cover": 10}, smoke={"prove": 2},
                note="protocol v3: every accepted relay row's targets reported here or forwarded exactly "
                     "once, or the row counted as one drop; no GPU forwarded to twice, no tag out reused; "
                     "the credit once, after every target; k-induction closes at k=2 with the unit's "
                     "registers against the reference row (relay.py)")
