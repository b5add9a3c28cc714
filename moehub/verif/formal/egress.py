"""Property harness of the relay hub's forward egress (:class:`moehub.rtl.relay.egress.ForwardEgress`):
each forward command's staged row read back chunk by chunk and sent to its GPU with the
forward's header, each relay row's credit passed on only after the forwards before it
have all gone out, nothing read, sent or credited twice, and no command held back.

Environment: commands offered at any time -- a forward (``fwd``, with its relay row's R
tag ``fwd_tag``) or a relay row's credit (``rcredit``), never both in one cycle (the
forward unit offers a row's credit only once none of its forwards is left: a property of
``relay-forward``), of any content, not necessarily held until taken (the forward unit's
pick may move to a lower GPU whose tag came free); a forward's original source another
node's (``src_node < nodes``, ``!= node``) and its R tag ``< tags_per_source`` (the forward
unit forwards accepted rows only); ``node`` (a node of the config) and ``base``
constants; ``rd``'s, ``out``'s and ``credit``'s ready free; the staging's memory answers
the reads in order, each some cycles later: ``rdata.valid`` only while a read issued is
not yet answered (the harness counts them), its data free.

Reference state (the harness's own registers, from the egress's contract): the reads owed
(``C`` = ``chunks_per_row`` per forward taken, less the reads issued), the out chunks owed
(the same, less the chunks sent), the credits owed (one per credit taken, less those
passed on) and the commands taken and not yet done with. One **tracked** command: any
command taken may become it (a free choice, ``track_pick``, while none is tracked; so
every property below holds for every command): its kind and payload, and how many
commands, reads, out chunks and credits are owed ahead of it at its take, less those done
since, and (a forward) its own reads and chunks so far. Tracking ends with a credit passed
on or a forward's last chunk sent.

Properties (for the tracked command, so for every command):

* a read only while one is owed (none for a credit, no more than ``C`` a forward); the
  tracked forward's reads, once those ahead are issued, at ``base`` + slot x row stride +
  k x ``chunk_bytes`` for k = 0 .. C - 1 in order, its slot that of (its original source's
  node among the other nodes, its R tag) -- the relay staging's slot of the row;
* an out chunk only while one is owed; the tracked forward's ``C`` chunks, once those
  ahead have gone, to its destination GPU, each a ``FORWARD`` row with the forward's
  header (forwarder, forward tag, original source, token, entries) and chunk k;
* each out chunk carries the memory's answer taken with it, and an answer is taken exactly
  when a chunk goes out (so, the memory answering in order, the n-th chunk out is the n-th
  read's data: each chunk its own row's);
* a credit only while one is owed; the tracked credit the first after the credits ahead of
  it, with its payload, and only once every chunk of the forwards taken before it has gone
  out (then, and only then, may the credit join free the staging slot);
* no hang: a command offered waits at most ``HANG_WAIT`` cycles in a row in which ``rd``,
  ``out`` and ``credit`` are ready and the memory answers whenever a read is owed an
  answer (the bound is exact: reached, and one more is not).

Unbounded (k-induction, ``prove``). The properties alone are not inductive (a command, a
header or a read context that the reference does not expect satisfies them until it
leaves, and a stalled output can hold it there for any k). The strengthening invariants
(:meth:`EgressHarness._invariants`) tie the egress's registers and its three FIFOs
(``SyncFIFOBuffered``: each an output register and a memory whose words
``common.memory_words`` names as flops after ``memory_map``) to the reference: the FIFOs'
pointers; the commands taken and not done = the command FIFO's level plus the command
register (at most the FIFO's depth while the ready register is set, at least while not); reads not answered = the context FIFO's level; the preparation's step (not 0
only with a forward at the head; its chunk 0 before the reads); reads owed = ``C`` per
forward queued, less the head's chunk while it is read; chunks owed = reads owed + reads
not answered; credits owed = the credits queued; the header FIFO's forwards (the front
owes 1 .. ``C`` chunks, one behind it ``C``) and the context FIFO = the front's reads not
sent plus the reads of the one behind, each entry's chunk and last bit those of
consecutive reads ending at ``chunk - 1``; the tracked command: at its place among the
queued commands (or the register) with the credits and reads ahead of it counted there,
while it is the head its slot, offset and address, while it is read its header the newest
in the header FIFO, and once read its header at its place there with the chunks ahead.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data

from ...rtl.relay.egress import COMMANDS, READS, ForwardEgress
from ...spec.formats import RelayFormats, RowClass
from .common import any_const, any_seq, pick
from .plant import Plant, PlantedHarness

#: the reduced config: 3 nodes x 2 GPUs (a source's node among the other two: both sides
#: of this node), 2 R tags per source (a window of 4 slots), 2 forward tags; rows of 3
#: chunks of 16 bytes (a first, a middle and a last chunk; a row stride of 48 bytes, not a
#: power of two), tiny's 32-bit addresses
EGRESS_SMALL = dict(sources=6, nodes=3, gpus_per_node=2, row_bytes=48)

#: the FIFOs' memories as flip-flops, before their words are connected (common.memory_words)
SCRIPT = ("memory_map", "opt_clean")
#: the most cycles in a row a command offered waits while every output is ready and the
#: memory answers each read owed (no hang): the command FIFO full of forwards and the
#: register holding a fifth, the head's three preparing steps and its C = 3 reads pass
#: before the FIFO has room again, and the ready register sees that room a cycle later (8
#: is reached, at step 26; 9 is not: the k-induction proves the bound)
HANG_WAIT = 8
#: k of the k-induction (the no-hang property's window: its wait fits in the induction's
#: path), the BMC's and the covers' depths (cycles from reset)
PROVE_K, BMC_DEPTH, COVER_DEPTH = HANG_WAIT + 1, 14, 28

#: widths of the harness's counts (commands, reads and chunks owed stay far below)
CNT = 7

MOD = "moehub.rtl.relay.egress"
#: planted bugs (each a one-line edit of the egress's source, in memory)
PLANTS = {
    "credit-early": Plant(MOD, "m.d.comb += idle.eq((xq.level == 0) & ~xq.r_rdy)", "m.d.comb += idle.eq(1)",
                          "ForwardEgress", ("a credit before every chunk of the forwards ahead of it went out",),
                          "a credit passed on while the forwards before it are still being read: the staging "
                          "slot freed under them"),
    "addr-stuck": Plant(MOD, "chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr + cfg.chunk_bytes)]",
                        "chunk.eq(Mux(last, 0, chunk + 1)), addr.eq(addr)]", "ForwardEgress",
                        ("a read not at the forward's next chunk",),
                        "the address not stepped by chunk_bytes: every chunk read at the row's first"),
    "slot-no-node": Plant(MOD, "slot.eq(stage_slot(cfg, self.node, head.fwd.src_node, head.tag))",
                          "slot.eq(stage_slot(cfg, 0, head.fwd.src_node, head.tag))", "ForwardEgress",
                          ("a read not at the forward's next chunk",),
                          "the slot computed as if this hub were node 0: another row's staging read"),
    "header-early": Plant(MOD, "hq.r_en.eq(self.out.valid & self.out.ready & ctx.last)]",
                          "hq.r_en.eq(self.out.valid & self.out.ready)]", "ForwardEgress",
                          ("an out chunk with another forward's header",),
                          "a forward's header dropped at its first chunk: its other chunks leave with the "
                          "next forward's header"),
    "held-overwritten": Plant(MOD, "take.eq(~held | cq.w_rdy)", "take.eq(1)", "ForwardEgress",
                              ("the tracked credit out of order or not its own", "a hang",
                               "a read not at the forward's next chunk", "an out chunk with another",
                               "a credit before every chunk"),
                              "a command taken while the register holds one the full FIFO refused: the held "
                              "command lost"),
    "ready-ignores-taken": Plant(MOD, "ready.eq(Mux(accept, pending < COMMANDS, pending <= COMMANDS))",
                                 "ready.eq(pending <= COMMANDS)", "ForwardEgress",
                                 ("the tracked credit out of order or not its own", "a hang",
                                  "a read not at the forward's next chunk", "an out chunk with another",
                                  "a credit no command owes", "a credit before every chunk"),
                                 "the ready register set without the command taken this cycle: a sixth "
                                 "command taken while the FIFO and the register are full, and lost"),
    "one-read-in-flight": Plant(MOD, "self.rd.valid.eq(fwd_head & (step == 3) & xq.w_rdy)",
                                "self.rd.valid.eq(fwd_head & (step == 3) & xq.w_rdy & (xq.level == 0))",
                                "ForwardEgress", ("a hang",),
                                "a read issued only once the one before was answered and sent: a row's "
                                "reads no longer overlap, and a command offered waits past the bound"),
}


def ref_slot(cfg, node, src_node, tag):
    """The relay staging's slot of a forward's row at a hub of ``node``: its original
    source's node among the other nodes (those below ``node`` first), times the R tags, plus
    its tag (the spec's R window, written out here)."""
    return Mux(src_node > node, src_node - 1, src_node) * cfg.tags_per_source + tag


class EgressHarness(PlantedHarness):
    """A :class:`ForwardEgress` of ``cfg`` under its environment (module docstring)."""
    unit = ForwardEgress
    plants = PLANTS

    def elaborate(self, platform):
        m = Module()
        cfg, C = self.cfg, self.cfg.chunks_per_row
        aw = cfg.addr_bits
        p, dut, regs = self.elaborate_dut(m, platform, into=("cmds", "ctxs", "hdrs"))
        parts = self.parts
        cq = parts["cmds"]

        # ---- environment
        node = any_const(m, cfg.node_bits, "node")
        base = any_const(m, aw, "base")
        p.assume(node < cfg.nodes)
        m.d.comb += [dut.node.eq(node), dut.base.eq(base)]
        fv, cv = any_seq(m, 1, "fwd_valid"), any_seq(m, 1, "rcredit_valid")
        fp = any_seq(m, dut.fwd.payload.shape(), "fwd_payload")
        ft = any_seq(m, cfg.tag_bits, "fwd_tag")
        cp = any_seq(m, dut.rcredit.payload.shape(), "rcredit_payload")
        m.d.comb += [dut.fwd.valid.eq(fv), dut.fwd.payload.eq(fp), dut.fwd_tag.eq(ft),
                     dut.rcredit.valid.eq(cv), dut.rcredit.payload.eq(cp)]
        p.assume(~(fv & cv))
        p.assume(~fv | ((fp.src_node < cfg.nodes) & (fp.src_node != node) & (ft < cfg.tags_per_source)))
        for name in ("rd", "out", "credit"):
            m.d.comb += getattr(dut, name).ready.eq(any_seq(m, 1, f"{name}_ready"))
        m.d.comb += [dut.rdata.valid.eq(any_seq(m, 1, "rdata_valid")),
                     dut.rdata.payload.eq(any_seq(m, cfg.data_bits, "rdata_payload"))]
        take_f = fv & dut.fwd.ready
        take_c = cv & dut.rcredit.ready
        take = take_f | take_c
        rd_fire = dut.rd.valid & dut.rd.ready
        out_fire = dut.out.valid & dut.out.ready
        ans_fire = dut.rdata.valid & dut.rdata.ready
        cr_fire = dut.credit.valid & dut.credit.ready
        pop = cq.r_en & cq.r_rdy
        pend = Signal(range(READS + 2), name="env_reads_pending")      # reads issued, not answered
        m.d.sync += pend.eq(pend + rd_fire - ans_fire)
        p.assume(~dut.rdata.valid | (pend != 0))

        # ---- no hang: a command offered waits at most HANG_WAIT cycles in a row in which
        # every output is ready and the memory answers the reads owed
        free = dut.rd.ready & dut.out.ready & dut.credit.ready & (dut.rdata.valid | (pend == 0))
        held_back = (fv & ~dut.fwd.ready) | (cv & ~dut.rcredit.ready)
        wait = Signal(range(HANG_WAIT + 2), name="env_wait")
        m.d.sync += wait.eq(Mux(free & held_back, wait + 1, 0))
        p.check(wait <= HANG_WAIT, "a command held back more than HANG_WAIT cycles in a row with every output "
                                   "ready and the memory answering (a hang)")
        p.cover(wait == HANG_WAIT, "a command held back HANG_WAIT cycles in a row with every output ready")

        # ---- reference: what the commands taken owe
        n_cmd = Signal(CNT, name="ref_commands")            # taken, not yet popped
        r_owed = Signal(CNT, name="ref_reads_owed")
        o_owed = Signal(CNT, name="ref_chunks_owed")
        c_owed = Signal(CNT, name="ref_credits_owed")
        m.d.sync += [n_cmd.eq(n_cmd + take - pop),
                     r_owed.eq(r_owed + Mux(take_f, C, 0) - rd_fire),
                     o_owed.eq(o_owed + Mux(take_f, C, 0) - out_fire),
                     c_owed.eq(c_owed + take_c - cr_fire)]
        # the tracked command
        trk = Signal(name="ref_tracking")
        t_credit = Signal(name="ref_is_credit")
        th = Signal(dut.fwd.payload.shape(), name="ref_fwd")
        t_tag = Signal(cfg.tag_bits, name="ref_tag")
        t_cr = Signal(dut.rcredit.payload.shape(), name="ref_credit")
        t_popped = Signal(name="ref_popped")                # a forward: its reads all issued
        a_cmd = Signal(CNT, name="ref_commands_ahead")
        a_rd = Signal(CNT, name="ref_reads_ahead")
        a_out = Signal(CNT, name="ref_chunks_ahead")
        a_cr = Signal(CNT, name="ref_credits_ahead")
        t_after = Signal(name="ref_after_forwards")         # (for a cover) chunks owed ahead at its take
        t_rd = Signal(range(C + 1), name="ref_reads")
        t_out = Signal(range(C + 1), name="ref_chunks")
        mine_rd = trk & ~t_credit & (a_rd == 0) & (t_rd < C)     # a read now is the tracked forward's
        mine_out = trk & ~t_credit & (a_out == 0) & (t_out < C)
        mine_cr = trk & t_credit & (a_cr == 0)
        slot = Signal(range(max(2, cfg.relay_window)), name="ref_slot")
        m.d.comb += slot.eq(ref_slot(cfg, node, th.src_node, t_tag))

        def addr_of(at, k):
            return (base + at * cfg.stride_bytes + k * cfg.chunk_bytes)[:aw]

        # ---- properties
        p.check(~dut.rd.valid | (r_owed != 0), "a read no forward owes (a credit's, or past a forward's chunks)")
        p.check(~(mine_rd & dut.rd.valid) | (dut.rd.payload == addr_of(slot, t_rd)),
                "a read not at the forward's next chunk (base + slot x stride + chunk x chunk_bytes)")
        p.check(~dut.out.valid | (o_owed != 0), "an out chunk no forward owes")
        word = RelayFormats(cfg).forward_row

        def field(name):
            off = word.offsets[name]
            return dut.out.payload.word[off:off + word.widths[name]]
        same = [field("cls") == RowClass.FORWARD, field("chunk") == t_out, dut.out.payload.dst == th.dst,
                *(field(k) == getattr(th, k) for k in ("fwd", "ftag", "src_node", "src_rank", "token"))]
        same += [(field(f"{k}{t}") == getattr(th, k)[t]) for t in range(cfg.max_targets) for k in ("valid", "expert", "slot")]
        p.check(~(mine_out & dut.out.valid) | Cat(*same).all(),
                "an out chunk with another forward's header, destination or chunk (or out of the forwards' order)")
        p.check(~dut.out.valid | (dut.rdata.valid & (field("data") == dut.rdata.payload)),
                "an out chunk without the memory's answer as its data")
        p.check(out_fire == ans_fire, "an answer taken without its chunk going out")
        p.check(~dut.credit.valid | (c_owed != 0), "a credit no command owes (none taken, or twice)")
        p.check(~(mine_cr & dut.credit.valid) | (dut.credit.payload.as_value() == t_cr.as_value()),
                "the tracked credit out of order or not its own")
        p.check(~(mine_cr & dut.credit.valid) | (a_out == 0),
                "a credit before every chunk of the forwards ahead of it went out")

        # ---- reference updates
        track = any_seq(m, 1, "track_pick")
        with m.If(trk):
            m.d.sync += [a_cmd.eq(a_cmd - (pop & (a_cmd != 0))), a_rd.eq(a_rd - (rd_fire & (a_rd != 0))),
                         a_out.eq(a_out - (out_fire & (a_out != 0))), a_cr.eq(a_cr - (cr_fire & (a_cr != 0))),
                         t_rd.eq(t_rd + (mine_rd & rd_fire)), t_out.eq(t_out + (mine_out & out_fire))]
            with m.If(~t_credit & ~t_popped & (a_cmd == 0) & pop):
                m.d.sync += t_popped.eq(1)
            with m.If((mine_cr & cr_fire) | (mine_out & out_fire & (t_out == C - 1))):
                m.d.sync += trk.eq(0)
        with m.Elif(take & track):
            m.d.sync += [trk.eq(1), t_credit.eq(take_c), th.eq(fp), t_tag.eq(ft), t_cr.eq(cp), t_popped.eq(0),
                         a_cmd.eq(n_cmd - pop), a_rd.eq(r_owed - rd_fire), a_out.eq(o_owed - out_fire),
                         a_cr.eq(c_owed - cr_fire), t_rd.eq(0), t_out.eq(0), t_after.eq(o_owed != out_fire)]

        # ---- covers
        p.cover(mine_cr & cr_fire & t_after, "a credit passed on after the forwards ahead of it went out")
        p.cover(mine_out & out_fire & (t_out == C - 1) & (regs["hdrs.level"] == 2),
                "a forward's last chunk out with the next forward's header queued behind it")
        p.cover((cq.level == COMMANDS) & regs["cmd_held"], "the command FIFO full and a command held")

        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(m, p, regs, locals())
        return m

    def _invariants(self, m, p, regs, e):
        """The strengthening invariants (module docstring)."""
        cfg, C = self.cfg, self.cfg.chunks_per_row
        self.script = SCRIPT
        dut = e["dut"]
        Hd = e["parts"]["hdrs"].depth
        cmd_lay, ctx_lay, fwd_lay = dut.command, dut.context, dut.lay.fwd
        Q, ql, q_ok = self.fifo(m, regs, "cmds", COMMANDS, cmd_lay.size)
        X, xl, x_ok = self.fifo(m, regs, "ctxs", READS, ctx_lay.size)
        H, hl, h_ok = self.fifo(m, regs, "hdrs", Hd, fwd_lay.size)
        p.check(q_ok & x_ok & h_ok, "invariant: a FIFO's pointers are not consume + inner_level")
        held, hc = regs["cmd_held"], data.View(cmd_lay, regs["cmd_reg"])
        step, chunk = regs["prep_step"], regs["chunk"]
        slot_r, off, addr = regs["slot"], regs["offset"], regs["addr"]
        fifo = [(live, data.View(cmd_lay, d)) for live, d in Q]       # in order; then the register
        cq = e["parts"]["cmds"]
        head = data.View(cmd_lay, regs["cmds.r_data"])
        reading = step == 3

        def wide(v):
            s = Signal(CNT + 2)
            m.d.comb += s.eq(v)
            return s

        def fwds(upto=None):
            """C per forward queued: of the FIFO's first ``upto`` (a signal), or of the FIFO's
            and the register's (None)."""
            if upto is None:
                return fwds(Const(COMMANDS, CNT)) + Mux(held & ~hc.credit, C, 0)
            return sum(Mux(live & ~c.credit & (upto > q), C, 0) for q, (live, c) in enumerate(fifo))

        def credits(upto=None):
            """The credits queued, as :func:`fwds`."""
            if upto is None:
                return credits(Const(COMMANDS, CNT)) + (held & hc.credit)
            return sum(Mux(live & c.credit & (upto > q), 1, 0) for q, (live, c) in enumerate(fifo))

        # -- the commands, the reads and the chunks
        p.check(e["n_cmd"] == ql + held, "invariant: the commands taken are not the FIFO's and the register's")
        ready = regs["cmd_ready"]
        p.check(Mux(ready, ql + held <= COMMANDS, ql + held >= COMMANDS),
                "invariant: the ready register is not set from the room the FIFO and the register have")
        p.check((step <= 3) & (~(step != 0) | (cq.r_rdy & ~head.credit)) & (reading | (chunk == 0)),
                "invariant: the step (a forward at the head), or a chunk while not reading")
        p.check(e["pend"] == xl, "invariant: the reads not answered are not the context FIFO's level")
        r_owed, o_owed, c_owed = e["r_owed"], e["o_owed"], e["c_owed"]
        p.check(wide(r_owed) == wide(fwds() - Mux(reading, chunk, 0)),
                "invariant: the reads owed are not C per forward queued less the head's chunk")
        p.check(wide(o_owed) == wide(r_owed + xl), "invariant: the chunks owed are not the reads owed and not answered")
        p.check(wide(c_owed) == wide(credits()), "invariant: the credits owed are not the credits queued")
        # -- the forwards in the header FIFO: the front owes 1 .. C chunks, one behind it C
        o_hq = wide(o_owed - fwds() + Mux(reading, C, 0))
        front = Signal(CNT + 2, name="inv_front_owed")
        m.d.comb += front.eq(o_hq - Mux(hl == 2, C, 0))
        p.check(Mux(hl == 0, (o_hq == 0) & ~reading, (front >= 1) & (front <= C)),
                "invariant: the front forward's chunks owed are not 1 .. C (none without a header)")
        front_rd = Mux((hl == 1) & reading, C - chunk, 0)
        behind_rd = Mux(hl == 2, Mux(reading, chunk, C), 0)
        p.check(wide(xl + front_rd) == wide(front + behind_rd),
                "invariant: the context FIFO is not the front's reads not sent and the reads behind it")
        ctxs = []
        for q, (live, d) in enumerate(X):
            cx = data.View(ctx_lay, d)
            idx = Cat(*((chunk == c) & (xl == n) & (cx.chunk == (c - n + q) % C)
                        for c in range(C) for n in range(q + 1, READS + 1))).any()
            ctxs.append(~live | (idx & (cx.last == (cx.chunk == C - 1))))
        p.check(Cat(*ctxs).all(), "invariant: a context's chunk or last bit is not its read's")
        # -- the tracked command
        trk, tc, th, t_tag, t_cr = (e[k] for k in ("trk", "t_credit", "th", "t_tag", "t_cr"))
        popped, a_cmd, a_rd, a_out, a_cr = (e[k] for k in ("t_popped", "a_cmd", "a_rd", "a_out", "a_cr"))
        t_rd, t_out, slot = e["t_rd"], e["t_out"], e["slot"]
        queued = trk & ~popped
        at = Mux(a_cmd == ql, Value.cast(hc), pick([Value.cast(c) for _, c in fifo], a_cmd))
        atc = data.View(cmd_lay, at)
        own = Mux(tc, atc.credit & (atc.cr.as_value() == t_cr.as_value()),
                  ~atc.credit & (atc.fwd.as_value() == Value.cast(th)) & (atc.tag == t_tag))
        p.check(~queued | (a_cmd <= ql) & ((a_cmd < ql) | held) & own,
                "invariant: the tracked command not at its place among the queued")
        p.check(~queued | (wide(a_cr) == wide(credits(a_cmd))),
                "invariant: the credits ahead of the tracked command")
        at_head = queued & (a_cmd == 0) & cq.r_rdy
        p.check(~queued | (wide(a_rd) == wide(fwds(a_cmd) - Mux(reading & (a_cmd != 0), chunk, 0))),
                "invariant: the reads ahead of the tracked command")
        p.check(~trk | ~(tc & popped), "invariant: a tracked credit popped")
        waiting = queued & ~(at_head & ~tc & reading)
        p.check(~waiting | (t_rd == 0) & (t_out == 0) & (wide(a_out) == wide(a_rd + xl)),
                "invariant: the chunks ahead of a tracked command not yet read")
        own_hdr = [Value.cast(data.View(fwd_lay, d)) == Value.cast(th) for _, d in H]
        being_read = at_head & ~tc & reading
        p.check(~being_read | (t_rd == chunk) & (t_out <= t_rd) & (a_rd == 0)
                & pick(own_hdr, hl - 1)
                & Mux(a_out == 0, (hl == 1) & (front == C - t_out), (hl == 2) & (a_out == front) & (t_out == 0)),
                "invariant: the tracked forward being read: its chunk, its header the newest, the chunks ahead")
        p.check(~(at_head & ~tc & (step == 1)) | (slot_r == slot), "invariant: the tracked forward's slot")
        p.check(~(at_head & ~tc & (step == 2)) | (off == (slot * cfg.stride_bytes)[:cfg.addr_bits]),
                "invariant: the tracked forward's offset")
        p.check(~being_read | (addr == e["addr_of"](slot, chunk)), "invariant: the tracked forward's address")
        read = trk & popped
        hpos = a_out != 0
        p.check(~read | (t_rd == C) & (t_out < C) & (a_rd == 0) & (hpos < hl) & pick(own_hdr, hpos)
                & Mux(hpos, (a_out == front) & (t_out == 0) & ~reading, front == C - t_out),
                "invariant: the tracked forward read whole: its header at its place, the chunks ahead")


def small_config():
    """The reduced config of the forward egress's property set (:data:`EGRESS_SMALL` on the
    forward unit's ``tiny/relay-small``)."""
    from .relay import small_config as relay_small
    return relay_small().replace(name="tiny/egress-small", **EGRESS_SMALL)


def property_set() -> dict:
    """The forward egress's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it)."""
    return dict(name="relay-egress", component="relay forward egress",
                config="tiny/egress-small: 3 nodes x 2 GPUs, 2 R tags, 3-chunk rows (48-byte stride)",
                build=lambda: EgressHarness(small_config()),
                modes={"prove": PROVE_K, "bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"prove": PROVE_K},
                note="protocol v3: every forward taken reads its staged row (base + slot x stride + k x "
                     "chunk_bytes, the slot of its source's node and R tag) and sends its C chunks in order "
                     "to its GPU with its header and the memory's answers; every credit passed on once, in "
                     "order, only after every chunk of the forwards before it went out; a command offered "
                     f"taken within {HANG_WAIT} cycles with the outputs ready and the memory answering (egress.py)")
