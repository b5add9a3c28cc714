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
or not) -- and their contents (the packet, the staging's ``stage``, the partial staging's
``pstage``). The harness counts per lane the packets owed to ``o[j]``, and the relay and
partial chunks owed (the two streams are shared by the lanes and their payload names no
lane, so those are counted over all lanes). One **tracked** packet: any word taken owing
one may become it (a free choice, ``track_pick``), with the packets owed ahead of it on its
lane. One tracked chunk per shared stream: a word taken owing one while no other chunk of
that stream is owed or taken beside it (across lanes a stream's order is its grants', so
only a lone chunk has a place the harness can name; its content is still any word's).

Properties:

* stream rules: ``relay``, ``part`` and each ``o[j]``, once valid, stay valid with a stable
  payload until taken;
* nothing invented, nothing twice: each output valid only while a transfer of its kind is
  owed (taken words owe it and no transfer has paid it yet);
* nothing lost: an output whose transfers are owed idles (not valid) at most
  ``DRAIN_WAIT`` cycles in a row while its ready is high (so every owed transfer
  comes out: a word that left its lane without handing a part on leaves a debt that
  never drains);
* contents: the tracked packet, once the packets ahead of it have gone, is its lane's
  output, the packet decoded from its word (so each lane keeps its order); the tracked
  chunk is its stream's next, the chunk decoded from its word (row fields, chunk, data,
  ``drop``, ``local``);
* no hang: a word offered on lane j waits at most ``HANG_WAIT`` cycles in a row in which
  every output is ready and no lower lane offers a word (the exact bound: reached, one
  less fails). The relay and partial streams are granted to the lowest lane by fixed
  priority, by design (relay rows arrive at a fraction of the lanes' rate; partial rows
  are held back at the reduce's rate): a lower lane that offers a chunk every cycle holds
  a higher lane's back for as long as it does (a BMC without the exemption finds lane 1
  starved by lane 0's partial chunks), so those cycles are not counted.

Unbounded (k-induction, ``prove``, at k = 3: the longest bounded wait, a packet's two idle
cycles, within the induction's path; without the invariants it fails at any k): the
properties alone are not inductive (a lane register holding a word whose registered
verdict disagrees with its content, or a buffer whose pointers disagree with its level,
satisfies them until it leaves). The strengthening invariants
(:meth:`IngressHarness._invariants`) tie each lane's register (its registered verdict and
checks -- to the buffer, the relay, the partial stream, remote, the forward and relay
verdicts, the own-target mask, the partial window and owner -- as this harness decodes the
word held; the done bits only with a word held owing that part) and the buffers
(``SyncFIFOBuffered``: pointers, output register and memory words, as flops after
``memory_map``) to the reference: packets owed on lane j = the buffer's level + the held
word's packet not yet written; relay chunks owed = the output register + the held words'
chunks not yet granted; partial chunks likewise; the tracked packet at its place (in the
buffer behind ``ahead`` packets, or the held word not yet written); a tracked chunk in its
stream's output register, or in its lane's register as the only one owed.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data

from ...rtl.layouts import HubLayouts, struct
from ...rtl.relay.layouts import RelayLayouts
from ...rtl.relay.ingress import LANE_DEPTH, RelayIngress
from ...spec.formats import PacketKind, RelayFormats, RowClass
from .common import any_const, any_seq, one_hot, pick as choose
from .plant import Plant, PlantedHarness

#: the reduced config: the partial feed's (2 nodes x 3 GPUs: a rank code out of range
#: representable; 2 experts, top-2, 2 tags, 2 forward tags, 2 P tags; 3-chunk rows) on 2
#: lanes (two lanes contend for each shared stream; a third adds only more of the same)
INGRESS_SMALL = dict(lanes=2)
#: the most cycles in a row a word offered waits while every output is ready and no lower
#: lane offers a word (no hang; exact: reached at steps 3 and 6, one per lane; 0 fails): its lane's buffer full
#: (the write's room is the buffer's inner level, freed a cycle after its output is taken),
#: or a lower lane's chunk taken before holding the shared stream for a cycle
HANG_WAIT = 1
#: the most cycles in a row an output idles, ready, while transfers of its kind are owed
#: (a word's packet reaches ``o[j]`` two cycles after it is taken: the lane register,
#: then the buffer's memory before its output register; a chunk reaches its stream's
#: output register one cycle after)
DRAIN_WAIT = {"o": 2, "relay": 1, "part": 1}
#: k of the k-induction (the longest bounded wait in the induction's path), the BMC's and
#: the covers' depths (cycles from reset; every cover is reached by step 6)
PROVE_K, BMC_DEPTH, COVER_DEPTH = max(HANG_WAIT, *DRAIN_WAIT.values()) + 1, 12, 8
#: the buffers' memories as flip-flops, before their words are connected (common.memory_words)
SCRIPT = ("memory_map", "opt_clean")
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
    "unknown-source-relayed": Plant(MOD, "in_rel = i.valid & (in_cls == RowClass.RELAY) & ~in_verdict[0]",
                                    "in_rel = i.valid & (in_cls == RowClass.RELAY)", "RelayIngress",
                                    ("relay: a transfer no word owes", "relay: the tracked chunk not its word's"),
                                    "a relay chunk of an unknown source (no window, no credit) sent to the "
                                    "staging"),
    "hub-waits-relay": Plant(MOD, "buf.w_en.eq(r_v & to_hub & ~hub_done & buf.w_rdy)",
                             "buf.w_en.eq(r_v & to_hub & ~hub_done & buf.w_rdy & ~self.relay.valid)",
                             "RelayIngress", ("a hang",),
                             "a lane's packet written only while the relay output register is empty: a "
                             "lane holding a packet waits on another lane's relay chunks, though its "
                             "buffer has room"),
    "stage-lane0": Plant(MOD, "(grant[j], self.stage[j].as_value())", "(grant[j], self.stage[0].as_value())",
                         "RelayIngress", ("relay: the tracked chunk not its word's",),
                         "the relay stream's payload always lane 0's chunk, whichever lane is granted"),
    "stage-drop-gpu-only": Plant(MOD, "st.drop.eq(bg | bt)", "st.drop.eq(bg)", "RelayIngress",
                                 ("relay: the tracked chunk not its word's",),
                                 "a relay row with bad targets not marked drop for the staging"),
    "partial-owner-kept": Plant(MOD, "st.drop.eq(drop)]", "st.drop.eq(0)]", "RelayIngress",
                                ("part: the tracked chunk not its word's",),
                                "a partial chunk of an owner not served here not marked drop"),
    "own-tag-token": Plant(MOD, "own.tag.eq(rr.tag)", "own.tag.eq(rr.token)", "RelayIngress",
                           ("o: the tracked word's packet not its own",),
                           "a relay row's own packet tagged with its token, not its tag"),
}


class IngressHarness(PlantedHarness):
    """A :class:`RelayIngress` of ``cfg`` under its environment (module docstring)."""
    unit = RelayIngress
    plants = PLANTS

    def elaborate(self, platform):
        m = Module()
        cfg, L = self.cfg, self.cfg.lanes
        p, dut, regs = self.elaborate_dut(m, platform, into=tuple(f"buf{j}" for j in range(L)))
        self.fmts, self.lay, self.rlay = RelayFormats(cfg), HubLayouts(cfg), RelayLayouts(cfg)
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
        for j in range(L):
            self._stream_rule(m, p, f"o{j}", dut.o[j])
        self._stream_rule(m, p, "relay", dut.relay)
        self._stream_rule(m, p, "part", dut.part)
        # (per lane: the word taken this cycle and what it owes, decoded here)
        ins = [(dut.i[j].valid & dut.i[j].ready, *self.owes(self.decode(dut.i[j].payload, node, rank)))
               for j in range(L)]
        owed = self._reference(m, p, dut, ins)
        e = dict(node=node, rank=rank, owed=owed, ins=ins, i=[dut.i[j] for j in range(L)])
        e["pkt"] = self._track_packets(m, p, dut, e)
        e["rel"] = self._track_chunk(m, p, "relay", dut.relay, [(t & r) for t, _, r, _ in ins], self.stage_of, e)
        e["par"] = self._track_chunk(m, p, "part", dut.part, [(t & q) for t, _, _, q in ins], self.pstage_of, e)
        self._no_hang(m, p, dut)
        self._covers(p, dut, regs)
        if self.invariants:         # (off: a plant must fail on the properties themselves)
            self._invariants(m, p, dut, regs, e)
        return m

    def decode(self, word, node, rank) -> dict:
        """A lane word's class views and verdicts, decoded here from the spec
        (:func:`moehub.spec.relay.ingress`, :func:`~moehub.spec.relay.forward_verdict`,
        :meth:`~moehub.spec.relay.RelayHubModel.verdict_of`, :func:`~moehub.spec.relay.partial_verdict`)."""
        cfg, fmts = self.cfg, self.fmts
        G = cfg.node_gpus
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
        pr = data.View(struct(fmts.partial_row), word[:fmts.partial_row.width])
        p_win = (pr.sender >= G) | (pr.ptag >= cfg.partial_span)
        p_own = (pr.src_node >= cfg.nodes) | (pr.src_node == node) | (pr.src_rank != rank)
        return dict(cls=word[:2], d=d, remote=remote, f=f, f_good=~f_bs & ~f_bt, r=r, r_bs=r_bs,
                    r_bad=r_bg | r_bt, own=[v & (g == rank) for v, g, _, _ in rt], pr=pr, p_win=p_win,
                    p_own=p_own)

    @staticmethod
    def owes(k: dict):
        """What a decoded word owes: (a packet to its lane's buffer, a relay chunk, a partial
        chunk)."""
        cls = k["cls"]
        hub = Mux(cls == RowClass.DIRECT, ~k["remote"],
                  Mux(cls == RowClass.FORWARD, k["f_good"],
                      (cls == RowClass.RELAY) & ~k["r_bs"] & ~k["r_bad"] & _any(k["own"])))
        return hub, (cls == RowClass.RELAY) & ~k["r_bs"], (cls == RowClass.PARTIAL) & ~k["p_win"]

    def packet_of(self, m, k: dict, name: str):
        """The packet a decoded word owes its lane's buffer (the spec's ``Ingress.packet``):
        a direct packet's fields as they are; a forward row's as protocol v2's multicast
        packet of its original source with the forward tag; a relay row's, its entries on
        this GPU packed in the row's order."""
        cfg, G, M = self.cfg, self.cfg.node_gpus, self.cfg.max_targets
        if not cfg.multicast:
            raise ValueError("the relay input's harness assumes multicast packets (max_targets > 1)")
        d, f, r = k["d"], k["f"], k["r"]
        pd, pf, pr = (data.View(self.lay.packet, Signal(self.lay.packet.size, name=f"{name}_{c}"))
                      for c in ("direct", "fwd", "relay"))
        m.d.comb += [getattr(pd, n).eq(getattr(d, n)) for n, _ in self.lay.packet]
        for pk, row, src_node, src_rank, tag in ((pf, f, f.src_node, f.src_rank, f.ftag),
                                                 (pr, r, r.src_node, r.src_rank, r.tag)):
            m.d.comb += [pk.kind.eq(PacketKind.DATA), pk.src.eq((src_node * G + src_rank)[:cfg.src_bits]),
                         pk.tag.eq(tag), pk.token.eq(row.token), pk.chunk.eq(row.chunk), pk.count.eq(0),
                         pk.data.eq(row.data)]
        fx = [(getattr(f, f"valid{t}"), getattr(f, f"expert{t}"), getattr(f, f"slot{t}")) for t in range(M)]
        rx = []
        for t, own in enumerate(k["own"]):      # (the t-th entry on this GPU: the n-th packed)
            below = sum(k["own"][:t]) if t else Const(0)
            rx.append([(own & (below == n), getattr(r, f"expert{t}"), getattr(r, f"slot{t}")) for n in range(M)])
        for n in range(M):
            sel = [e[n] for e in rx]
            self._entry(m, pf, n, fx[n])
            self._entry(m, pr, n, (_any(v for v, _, _ in sel), _select((v, x) for v, x, _ in sel),
                                   _select((v, sl) for v, _, sl in sel)))
        cls = k["cls"]
        return Mux(cls == RowClass.DIRECT, pd.as_value(), Mux(cls == RowClass.FORWARD, pf.as_value(), pr.as_value()))

    @staticmethod
    def _entry(m, pkt, n, ent):
        v, x, s = ent
        m.d.comb += [getattr(pkt, f"valid{n}").eq(v), getattr(pkt, f"expert{n}").eq(x),
                     getattr(pkt, f"slot{n}").eq(s)]

    def stage_of(self, m, k: dict, name: str):
        """The relay chunk a decoded relay word owes (the staging's ``stage``): the row's
        fields, chunk and data, ``drop`` for a bad GPU or bad targets, ``local`` for a good
        row naming this GPU."""
        r, T = k["r"], self.cfg.relay_targets
        st = data.View(self.rlay.stage, Signal(self.rlay.stage.size, name=name))
        m.d.comb += [st.src_node.eq(r.src_node), st.src_rank.eq(r.src_rank), st.tag.eq(r.tag),
                     st.token.eq(r.token), st.chunk.eq(r.chunk), st.data.eq(r.data), st.drop.eq(k["r_bad"]),
                     st.local.eq(_any(k["own"]) & ~k["r_bad"]),
                     st.valid.eq(Cat(*(getattr(r, f"valid{t}") for t in range(T))))]
        for t in range(T):
            m.d.comb += [getattr(st, n)[t].eq(getattr(r, f"{n}{t}")) for n in ("gpu", "expert", "slot", "weight")]
        return st.as_value()

    def pstage_of(self, m, k: dict, name: str):
        """The partial chunk a decoded partial word owes (the partial staging's ``pstage``):
        its fields, ``drop`` for an owner not served here."""
        pr = k["pr"]
        st = data.View(self.rlay.pstage, Signal(self.rlay.pstage.size, name=name))
        m.d.comb += [getattr(st, n).eq(getattr(pr, n)) for n in ("sender", "ptag", "src_node", "token", "slot",
                                                                 "chunk", "data")]
        m.d.comb += st.drop.eq(k["p_own"])
        return st.as_value()

    def _stream_rule(self, m, p, name, s):
        """``s``, once valid, stays valid with its payload until taken."""
        held = Signal(name=f"env_{name}_held")
        last = Signal(s.payload.shape(), name=f"env_{name}_last")
        m.d.sync += [held.eq(s.valid & ~s.ready), last.eq(s.payload)]
        p.check(~held | (s.valid & (s.payload.as_value() == last.as_value())),
                f"{name}: a valid chunk dropped or changed before it was taken (the stream rule)", 1)

    def _reference(self, m, p, dut, ins) -> dict:
        """The transfers owed (module docstring), by output; returns the counts. (Each
        output's properties on a line of their own: a failure names its output.)"""
        L = self.cfg.lanes
        debts = {f"o{j}": [take & hub] for j, (take, hub, _, _) in enumerate(ins)}
        debts["relay"] = [take & rel for take, _, rel, _ in ins]
        debts["part"] = [take & par for take, _, _, par in ins]
        owed = {f"o{j}": self._owed(m, p, f"o{j}", dut.o[j], debts[f"o{j}"]) for j in range(L)}
        owed["relay"] = self._owed(m, p, "relay", dut.relay, debts["relay"])
        owed["part"] = self._owed(m, p, "part", dut.part, debts["part"])
        for j in range(L):
            self._drains(m, p, f"o{j}", dut.o[j], owed[f"o{j}"], DRAIN_WAIT["o"])
        self._drains(m, p, "relay", dut.relay, owed["relay"], DRAIN_WAIT["relay"])
        self._drains(m, p, "part", dut.part, owed["part"], DRAIN_WAIT["part"])
        return owed

    def _owed(self, m, p, name, s, debts):
        """Output ``s``'s transfers owed (``debts``: the words taken this cycle owing one);
        ``s`` valid only while one is."""
        owed = Signal(CNT, name=f"ref_owed_{name}")
        m.d.sync += owed.eq(owed + sum(debts) - (s.valid & s.ready))
        p.check(~s.valid | (owed != 0), f"{name}: a transfer no word owes (invented, or twice)", 1)
        return owed

    def _drains(self, m, p, name, s, owed, bound):
        """Output ``s`` idles at most ``bound`` cycles in a row with its ready high while a
        transfer is ``owed`` (nothing lost)."""
        idle = Signal(range(bound + 2), name=f"env_{name}_idle")
        m.d.sync += idle.eq(Mux((owed != 0) & s.ready & ~s.valid, idle + 1, 0))
        p.check(idle <= bound, f"{name}: owed transfers not coming out (a part lost), its ready high", 1)
        p.cover(idle == bound, f"{name}: idle with transfers owed, its ready high, DRAIN_WAIT cycles")

    def _track_packets(self, m, p, dut, e) -> dict:
        """One tracked packet: any word taken owing one (a free choice, ``track_pick``, of
        the lane ``track_lane``, while none is tracked), the packets owed ahead of it on its
        lane counted down; once none is, its lane's output carries the packet decoded here
        from the word (so every packet comes out in its lane's order, with its content)."""
        L, lw = self.cfg.lanes, self.fmts.lane_bits
        pick, lane = any_seq(m, 1, "track_pick"), any_seq(m, range(L), "track_lane")
        trk, t_lane = Signal(name="ref_tracking"), Signal(range(L), name="ref_lane")
        t_word, ahead = Signal(lw, name="ref_word"), Signal(CNT, name="ref_ahead")
        behind = Signal(name="ref_behind")              # (for a cover: packets were ahead of it)
        expect = self.packet_of(m, self.decode(t_word, e["node"], e["rank"]), "ref_packet")
        o = [dut.o[j] for j in range(L)]
        valid = choose([s.valid for s in o], t_lane)
        fire = valid & choose([s.ready for s in o], t_lane)
        p.check(~(trk & (ahead == 0) & valid) | (choose([s.payload.as_value() for s in o], t_lane) == expect),
                "o: the tracked word's packet not its own (content or the lane's order)")
        with m.If(trk):
            m.d.sync += [ahead.eq(ahead - (fire & (ahead != 0))), trk.eq(~(fire & (ahead == 0)))]
        with m.Elif(pick):
            for j, (take, hub, _, _) in enumerate(e["ins"]):
                with m.If((lane == j) & take & hub):
                    first = e["owed"][f"o{j}"] - (o[j].valid & o[j].ready)
                    m.d.sync += [trk.eq(1), t_lane.eq(j), t_word.eq(dut.i[j].payload), ahead.eq(first),
                                 behind.eq(first != 0)]
        p.cover(trk & (ahead == 0) & fire & behind, "o: the tracked packet out, taken behind others")
        return dict(trk=trk, lane=t_lane, word=t_word, ahead=ahead, expect=expect)

    def _track_chunk(self, m, p, name, s, debts, chunk_of, e) -> dict:
        """One tracked chunk of stream ``s`` (``relay`` or ``part``): a word taken owing one
        while no other chunk of the stream is owed or taken with it (a free choice,
        ``track_<name>_pick``); the stream's next chunk must be the one decoded here from
        the word. (Across lanes the stream's order is the grants', not the takes': a chunk
        taken beside others has no place the harness can name, so only a lone chunk is
        tracked -- still any word's content.)"""
        lw = self.fmts.lane_bits
        pick = any_seq(m, 1, f"track_{name}_pick")
        trk, t_lane = Signal(name=f"ref_{name}_tracking"), Signal(range(len(debts)), name=f"ref_{name}_lane")
        t_word = Signal(lw, name=f"ref_{name}_word")
        expect = chunk_of(m, self.decode(t_word, e["node"], e["rank"]), f"ref_{name}_chunk")
        p.check(~(trk & s.valid) | (s.payload.as_value() == expect),
                f"{name}: the tracked chunk not its word's (content)", 1)
        lone = (e["owed"][name] == 0) & one_hot(Cat(*debts))
        with m.If(trk):
            m.d.sync += trk.eq(~(s.valid & s.ready))
        with m.Elif(pick & lone):
            m.d.sync += [trk.eq(1), t_lane.eq(_select((dbt, j) for j, dbt in enumerate(debts))),
                         t_word.eq(_select((dbt, i.payload) for dbt, i in zip(debts, e["i"])))]
        p.cover(trk & s.valid & s.ready, f"{name}: the tracked chunk out")
        return dict(trk=trk, lane=t_lane, word=t_word, expect=expect)

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

    def _invariants(self, m, p, dut, regs, e):
        """The strengthening invariants (module docstring)."""
        L, owed = self.cfg.lanes, e["owed"]
        self.script = SCRIPT
        rel_held, par_held = [], []
        for j in range(L):
            rv, word = regs[f"r_valid{j}"], regs[f"r_word{j}"]
            to_rel, to_par, to_hub = regs[f"to_rel{j}"], regs[f"to_par{j}"], regs[f"to_hub{j}"]
            hub_done, rel_done = regs[f"hub_done{j}"], regs[f"rel_done{j}"]
            k = self.decode(word, e["node"], e["rank"])
            hub, rel, par = self.owes(k)
            p.check(~rv | ((to_hub == hub) & (to_rel == rel) & (to_par == par)),
                    "invariant: a lane's registered verdict is not its word's")
            p.check(~rv | self._checks_of(regs, j, k), "invariant: a lane's registered checks are not its word's")
            p.check(rv | ~(to_rel | to_par | hub_done | rel_done), "invariant: an empty lane owes something")
            p.check(~hub_done | to_hub, "invariant: a packet written that its word does not owe")
            p.check(~rel_done | to_rel, "invariant: a relay chunk sent that its word does not owe")
            entries, level, fifo_ok = self.fifo(m, regs, f"buf{j}", LANE_DEPTH, self.lay.packet.size)
            p.check(fifo_ok, "invariant: a buffer's pointers are not consume + inner_level")
            pending = rv & to_hub & ~hub_done
            p.check(owed[f"o{j}"] == level + pending,
                    "invariant: a lane's packets owed are not its buffer's and its held word's")
            self._tracked_packet(p, e["pkt"], j, entries, level, pending, word)
            rel_held.append(rv & to_rel & ~rel_done)
            par_held.append(rv & to_par)
        p.check(owed["relay"] == dut.relay.valid + sum(rel_held),
                "invariant: the relay chunks owed are not the output register's and the lanes'")
        p.check(owed["part"] == dut.part.valid + sum(par_held),
                "invariant: the partial chunks owed are not the output register's and the lanes'")
        for name, s, held in (("relay", dut.relay, rel_held), ("part", dut.part, par_held)):
            t = e["rel" if name == "relay" else "par"]
            at = Cat(*(regs[f"r_word{j}"] == t["word"] for j in range(L)))
            p.check(~t["trk"] | Mux(s.valid, s.payload.as_value() == t["expect"],
                                    (owed[name] == 1) & choose(held, t["lane"]) & choose(list(at), t["lane"])),
                    f"invariant: the tracked {name} chunk neither in the output register nor its lane's "
                    "(then the only one owed)")

    @staticmethod
    def _checks_of(regs, j, k):
        """The lane's registered checks agree with its word's decode (the packet and the
        chunks it hands on are built from them)."""
        fwd_bad = regs[f"fwd_bad_source{j}"] | regs[f"fwd_bad_targets{j}"]
        rel_bad = regs[f"relay_bad_gpu{j}"] | regs[f"relay_bad_targets{j}"]
        return (regs[f"remote{j}"] == k["remote"]) & (fwd_bad == ~k["f_good"]) \
            & (regs[f"relay_bad_source{j}"] == k["r_bs"]) & (rel_bad == (~k["r_bs"] & k["r_bad"])) \
            & (regs[f"rloc{j}"] == Cat(*k["own"])) & (regs[f"partial_bad_window{j}"] == k["p_win"]) \
            & (regs[f"partial_bad_owner{j}"] == k["p_own"])

    @staticmethod
    def _tracked_packet(p, t, j, entries, level, pending, word):
        """The tracked packet on lane ``j``: behind ``ahead`` packets owed, in its buffer
        (the packet decoded from its word) or the lane's held word, not yet written."""
        in_buf = choose([d for _, d in entries], t["ahead"]) == t["expect"]
        p.check(~(t["trk"] & (t["lane"] == j)) | Mux(t["ahead"] < level, in_buf,
                                                     (t["ahead"] == level) & pending & (word == t["word"])),
                "invariant: the tracked packet not at its place in its lane's buffer or register")


def _any(terms):
    """Any of ``terms`` (1-bit values; none: 0)."""
    return Cat(Const(0, 1), *terms).any()


def _select(pairs):
    """AND-OR select of ``(select, value)`` pairs (at most one select set; none: 0)."""
    out = Const(0, 1)
    for sel, v in pairs:
        out = out | Mux(sel, v, 0)
    return out


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
    under load (~2.7): k-induction k=3 3-5 s (k = 1 and 2 fail on the drain bounds' windows;
    without the invariants it fails at k = 6 too), BMC 12 21-28 s, the covers within 8 steps
    5 s (reached at steps 3-6); each planted bug fails a BMC within 6 steps in 2-4 s."""
    return dict(name="relay-input", component="relay input",
                config="tiny/ingress-small: 2 nodes x 3 GPUs, 2 lanes, 2 experts, top-2, 2 tags, 2 forward "
                       "tags, 2 P tags",
                build=lambda: IngressHarness(small_config()),
                modes={"prove": PROVE_K, "bmc": BMC_DEPTH, "cover": COVER_DEPTH}, smoke={"prove": PROVE_K},
                note="protocol v3: every word taken on a lane hands on exactly what it owes (decoded "
                     "here from the spec) -- its packet to its lane's buffer, in the lane's order, its "
                     "relay chunk, its partial chunk, with their contents -- each once, nothing invented, "
                     "nothing lost; the relay, partial and lane outputs keep the stream rules; a word "
                     "offered taken within 1 cycle with every output ready and no lower lane offering "
                     "(fixed priority: a lower lane's chunks every cycle hold a higher lane's back); "
                     "k-induction closes at k=3 with the lane registers and buffers against the "
                     "reference (ingress.py)")
