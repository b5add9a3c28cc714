"""Property harness of the relay hub's input (:class:`moehub.rtl.relay.ingress.RelayIngress`):
each lane's word handed on to what it owes -- a packet to its lane's buffer (``o[j]``), a
chunk to the relay stream, a chunk to the partial stream, or nothing -- each once, and no
word held back.

Environment: words of any content on every lane at any time, ``i[j].valid`` free (the
lane's ready never looks at its valid, so a word offered may be withdrawn before it is
taken); ``o[j].ready``, ``relay.ready`` and ``part.ready`` free; ``node`` and ``rank``
constants of the config (the NODE_ID and LOCAL_RANK registers, written before START).

Reference (the harness's own decode of each word taken, written from
:func:`moehub.spec.relay.ingress` and its verdicts, not from the RTL's registered checks):
what the word owes -- a packet to ``o[j]`` (a direct packet but another node's GPU's data
row, a good forward row, a good relay row naming this GPU), a relay chunk (a relay row of a
known source, good or not), a partial chunk (a partial row inside the P window, good owner
or not). The harness counts per lane the packets owed to ``o[j]``, and the relay and
partial chunks owed (the two streams are shared by the lanes and their payload names no
lane, so those are counted over all lanes).

Properties:

* stream rules: ``relay``, ``part`` and each ``o[j]``, once valid, stay valid with a stable
  payload until taken;
* nothing invented, nothing twice: each output valid only while a transfer of its kind is
  owed (taken words owe it and no transfer has paid it yet);
* nothing lost: an output whose transfers are owed idles (not valid) at most
  ``DRAIN_WAIT`` cycles in a row while its ready is high (so every owed transfer
  comes out: a word that left its lane without handing a part on leaves a debt that
  never drains);
* no hang: a word offered on lane j waits at most ``HANG_WAIT`` cycles in a row in which
  every output is ready and no lower lane offers a word (the exact bound: reached, one
  more is not). The relay and partial streams are granted to the lowest lane by fixed
  priority, by design (relay rows arrive at a fraction of the lanes' rate; partial rows
  are held back at the reduce's rate): a lower lane that keeps offering chunks holds a
  higher lane's back for as long as it does, so those cycles are not counted.

Unbounded (k-induction, ``prove``): the properties alone are not inductive (a lane
register holding a word whose registered verdict disagrees with its content, or a buffer
whose pointers disagree with its level, satisfies them until it leaves). The
strengthening invariants (:meth:`IngressHarness._invariants`) tie each lane's register
(its registered verdict: to the relay, to the partial stream, to the buffer, as this
harness decodes the word held; the done bits only with a word held and owing that part)
and the buffers' pointers to the reference: packets owed on lane j = the buffer's level +
the held word's packet not yet written; relay chunks owed = the output register + the
held words' relay chunks not yet granted; partial chunks likewise.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data

from ...rtl.layouts import struct
from ...rtl.relay.ingress import LANE_DEPTH, RelayIngress
from ...spec.formats import PacketKind, RelayFormats, RowClass
from .common import any_const, any_seq
from .plant import Plant, PlantedHarness

#: the reduced config: the partial feed's (2 nodes x 3 GPUs: a rank code out of range
#: representable; 2 experts, top-2, 2 tags, 2 forward tags, 2 P tags; 3-chunk rows) on 2
#: lanes (two lanes contend for each shared stream; a third adds only more of the same)
INGRESS_SMALL = dict(lanes=2)
#: the most cycles in a row a word offered waits while every output is ready and no lower
#: lane offers a word (no hang; exact: reached, one more is not)
HANG_WAIT = 1
#: the most cycles in a row an output idles, ready, while transfers of its kind are owed
#: (a word's packet reaches ``o[j]`` two cycles after it is taken: the lane register,
#: then the buffer's memory before its output register; a chunk reaches its stream's
#: output register one cycle after)
DRAIN_WAIT = {"o": 2, "relay": 1, "part": 1}
#: k of the k-induction (the longest window, the no-hang's, in the induction's path), the
#: BMC's and the covers' depths (cycles from reset)
PROVE_K, BMC_DEPTH, COVER_DEPTH = HANG_WAIT + 2, 12, 10
#: widths of the harness's counts (at most LANE_DEPTH + 1 per lane, lanes + 1 a stream)
CNT = 4

MOD = "moehub.rtl.relay.ingress"
#: planted bugs (each a one-place edit of the input's source, in memory)
PLANTS = {
    "room-ignored": Plant(MOD, "with m.If(rel_room):", "with m.If(1):", "RelayIngress",
                          ("relay: a valid chunk dropped or changed before it was taken",),
                          "the relay output register refilled while its chunk still waits: the chunk "
                          "overwritten"),
    "grant-every-lane": Plant(MOD, "m.d.comb += [ok[j].eq(grant[j] & ready) for j in range(L)]",
                              "m.d.comb += [ok[j].eq(want[j] & ready) for j in range(L)]", "RelayIngress",
                              ("relay: owed transfers not coming out", "part: owed transfers not coming out",
                               "relay: a transfer no word owes", "part: a transfer no word owes"),
                              "every lane that wants a shared stream counts as sent, not only the lowest: "
                              "two lanes leave, one chunk goes out"),
    "relay-part-skipped": Plant(MOD, "& (~to_rel | rel_done | rel_fire)", "& (1 | rel_done | rel_fire)",
                                "RelayIngress", ("relay: owed transfers not coming out",),
                                "a lane leaves without its relay chunk handed on (once its packet is "
                                "written): the chunk lost"),
    "hub-written-twice": Plant(MOD, "m.d.sync += hub_done.eq(1)", "m.d.sync += hub_done.eq(0)",
                               "RelayIngress", ("o0: a transfer no word owes", "o1: a transfer no word owes"),
                               "a word's packet not marked written: written again each cycle its relay "
                               "chunk waits"),
    "unknown-source-relayed": Plant(MOD, "in_rel = i.valid & (i.payload[:2] == RowClass.RELAY) & ~in_verdict[0]",
                                    "in_rel = i.valid & (i.payload[:2] == RowClass.RELAY)", "RelayIngress",
                                    ("relay: a transfer no word owes",),
                                    "a relay chunk of an unknown source (no window, no credit) sent to the "
                                    "staging"),
    "hub-waits-relay": Plant(MOD, "buf.w_en.eq(r_v & to_hub & ~hub_done & buf.w_rdy)",
                             "buf.w_en.eq(r_v & to_hub & ~hub_done & buf.w_rdy & ~self.relay.valid)",
                             "RelayIngress", ("a hang",),
                             "a lane's packet written only while the relay output register is empty: a "
                             "lane holding a packet waits on another lane's relay chunks, though its "
                             "buffer has room"),
}


class IngressHarness(PlantedHarness):
    """A :class:`RelayIngress` of ``cfg`` under its environment (module docstring)."""
    unit = RelayIngress
    plants = PLANTS

    def elaborate(self, platform):
        m = Module()
        cfg, L = self.cfg, self.cfg.lanes
        p, dut, regs = self.elaborate_dut(m, platform, into=tuple(f"buf{j}" for j in range(L)))
        self.fmts = RelayFormats(cfg)
        # ---- environment
        node = any_const(m, cfg.node_bits, "node")
        rank = any_const(m, cfg.gpu_bits, "rank")
        p.assume(node < cfg.nodes)
        p.assume(rank < cfg.node_gpus)
        m.d.comb += [dut.node.eq(node), dut.rank.eq(rank)]
        for j in range(L):
            m.d.comb += [dut.i[j].valid.eq(any_seq(m, 1, f"i{j}_valid")),
                         dut.i[j].payload.eq(any_seq(m, self.fmts.lane_bits, f"i{j}_payload")),
                         dut.o[j].ready.eq(any_seq(m, 1, f"o{j}_ready"))]
        for s in ("relay", "part"):
            m.d.comb += getattr(dut, s).ready.eq(any_seq(m, 1, f"{s}_ready"))
        outs = {f"o{j}": dut.o[j] for j in range(L)}
        outs.update(relay=dut.relay, part=dut.part)
        for name, s in outs.items():
            self._stream_rule(m, p, name, s)
        owed = self._reference(m, p, dut, node, rank, outs)
        self._no_hang(m, p, dut)
        self._covers(p, dut, regs)
        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(p, dut, regs, node, rank, owed)
        return m

    def owes(self, word, node, rank):
        """What a lane word owes, decoded here from the spec (:func:`moehub.spec.relay.ingress`
        and its verdicts): (a packet to its lane's buffer, a relay chunk, a partial chunk)."""
        cfg, fmts = self.cfg, self.fmts
        G = cfg.node_gpus
        cls = word[:2]
        d = data.View(struct(fmts.direct), word[:fmts.direct.width])
        remote = (d.kind == PacketKind.DATA) & (d.src < cfg.sources) & (d.src // G != node)
        f = data.View(struct(fmts.forward_row), word[:fmts.forward_row.width])
        f_bs = (f.fwd >= G) | (f.fwd == rank) | (f.ftag >= cfg.forward_tags) | (f.src_node >= cfg.nodes) \
            | (f.src_node == node) | (f.src_rank != f.fwd)
        fx = [(getattr(f, f"valid{t}"), getattr(f, f"expert{t}")) for t in range(cfg.max_targets)]
        f_bt = ~Cat(*(v for v, _ in fx)).any() | _any(v & (x >= cfg.experts) for v, x in fx) \
            | _any(va & vb & (xa == xb) for a, (va, xa) in enumerate(fx) for vb, xb in fx[a + 1:])
        r = data.View(struct(fmts.relay_row), word[:fmts.relay_row.width])
        r_bs = (r.src_node >= cfg.nodes) | (r.src_node == node) | (r.src_rank != rank) \
            | (r.tag >= cfg.tags_per_source)
        rt = [tuple(getattr(r, f"{k}{t}") for k in ("valid", "gpu", "expert", "slot"))
              for t in range(cfg.relay_targets)]
        r_bg = _any(v & (g >= G) for v, g, _, _ in rt)
        pairs = [(a, b) for n, a in enumerate(rt) for b in rt[n + 1:]]
        r_bt = ~Cat(*(t[0] for t in rt)).any() | _any(v & (x >= cfg.experts) for v, _, x, _ in rt) \
            | _any(v & (s >= cfg.topk) for v, _, _, s in rt) \
            | _any(a[0] & b[0] & (a[1] == b[1]) & (a[2] == b[2]) for a, b in pairs) \
            | _any(a[0] & b[0] & (a[3] == b[3]) for a, b in pairs)
        r_own = _any(v & (g == rank) for v, g, _, _ in rt)
        pr = data.View(struct(fmts.partial_row), word[:fmts.partial_row.width])
        p_win = (pr.sender >= G) | (pr.ptag >= cfg.partial_span)
        hub = Mux(cls == RowClass.DIRECT, ~remote,
                  Mux(cls == RowClass.FORWARD, ~f_bs & ~f_bt,
                      (cls == RowClass.RELAY) & ~r_bs & ~r_bg & ~r_bt & r_own))
        return hub, (cls == RowClass.RELAY) & ~r_bs, (cls == RowClass.PARTIAL) & ~p_win

    def _stream_rule(self, m, p, name, s):
        """``s``, once valid, stays valid with its payload until taken."""
        held = Signal(name=f"env_{name}_held")
        last = Signal(s.payload.shape(), name=f"env_{name}_last")
        m.d.sync += [held.eq(s.valid & ~s.ready), last.eq(s.payload)]
        p.check(~held | (s.valid & (s.payload.as_value() == last.as_value())),
                f"{name}: a valid chunk dropped or changed before it was taken (the stream rule)", 1)

    def _reference(self, m, p, dut, node, rank, outs) -> dict:
        """The transfers owed (module docstring), their properties; returns the counts."""
        L = self.cfg.lanes
        owed = {name: Signal(CNT, name=f"ref_owed_{name}") for name in outs}
        debts = {name: [] for name in outs}
        for j in range(L):
            hub, rel, par = self.owes(dut.i[j].payload, node, rank)
            take = dut.i[j].valid & dut.i[j].ready
            debts[f"o{j}"].append(take & hub)
            debts["relay"].append(take & rel)
            debts["part"].append(take & par)
        for name, s in outs.items():
            fire = s.valid & s.ready
            m.d.sync += owed[name].eq(owed[name] + sum(debts[name]) - fire)
            p.check(~s.valid | (owed[name] != 0), f"{name}: a transfer no word owes (invented, or twice)")
            bound = DRAIN_WAIT["o" if name.startswith("o") else name]
            idle = Signal(range(bound + 2), name=f"env_{name}_idle")
            m.d.sync += idle.eq(Mux((owed[name] != 0) & s.ready & ~s.valid, idle + 1, 0))
            p.check(idle <= bound, f"{name}: owed transfers not coming out (a part lost), its ready high")
            p.cover(idle == bound, f"{name}: idle with transfers owed, its ready high, DRAIN_WAIT cycles")
        return owed

    def _no_hang(self, m, p, dut):
        """A word offered waits at most HANG_WAIT cycles in a row with every output ready
        and no lower lane offering one (module docstring)."""
        L = self.cfg.lanes
        ready = Cat(dut.relay.ready, dut.part.ready, *(dut.o[j].ready for j in range(L))).all()
        for j in range(L):
            free = ready & ~Cat(Const(0, 1), *(dut.i[k].valid for k in range(j))).any()
            wait = Signal(range(HANG_WAIT + 2), name=f"env_wait{j}")
            m.d.sync += wait.eq(Mux(free & dut.i[j].valid & ~dut.i[j].ready, wait + 1, 0))
            p.check(wait <= HANG_WAIT, "a word held back more than HANG_WAIT cycles in a row with every "
                                       "output ready and no lower lane offering (a hang)")
            p.cover(wait == HANG_WAIT, f"lane {j}: a word held back HANG_WAIT cycles in a row, every "
                                       "output ready")

    def _covers(self, p, dut, regs):
        """The interesting states are reached (none of the properties holds vacuously)."""
        L = self.cfg.lanes
        rel_fire = dut.relay.valid & dut.relay.ready
        par_fire = dut.part.valid & dut.part.ready
        p.cover(rel_fire & par_fire, "a relay and a partial chunk out in one cycle")
        p.cover(Cat(*(dut.o[j].valid & dut.o[j].ready for j in range(L))).all() & rel_fire,
                "every lane's packet and a relay chunk out in one cycle")
        for j in range(L):
            p.cover(regs[f"buf{j}.level"] == LANE_DEPTH, f"lane {j}: its buffer full")
            p.cover(regs[f"hub_done{j}"] & regs[f"r_valid{j}"], f"lane {j}: a packet written, its relay "
                                                                  "chunk still waiting")
        p.cover(regs["rel_done1"] & ~regs["hub_done1"] & regs["r_valid1"],
                "lane 1: a relay chunk sent, its packet still waiting")

    def _invariants(self, p, dut, regs, node, rank, owed):
        """The strengthening invariants (module docstring)."""
        L = self.cfg.lanes
        rel_held, par_held = [], []
        for j in range(L):
            rv, word = regs[f"r_valid{j}"], regs[f"r_word{j}"]
            to_rel, to_par, to_hub = regs[f"to_rel{j}"], regs[f"to_par{j}"], regs[f"to_hub{j}"]
            hub_done, rel_done = regs[f"hub_done{j}"], regs[f"rel_done{j}"]
            hub, rel, par = self.owes(word, node, rank)
            p.check(~rv | ((to_hub == hub) & (to_rel == rel) & (to_par == par)),
                    "invariant: a lane's registered verdict is not its word's")
            p.check(rv | ~(to_rel | to_par | hub_done | rel_done), "invariant: an empty lane owes something")
            p.check(~hub_done | to_hub, "invariant: a packet written that its word does not owe")
            p.check(~rel_done | to_rel, "invariant: a relay chunk sent that its word does not owe")
            fifo_ok = _fifo_ok(regs, f"buf{j}", LANE_DEPTH)
            p.check(fifo_ok, "invariant: a buffer's pointers are not consume + inner_level")
            p.check(owed[f"o{j}"] == regs[f"buf{j}.level"] + (rv & to_hub & ~hub_done),
                    "invariant: a lane's packets owed are not its buffer's and its held word's")
            rel_held.append(rv & to_rel & ~rel_done)
            par_held.append(rv & to_par)
        p.check(owed["relay"] == dut.relay.valid + sum(rel_held),
                "invariant: the relay chunks owed are not the output register's and the lanes'")
        p.check(owed["part"] == dut.part.valid + sum(par_held),
                "invariant: the partial chunks owed are not the output register's and the lanes'")


def _any(terms):
    """Any of ``terms`` (1-bit values; none: 0)."""
    return Cat(Const(0, 1), *terms).any()


def _fifo_ok(regs, name: str, depth: int):
    """A ``SyncFIFOBuffered``'s pointer invariant (its memory's words not needed: its
    output register's stability is its own; :func:`.common.fifo_entries` with the words)."""
    D = depth - 1
    r_rdy, inner = regs[f"{name}.r_rdy"], regs[f"{name}.inner_level"]
    cons, prod = regs[f"{name}.consume"], regs[f"{name}.produce"]
    return (inner <= D) & (r_rdy | (inner <= 1)) & (cons < D) & (prod < D) & Cat(
        (cons == c) & (inner == n) & (prod == (c + n) % D) for c in range(D) for n in range(D + 1)).any()


def small_config():
    """The reduced config of the input's property set (:data:`INGRESS_SMALL` on the partial
    feed's ``tiny/partial-small``)."""
    from .partial import small_config as partial_small
    return partial_small().replace(name="tiny/ingress-small", **INGRESS_SMALL)


def property_set() -> dict:
    """The relay input's property set, as :class:`~.sets.PropertySet`'s fields (sets.py
    lists it; kept here so that file holds one line of it). Measured on the 2-core machine
    under load: (to be measured)."""
    return dict(name="relay-input", component="relay input",
                config="tiny/ingress-small: 2 nodes x 3 GPUs, 2 lanes, 2 experts, top-2, 2 tags, 2 forward "
                       "tags, 2 P tags",
                build=lambda: IngressHarness(small_config()),
                modes={"prove": PROVE_K, "bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"prove": PROVE_K},
                note="protocol v3: every word taken on a lane hands on exactly what it owes (decoded "
                     "here from the spec) -- its packet to its lane's buffer, its relay chunk, its partial "
                     "chunk -- each once, nothing invented, nothing lost; the relay, partial and lane "
                     "outputs keep the stream rules; a word offered taken within HANG_WAIT cycles with "
                     "every output ready and no lower lane offering (ingress.py)")
