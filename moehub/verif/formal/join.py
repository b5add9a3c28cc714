"""Property harness of the relay hub's credit join (:class:`moehub.rtl.relay.credit_join.RelayCredits`):
a relay row's R credit leaves once, and only once both its halves are in (the egress's
credit of its forwards, and the packet manager's of its own targets if it names this
GPU); a dropped row's once; every other credit of the packet manager passed through
unchanged; none lost, however long the credit port waits, and no hang.

Environment: ``node`` (a node of the config) and ``rank`` (a GPU of the node) constants,
no input in the first two cycles (NODE_ID and LOCAL_RANK are set before any row; the join
registers the ids it derives from them); ``credit``'s ready free. One **chosen slot** of
the window (a free constant: another node ``kn`` and a tag ``kt < tags_per_source``; so
every property holds for every slot) keeps the window protocol the hub's sources and
parts keep: a row's first chunk marks the slot (``mark``, with whether the row names this
GPU) or, a dropped row, its whole row is reported (``done``) only while the slot owes no
credit (the source sends the slot's next row only with the last one's credit); the
egress's credit of a marked row (``fu``) comes once, after its mark; the packet manager's
(``pm``) once, after its mark, and only if the row names this GPU. Every other slot's and
source's inputs are free (any marks, dones and credits, any number of times), but for two
rules of the hub: a credit of a remote source of this rank carries a tag in the window
(the packet manager drops a row whose tag is not, the egress credits accepted rows only),
and ``fu`` only names remote sources of this rank.

Reference state (the harness's own registers): the chosen slot's row -- open (marked, its
credit not out), whether it names this GPU, each half taken, or dropped (done, its credit
not out) -- and the pass-through credits the ``pm`` port took and has not sent (their
payloads, in order: the port holds two).

Properties:

* the chosen slot's credit ((the node ``kn``'s GPU of this rank, ``kt``)) leaves only
  while owed: a dropped row's, or an open row's with its forwards' credit in and, if it
  names this GPU, the packet manager's -- so never before both halves, and once per row
  (the row is no longer owed once it left);
* a credit of any other source (not a remote GPU of this rank) leaves only as the oldest
  pass-through credit taken, with its payload (in order; never a third held);
* no hang, none lost: a credit owed (the chosen slot's, or the pass-through one) leaves
  within :func:`hang_wait` cycles in a row in which ``credit`` is ready and no input is
  offered: the window's slots plus 5 (the dropped rows' credits, one a cycle, go first;
  exact: reached, and one more is not).

Unbounded (k-induction, ``prove``): the invariants (:meth:`JoinHarness._invariants`) tie
the join's registers to the reference: the ids (each node's GPU of this rank, whether it is
remote) their function of ``node`` and ``rank``; each held credit's decode its payload's
(the (node, tag) one-hot, whether a remote source of this rank), a port's skid entry held
only behind its head, the dropped-credit
register a slot's; the chosen slot's bits -- ``need`` the open row's naming this GPU, a
half's bit (``fu_in``, ``pm_in``) set exactly when the half was taken and is no longer in
its registers, never both, the forwards' half only for a row naming this GPU -- its held
credits only while owed and never twice in a port, its ``dropped`` bit or the dropped-credit register exactly while
a dropped row is owed, never both; nothing of it while the slot owes nothing; the
pass-through credits exactly the ``pm`` registers' that hold one not of a remote source
of this rank, head first.
"""
from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal

from ...rtl.relay.credit_join import RelayCredits
from .common import any_const, any_seq
from .plant import Plant, PlantedHarness

#: the reduced config: 3 nodes x 2 GPUs (a remote node on either side of the hub's), 2 tags
#: per source (a window of 4 slots, 6 bits with this node's unused)
JOIN_SMALL = dict(sources=6, nodes=3, gpus_per_node=2)
#: the most cycles in a row a credit owed waits while the credit port is ready and no input
#: is offered (no hang), past the window's slots: the dropped rows' credits go first, one a
#: cycle (every slot of the window may owe one) after the two registers they pass, then the
#: forwards' credits held (the head, then the skid entry behind it), then the packet
#: manager's two (on the small config, 4 slots: 9 is reached within 20 steps, and the proof
#: shows 10 is not)
HANG_EXTRA = 5


def hang_wait(cfg) -> int:
    """The no-hang bound of ``cfg``: its window's slots plus :data:`HANG_EXTRA`."""
    return cfg.relay_window + HANG_EXTRA


#: the BMC's and the covers' depths (the k-induction's k: the no-hang window, hang_wait + 1)
BMC_DEPTH, COVER_DEPTH = 12, 20

MOD = "moehub.rtl.relay.credit_join"
PLANTS = {
    "forwards-alone": Plant(MOD, "f_now = ((~need | pm_in) & fu.oh).any()", "f_now = fu.oh.any()",
                            "RelayCredits", ("the chosen slot's credit out while not owed",),
                            "a row credited on its forwards alone (its own targets not yet written)"),
    "pass-swallowed": Plant(MOD, "p_now = ~pm.rel | (fu_in & pm.oh).any()", "p_now = (fu_in & pm.oh).any()",
                            "RelayCredits", ("a credit owed held back", "a third pass-through credit taken"),
                            "a credit of a source that is no remote GPU of this rank taken and never sent"),
    "dropped-kept": Plant(MOD, "m.d.sync += owed.eq((owed & ~Mux(load_pick, nxt, 0)) | Mux(self.done.valid, new, 0))",
                          "m.d.sync += owed.eq(owed | Mux(self.done.valid, new, 0))", "RelayCredits",
                          ("the chosen slot's credit out while not owed",),
                          "a dropped row's bit not cleared as its credit moves to the register: credited again"),
    "pm-kept": Plant(MOD, "m.d.sync += [pm_in.eq((pm_in | Mux(p_fire & ~p_now, pm.oh, 0)) & ~clear),",
                     "m.d.sync += [pm_in.eq(pm_in | Mux(p_fire & ~p_now, pm.oh, 0)),", "RelayCredits",
                     ("the chosen slot's credit out while not owed",),
                     "a row's packet-manager half kept after its credit: the slot's next row credited on its "
                     "forwards alone"),
}


class JoinHarness(PlantedHarness):
    """A :class:`RelayCredits` of ``cfg`` under its environment (module docstring)."""
    unit = RelayCredits
    plants = PLANTS

    def elaborate(self, platform):
        m = Module()
        cfg, T = self.cfg, self.cfg.tags_per_source
        gpn = cfg.node_gpus
        p, dut, regs = self.elaborate_dut(m, platform)

        # ---- environment
        node, rank = any_const(m, cfg.node_bits, "node"), any_const(m, cfg.gpu_bits, "rank")
        kn, kt = any_const(m, cfg.node_bits, "chosen_node"), any_const(m, cfg.tag_bits, "chosen_tag")
        p.assume((node < cfg.nodes) & (rank < gpn) & (kn < cfg.nodes) & (kn != node) & (kt < T))
        m.d.comb += [dut.node.eq(node), dut.rank.eq(rank)]
        ins = {}
        for name in ("fu", "pm", "done"):
            port = getattr(dut, name)
            v, pl = any_seq(m, 1, f"{name}_valid"), any_seq(m, port.payload.shape(), f"{name}_payload")
            m.d.comb += [port.valid.eq(v), port.payload.eq(pl)]
            ins[name] = (v, pl)
        mv, mnode, mtag, mloc = (any_seq(m, w, f"mark_{n}") for n, w in
                                 (("valid", 1), ("node", cfg.node_bits), ("tag", cfg.tag_bits), ("local", 1)))
        m.d.comb += [dut.mark_valid.eq(mv), dut.mark_node.eq(mnode), dut.mark_tag.eq(mtag),
                     dut.mark_local.eq(mloc), dut.credit.ready.eq(any_seq(m, 1, "credit_ready"))]
        age = Signal(2, name="env_age")                     # cycles since reset, to 2
        m.d.sync += age.eq(Mux(age == 2, 2, age + 1))
        p.assume((age == 2) | ~(ins["fu"][0] | ins["pm"][0] | ins["done"][0] | mv))

        def gid_of(n):
            return (n * gpn + rank)[:cfg.src_bits]

        def remote_rank(src):
            """Whether ``src`` is a remote GPU of this rank."""
            return Cat(*((src == gid_of(n)) & (node != n) for n in range(cfg.nodes))).any()
        gk = Signal(cfg.src_bits, name="chosen_src")
        m.d.comb += gk.eq(gid_of(kn))
        for name in ("fu", "pm"):
            v, pl = ins[name]
            p.assume(~v | ~remote_rank(pl.src) | (pl.tag < T))
        p.assume(~ins["fu"][0] | remote_rank(ins["fu"][1].src))
        p.assume(~ins["done"][0] | (remote_rank(ins["done"][1].src) & (ins["done"][1].tag < T)))

        # ---- reference: the chosen slot
        r_open, r_need, r_fu, r_pm, r_drop = (Signal(name=f"ref_{n}") for n in ("open", "need", "fu", "pm", "drop"))

        def is_k(pl):
            return (pl.src == gk) & (pl.tag == kt)
        fu_k = ins["fu"][0] & is_k(ins["fu"][1])
        pm_k = ins["pm"][0] & is_k(ins["pm"][1])
        done_k = ins["done"][0] & is_k(ins["done"][1])
        mark_k = mv & (mnode == kn) & (mtag == kt)
        owes = r_open | r_drop
        p.assume(~(mark_k | done_k) | ~owes)
        p.assume(~(mark_k & done_k))
        p.assume(~fu_k | (r_open & ~r_fu))
        p.assume(~pm_k | (r_open & r_need & ~r_pm))
        fu_take = fu_k & dut.fu.ready
        pm_take = pm_k & dut.pm.ready
        out = dut.credit.valid & dut.credit.ready
        cp = dut.credit.payload
        out_k = out & (cp.src == gk) & (cp.tag == kt)
        due = Signal(name="ref_due")                       # the chosen slot's credit may leave
        m.d.comb += due.eq(r_drop | (r_open & r_fu & (~r_need | r_pm)))
        p.check(~(dut.credit.valid & (cp.src == gk) & (cp.tag == kt)) | due,
                "the chosen slot's credit out while not owed (before both halves, twice, or for no row)")
        with m.If(out_k):
            m.d.sync += [r_open.eq(0), r_drop.eq(0), r_fu.eq(0), r_pm.eq(0), r_need.eq(0)]
        with m.Else():
            with m.If(mark_k):
                m.d.sync += [r_open.eq(1), r_need.eq(mloc), r_fu.eq(0), r_pm.eq(0)]
            with m.If(done_k):
                m.d.sync += r_drop.eq(1)
            with m.If(fu_take):
                m.d.sync += r_fu.eq(1)
            with m.If(pm_take):
                m.d.sync += r_pm.eq(1)
        # ---- reference: the pass-through credits (in order: the pm port holds two)
        pv, ppl = ins["pm"]
        pass_take = pv & dut.pm.ready & ~remote_rank(ppl.src)
        pass_out = out & ~remote_rank(cp.src)
        W_PAY = len(ppl.as_value())
        t_pass, t_pay = Signal(name="ref_pass"), Signal(W_PAY, name="ref_pass_payload")
        t_pass1, t_pay1 = Signal(name="ref_pass1"), Signal(W_PAY, name="ref_pass1_payload")
        p.check(~(dut.credit.valid & ~remote_rank(cp.src)) | (t_pass & (cp.as_value() == t_pay)),
                "a credit of another source out that the pm port did not take (or not its payload, or "
                "out of order)")
        p.check(~(pass_take & t_pass1 & ~pass_out), "a third pass-through credit taken (the pm port holds two)")
        with m.If(pass_out):
            m.d.sync += [t_pass.eq(t_pass1 | pass_take), t_pay.eq(Mux(t_pass1, t_pay1, ppl.as_value())),
                         t_pass1.eq(t_pass1 & pass_take), t_pay1.eq(ppl.as_value())]
        with m.Elif(pass_take):
            with m.If(t_pass):
                m.d.sync += [t_pass1.eq(1), t_pay1.eq(ppl.as_value())]
            with m.Else():
                m.d.sync += [t_pass.eq(1), t_pay.eq(ppl.as_value())]

        # ---- no hang: a credit owed leaves while the port is ready and nothing is offered
        quiet = dut.credit.ready & ~(ins["fu"][0] | ins["pm"][0] | ins["done"][0])
        HANG_WAIT = hang_wait(cfg)
        wait = Signal(range(HANG_WAIT + 2), name="env_wait")
        m.d.sync += wait.eq(Mux(quiet & ((due & ~out_k) | (t_pass & ~pass_out)), wait + 1, 0))
        p.check(wait <= HANG_WAIT, "a credit owed held back more than HANG_WAIT cycles in a row with the "
                                   "port ready and nothing offered (lost, or a hang)")
        p.cover(wait == HANG_WAIT, "a credit owed held back HANG_WAIT cycles with the port ready")

        # ---- covers
        p.cover(out_k & r_open & r_need, "a row naming this GPU credited (both halves in)")
        p.cover(out_k & r_drop, "a dropped row credited")
        p.cover(out_k & r_open & r_need & (regs["fu_in"] == 0), "a row credited with its forwards' half last")
        p.cover(pass_out, "a pass-through credit out")

        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(m, p, regs, locals())
        return m

    def _invariants(self, m, p, regs, e):
        """The strengthening invariants (module docstring)."""
        cfg, T = self.cfg, self.cfg.tags_per_source
        gid_of, node, kn, kt, gk = e["gid_of"], e["node"], e["kn"], e["kt"], e["gk"]
        started = e["age"] != 0
        p.check(~started | Cat(*((regs[f"gid{n}"] == gid_of(n)) & (regs[f"remote{n}"] == (node != n))
                                 for n in range(cfg.nodes))).all(),
                "invariant: the ids are not each node's GPU of this rank and whether it is remote")

        def decode(src, tag):
            hit = [(src == regs[f"gid{n}"]) & regs[f"remote{n}"] for n in range(cfg.nodes)]
            return Cat(*hit).any(), Cat(*(hit[n] & (tag == t) for n in range(cfg.nodes) for t in range(T)))
        for h in ("fu", "fu_s", "pm", "pm_s"):
            rel, oh = decode(regs[f"{h}_src"], regs[f"{h}_tag"])
            p.check(~regs[f"{h}_v"] | (regs[f"{h}_rel"] == rel) & (regs[f"{h}_oh_r"] == oh),
                    "invariant: a held credit's decode is not its payload's", src_loc_at=0)
        for h in ("fu", "pm"):
            p.check(~regs[f"{h}_s_v"] | regs[f"{h}_v"], "invariant: a skid entry held behind an empty head",
                    src_loc_at=0)
        k = Signal(range(cfg.nodes * T), name="inv_chosen_slot")
        m.d.comb += k.eq(kn * T + kt)

        def bit(name):
            return regs[name].bit_select(k, 1)
        need, fu_in, pm_in, dropped = bit("need"), bit("fu_in"), bit("pm_in"), bit("dropped")
        r_open, r_need, r_fu, r_pm, r_drop = (e[n] for n in ("r_open", "r_need", "r_fu", "r_pm", "r_drop"))

        def held_k(h):
            return regs[f"{h}_v"] & (regs[f"{h}_src"] == gk) & (regs[f"{h}_tag"] == kt)
        for h in ("fu", "pm"):
            p.check(~(held_k(h) & held_k(f"{h}_s")), "invariant: the chosen slot's credit held twice",
                    src_loc_at=0)
        fu_h, pm_h = held_k("fu") | held_k("fu_s"), held_k("pm") | held_k("pm_s")
        drop_h = regs["drop_v"] & (regs["drop_src"] == gk) & (regs["drop_tag"] == kt)
        pick_h = regs["drop_pick_v"] & regs["drop_pick"].bit_select(k, 1)
        p.check(~(r_open & r_drop), "invariant: the chosen slot both open and dropped")
        p.check(need == (r_open & r_need), "invariant: the chosen slot's need bit is not its open row's")
        p.check((fu_in == (r_open & r_fu & ~fu_h)) & (pm_in == (r_open & r_pm & ~pm_h)) & ~(fu_in & pm_in)
                & (~fu_in | r_need),
                "invariant: a half's bit is not: taken and no longer held (never both; forwards only with need)")
        p.check((~fu_h | (r_open & r_fu)) & (~pm_h | (r_open & r_need & r_pm)),
                "invariant: a held credit of the chosen slot not owed")
        p.check((r_drop == (dropped | pick_h | drop_h)) & ~(dropped & pick_h) & ~(dropped & drop_h)
                & ~(pick_h & drop_h),
                "invariant: the chosen slot's dropped bit and registers are not its dropped row (or twice)")
        poh = regs["drop_pick"]
        onehot = Cat(*(poh == (1 << j) for j in range(cfg.nodes * T))).any()
        own = Cat(*(node == n for n in range(cfg.nodes) for _ in range(T)))
        p.check(~regs["drop_pick_v"] | onehot & ((poh & own) == 0),
                "invariant: the dropped-credit pick is not one slot of the window")
        p.check(~regs["drop_v"] | Cat(*((regs["drop_src"] == gid_of(n)) & (node != n) for n in range(cfg.nodes))).any()
                & (regs["drop_tag"] < T), "invariant: the dropped-credit register holds no slot")
        p.check((regs["dropped"] & own) == 0, "invariant: a dropped bit of this node's own slots")
        hp = regs["pm_v"] & ~e["remote_rank"](regs["pm_src"])          # the head a pass-through credit
        sp = regs["pm_s_v"] & ~e["remote_rank"](regs["pm_s_src"])      # the skid entry one
        head, skid = Cat(regs["pm_src"], regs["pm_tag"]), Cat(regs["pm_s_src"], regs["pm_s_tag"])
        p.check((e["t_pass"] == (hp | sp)) & (e["t_pass1"] == (hp & sp)),
                "invariant: the pass-through credits are not the pm registers'")
        p.check((~e["t_pass"] | (e["t_pay"] == Mux(hp, head, skid))) & (~e["t_pass1"] | (e["t_pay1"] == skid)),
                "invariant: the pass-through payloads are not the pm registers' (in order)")
        p.check(~(e["age"] == 0) | ~(r_open | r_drop | e["t_pass"] | e["t_pass1"] | regs["fu_v"] | regs["pm_v"]
                                       | regs["fu_s_v"] | regs["pm_s_v"] | regs["drop_v"]
                                       | regs["drop_pick_v"])
                & (regs["dropped"] == 0) & (regs["need"] == 0) & (regs["fu_in"] == 0) & (regs["pm_in"] == 0),
                "invariant: anything owed or held in the reset cycle")


def small_config():
    """The reduced config of the credit join's property set (:data:`JOIN_SMALL` on the
    forward unit's ``tiny/relay-small``)."""
    from .relay import small_config as relay_small
    return relay_small().replace(name="tiny/join-small", **JOIN_SMALL)


def property_set() -> dict:
    """The credit join's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it)."""
    k = hang_wait(small_config()) + 1
    return dict(name="relay-join", component="relay credit join",
                config="tiny/join-small: 3 nodes x 2 GPUs, 2 tags (a window of 4 slots)",
                build=lambda: JoinHarness(small_config()),
                modes={"prove": k, "bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"prove": k},
                note="protocol v3: a relay row's credit out once, only after its forwards' credit and, naming "
                     "this GPU, the packet manager's; a dropped row's once; any other credit passed through "
                     f"unchanged; a credit owed out within {k - 1} quiet cycles with the port ready (the "
                     "window's slots + 5; none lost however long the port waits) (join.py)")
