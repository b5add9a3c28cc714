"""Runtime packet manager: per-lane packet handling, the row rules and address translation.

Seven stages -- A, R, T, AL, RI, B, OUT -- each a few gate levels deep, one *group* of up
to ``lanes`` packets per stage. The pipeline never stalls:
every stage register loads every cycle, so no enable fans out across it. Back-pressure
acts only at the input, by reservation (:class:`~moehub.rtl.reservations.InputReservations`):
a group is accepted only when every packet in flight is sure to find room for its write,
its event and its credit. Each stage is a method below; it hands the next stage one
record per lane (a ``data.StructLayout`` of :class:`StageLayouts`), and the state the
stages keep lives in small components:
:class:`~moehub.rtl.chunk_table.ChunkTable` (rows in flight, with R's read registers and
W), :class:`~moehub.rtl.eos_tracker.EosTracker` (per-source end of stream),
:class:`~moehub.rtl.write_buffer.LaneWriteBuffer` (per lane) and the row-info table (RI).

* **A** -- input registers, with everything that depends on the packets alone decoded on
  the way in: range checks, the table index, the chunk's one-hot bit, and the lane-pair
  comparisons (same row, same source, same expert; same row as the groups ahead); the
  chunk table's read select, a one-hot of the index (the table's ``q_sel``).
* **R** -- each lane's chunk-table entry as the groups ahead leave it: read in A by an
  AND-OR with the one-hot (no index bit fans out to every entry), or the newer write-back
  that read misses -- of the group right ahead (in T, written at the end of this cycle)
  or of the one before it (W, pending). The bypass from T is the only path from T back
  into R.
* **T** -- every rule of the hub, applied to the lanes *as if in lane order* (lane 0
  first), written as parallel prefix logic rather than a chain of lanes: the first chunk
  of a row (any index, any lane) opens it; duplicate, protocol and end-of-stream rules;
  row completion (all chunks in). T decides the chunk table's write-back and the
  end-of-stream summary of its group, and asks the allocator for the rows it opened.
  (The write-back is registered in the chunk table, *W*, and written a cycle later: off
  T's loop, and not a stage of the packet's path.)
* **AL** -- the :class:`AddressAllocator` grants rows to the rows T opened (lane order;
  overflow refused); each lane's expert region base is looked up, and its row-info entry
  taken: read a stage early (with R's one-hot index, registered in ``q_info``), or the grant of
  the group ahead (in RI, writing the table in this cycle) or of the one before it (its
  write, kept a cycle in ``ri_*``, came as the entry was read) where they opened the row.
* **RI** -- row-info table (granted row, allocated or dropped) per (source, tag): openers
  write it, later chunks take what AL read, or the grant of their opener in the same
  group. Per-row events (metadata write, completion), credits, and the two parts of the
  address (``region_base[e] + chunk * chunk_bytes`` and ``row * row_stride``) are formed.
* **B** -- events and credits enter their queues in lane order; the address parts are
  added; each lane's write completes its slot in the lane's write buffer
  (``WRITE_FIFO_DEPTH`` slots).
* **OUT** -- the head of each lane's write buffer is the lane's ``wr`` port.

Latency: a packet accepted in cycle *t* is written out in cycle *t+6* (``WRITE_LATENCY``)
when its FIFO is empty; its row's events enter the event queue in cycle *t+5*.

Bad input (see :class:`~moehub.spec.formats.Reason`), each counted in ``drops`` and in the
sticky ``errors``; nothing else changes and no other row is touched:

* packet while no layer is armed (before START, after the layer ended, after reset): dropped;
* source >= sources or tag >= tags_per_source: packet dropped (the table is not touched);
* chunk >= chunks_per_row: packet dropped;
* first chunk with expert >= experts: the row is opened as *dropped* (BAD_EXPERT) -- its
  later chunks are absorbed and its credit is returned when all chunks are in;
* first chunk of a row when the source's end-of-stream count is already reached: the row
  is opened as dropped (POST_EOS) and does not count toward the source's rows;
* first chunk when the expert's region is full: row opened as dropped (OVERFLOW), also
  counted per expert;
* a chunk whose bit is already set (or whose row completed earlier in the same group):
  dropped as DUPLICATE; a chunk whose expert differs from the row's: dropped as PROTOCOL;
* a second end-of-stream from a source: ignored, EOS_DUPLICATE; an end-of-stream count
  smaller than the rows already opened by that source: EOS_MISMATCH (the rows stay);
* FLUSH (CSR) or the watchdog (TIMEOUT idle cycles): rows in flight are dropped as
  INCOMPLETE (their tiles are never flagged), the tables are cleared, and the layer ends.

The protocol-v2 variations are strategy objects chosen once when the packet manager is
built (:mod:`moehub.rtl.pm_features`): how a row names its experts and where its data
lands (:mod:`~moehub.rtl.pm_features.rows`: static regions, paged regions, multicast rows
in the arena) and count packets (:mod:`~moehub.rtl.pm_features.counts`). The stages below
call their hooks; a feature a config does not have adds nothing. Where a feature changes
what the input takes: with multicast rows, while the allocator is tight on room, a
group's lanes up to its second data packet; with count packets, a group's lanes up to its
first count packet (:meth:`PacketManager._admission`).

A layer is *finished* when every source's end-of-stream has arrived, its count is reached
and no row is open (a row opened past its source's count, dropped, holds the layer open
until it completes, or until the watchdog flushes it); every later group is dropped as
NOT_ARMED, and once the pipeline has drained the packet manager asks the tracker for the
end-of-layer sweep.
"""
import functools
import operator

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from .chunk_table import ChunkTable, onehot_mux
from .eos_tracker import EosTracker, dist_shape
from ..spec.formats import Reason, config_reasons
from .interfaces import (layer_csr_signature, layer_handshake_signature, layer_status_signature,
                         ordering_guard_signature, push_ranks, queue_push_signature, take_copies)
from .layouts import HubLayouts
from .logic import (SplitDifference, add_narrow, any_of as _any, count_binary, exactly, lane_bits as _lanes,
                    newest_of, popcount, register_copies, select, times_const)
from .pm_features.counts import count_feature
from .pm_features.rows import row_feature
from .reservations import InputReservations
from ..spec.timing import GROUP_AGE_LIMIT, GROUP_BITS, WRITE_FIFO_DEPTH
from .write_buffer import LaneWriteBuffer

#: Reasons T finds (per lane, registered for the statistics).
T_REASONS = (Reason.NOT_ARMED, Reason.BAD_SOURCE, Reason.BAD_CHUNK, Reason.BAD_EXPERT,
             Reason.POST_EOS, Reason.PROTOCOL, Reason.DUPLICATE, Reason.EOS_DUPLICATE)


def _or(a, b):
    """``a | b``; ``a`` when ``b`` is None (a term of a feature the hub does not have: its
    netlist stays as it was)."""
    return a if b is None else a | b


class StageLayouts:
    """The record each stage hands the next, one per lane.

    Pairwise fields (``same_*``, ``row``, ``fwd``) hold in bit ``i`` of lane ``j``'s record
    the relation of lane ``i < j`` to lane ``j``; ``hit`` and ``hit2`` in bit ``k`` that of
    lane ``k`` of the group one or two ahead (same row). Adding a field is local: declare it here,
    drive it in the stage that forms it, read it in the next. The features' fields come
    from their strategies (``rows``, ``counts``: :mod:`moehub.rtl.pm_features`).
    """

    def __init__(self, cfg: HubConfig, rows, counts):
        lay = HubLayouts(cfg)
        L, N, C = cfg.lanes, cfg.entries, cfg.chunks_per_row
        #: ``count - opened - k`` candidates of an EOS lane: k up to 5 x lanes (2 lags and
        #: the group ahead (3L), the openers n of its own group (L), and the signs of
        #: p_evec[n] - k' - 1 (k' < L)).
        self.nk = 5 * L + 1
        carried = {"valid": 1, "pkt": lay.packet, "slot": range(WRITE_FIFO_DEPTH), "idx": range(N)}
        checks = {"bad_src": 1, "bad_chunk": 1, "bad_exp": 1, "oh": C}
        #: A: the packets decoded on the way in.
        self.a = data.StructLayout({
            **carried, **checks, "same_idx": L, "same_src": L, "same_exp": L, "same_chunk": L,
            "hit": L, "hit2": L, "psel_in": L + 1, "src_oh": cfg.sources, **rows.a_fields()})
        #: R: what of T's rules depends on the packets alone (data / EOS lane, first and last
        #: lane on its row, the expert of a row opened in the group), and the EOS arithmetic.
        #: (The table entries read are the chunk table's registers.)
        self.r = data.StructLayout({
            **carried, **checks, "same_idx": L, "same_src": L, "same_exp": L, "same_chunk": L, "row": L,
            # (the chunk one-hots of the group's data lanes on the row, lanes up to this one:
            # T's "row full" compares start at a register, not at `row`'s fan-out into a
            # chunks-wide OR)
            "ohs": C,
            "d": 1, "eos": 1, "first": 1, "last": 1, "match_new": 1, "eos_prior": 1,
            "dec": data.ArrayLayout(dist_shape(cfg), self.nk), "lag": 2 * L + 1,
            "src_oh": cfg.sources, **counts.r_fields(), **rows.r_fields()})
        #: T's verdicts (``valid``: an effect downstream; ``pv``: a packet, for reservations).
        self.t = data.StructLayout({
            **carried, "pv": 1, "opener": 1, "setb": 1, "comp": 1, "post": 1, "bad_exp": 1,
            **rows.t_request_fields(), "same_exp": L,
            "hit": L, "hit2": L, **counts.t_fields(), **rows.t_tail_fields()})
        #: AL: the grant (the row's fields: the strategy's), the region base, the
        #: row-info entry read.
        self.al = data.StructLayout({
            **carried, "pv": 1, "opener": 1, "setb": 1, "comp": 1, "ok": 1, "ovf": 1,
            **rows.al_row_fields(), "fwd": L, "base": cfg.addr_bits, "info": lay.row_info,
            **counts.al_fields(), **rows.al_tail_fields()})
        #: B: the address parts, the event and the credit.
        self.b = data.StructLayout({
            "valid": 1, "pv": 1, "pre": cfg.addr_bits, "place": cfg.addr_bits,
            "slot": range(WRITE_FIFO_DEPTH), "ev_valid": 1, "ev": lay.event, "ev_rank": L,
            "cr_valid": 1, "cr": lay.credit, "cr_rank": L})
        #: T's reasons, per lane (bit j).
        self.reasons = data.StructLayout({r.name.lower(): L for r in T_REASONS})


class PacketManager(wiring.Component):
    """The packet manager (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig

    Attributes
    ----------
    i : In(stream.Signature(packet)).array(lanes)
        Input lanes (one ready for all).
    wr : Out(stream.Signature(write)).array(lanes)
        Data writes, one port per lane.
    ev, cr : Out(queue_push_signature(event / credit, lanes))
        Per-row events to the event queue; credits to the credit queue.
    alloc : Out(allocation_signature)
        Row requests to the allocator.
    region_base : In(addr_bits).array(experts)
        From the CSRs.
    csr : In(layer_csr_signature)
        START, FLUSH, CLEAR_ERRORS strobes and the watchdog timeout.
    tracker : Out(layer_handshake_signature)
        Layer start and end with the tracker.
    guard : Out(ordering_guard_signature)
        Where the data writes are (the tracker's ordering guard).
    status : Out(layer_status_signature)
        For the CSRs.
    layer_done : Out(1)
        One-cycle pulse when the tracker has written the layer-done word.
    (features)
        The ports of the config's features: :meth:`~moehub.rtl.pm_features.counts.
        CountPackets.ports` (``sweep_short``), :meth:`~moehub.rtl.pm_features.rows.
        PagedRows.ports`, :meth:`~moehub.rtl.pm_features.rows.MulticastRows.ports`.
    """

    def __init__(self, cfg: HubConfig, formal: bool = False):
        self.cfg, self.formal = cfg, formal
        self.lay = lay = HubLayouts(cfg)
        # the protocol-v2 variations, chosen once
        self.rows, self.counts = rows, counts = row_feature(self), count_feature(self)
        self.stages = StageLayouts(cfg, rows, counts)
        #: copies of B's event valid and rank bits for the event queue's takes (1: none)
        self.ev_copies = take_copies(cfg)
        L = cfg.lanes
        super().__init__({
            # (the property harness, verif/formal: two data lanes on one row in R read
            # chunk-table entries that disagree on ``open`` -- T's row-full relies on it)
            **({"formal_open_split": Out(1)} if formal else {}),
            "i": In(stream.Signature(lay.packet)).array(L),
            "wr": Out(stream.Signature(lay.write)).array(L),
            "ev": Out(queue_push_signature(lay.event, L, self.ev_copies)),
            "cr": Out(queue_push_signature(lay.credit, L)),
            "alloc": Out(rows.alloc_signature()),
            "region_base": In(cfg.addr_bits).array(cfg.experts),
            "csr": In(layer_csr_signature()),
            "tracker": Out(layer_handshake_signature()),
            "guard": Out(ordering_guard_signature(cfg)),
            "status": Out(layer_status_signature(cfg)),
            "layer_done": Out(1),
            **counts.ports(), **rows.ports(counts),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, st, L = self.cfg, self.stages, self.cfg.lanes
        m.submodules.table = self.table = ChunkTable(cfg)
        m.submodules.eos = self.eos = EosTracker(cfg)
        m.submodules.reserve = self.reserve = InputReservations(cfg)
        self.wbuf = [LaneWriteBuffer(cfg, j) for j in range(L)]
        for j, buf in enumerate(self.wbuf):
            m.submodules[f"wbuf{j}"] = buf
        # The row-info table, flops (``rowinfo<e>``): written by one-hot decodes of AL's
        # indices registered a stage ahead (``al_dec``), so an entry's next value is an
        # AND-OR behind registers, not an index compare and a mux per write port.
        self.rowinfo = Array(Signal(self.lay.row_info, name=f"rowinfo{e}", reset_less=True)
                             for e in range(cfg.entries))
        self.al_dec = [Signal(cfg.entries, name=f"al_dec{j}") for j in range(L)]
        # Stage registers, one record per lane.
        self.a, self.r, self.t, self.al, self.b = (
            [Signal(getattr(st, s), name=f"{s}{j}") for j in range(L)] for s in ("a", "r", "t", "al", "b"))
        self.group = Signal(GROUP_BITS, name="group")
        # The row-info entry each lane of T reads, and RI's writes of the cycle before.
        self.q_info = [Signal(self.lay.row_info, name=f"q_info{j}") for j in range(L)]
        self.ri_wen = [Signal(name=f"ri_wen{j}") for j in range(L)]
        self.ri_data = [Signal(self.lay.row_info, name=f"ri_data{j}") for j in range(L)]
        self._layer_state(m)
        self._accept(m)
        self._stage_a(m)
        self._stage_r(m)
        self._stage_t(m)
        self._stage_al(m)
        self._stage_ri(m)
        self._stage_b(m)
        self._statistics(m)
        self._layer_control(m)
        return m

    # ---------------------------------------------------------------- layer state, input
    def _layer_state(self, m):
        """The layer's control registers (driven by :meth:`_layer_control`), and whether
        it is finished / live (read by T)."""
        for name in ("armed", "done", "start_pending", "flush_pending", "flush_timeout",
                     "sweep_req", "start_go", "flush_go"):
            setattr(self, name, Signal(name=name))
        self.finished, self.live = Signal(name="finished"), Signal(name="live")
        eos = self.eos
        m.d.comb += [
            self.finished.eq(~self.table.rows_open & eos.done.all()),
            self.live.eq(self.armed & ~self.finished),
        ]

    def _accept(self, m):
        """Input handshake: a group is accepted when the reservations have room and no
        layer command is pending. Owns nothing (the counts are :class:`InputReservations`')."""
        L, res = self.cfg.lanes, self.reserve
        self.block = Signal(name="block")
        m.d.comb += self.block.eq(self.start_pending | self.flush_pending | self.tracker.clearing)
        ready = Signal(name="ready")
        m.d.comb += ready.eq(res.room & ~self.block)
        admit = self._admission(m)
        for j in range(L):
            m.d.comb += self.i[j].ready.eq(ready & admit[j])
        valid = Cat(self.i[j].valid for j in range(L))
        self.acc = Signal(L, name="acc")
        m.d.comb += self.acc.eq(valid & Cat(*(ready & admit[j] for j in range(L))))
        self.accepted = Signal(name="accepted")
        m.d.comb += self.accepted.eq(ready & valid.any())      # (ready last)
        # A write still waiting in a lane's buffer also holds the input back once it is
        # GROUP_AGE_LIMIT groups old, so that the group ids the tracker's ordering guard
        # compares (modulo 2**GROUP_BITS) stay within half the id space.
        guard = self.guard
        young = Signal(name="young")
        m.d.comb += young.eq(Cat(~guard.c_busy[j] | ((self.group - guard.c_group[j])[:GROUP_BITS] < GROUP_AGE_LIMIT)
                                 for j in range(L)).all())
        # (the reservations count the lanes that would be taken: the admitted valid ones)
        m.d.comb += [res.acc.eq(self.acc), res.valid.eq(valid & Cat(*admit)), res.ready.eq(ready),
                     res.young.eq(young),
                     res.ev_popped.eq(self.ev.pop), res.cr_popped.eq(self.cr.pop)]
        m.d.comb += [res.pop[j].eq(self.wbuf[j].pop) for j in range(L)]

    def _admission(self, m):
        """Per lane, whether the input may take it: a prefix of the lanes (so the lanes'
        sources see the same order), every lane unless a feature holds it for the next
        group (``input_waits``: with multicast rows, while the allocator is tight on room,
        a data packet with one ahead of it in the group; with count packets, every lane
        behind a count packet).

        From a register and the packets' kinds only: no field is decoded in front of
        ``ready``."""
        L = self.cfg.lanes
        waits = [w for w in (self.rows.input_waits(m), self.counts.input_waits(m)) if w is not None]
        if not waits:
            return [Const(1)] * L
        held = [Const(0)] * L                       # lane j waits for the next group
        for wait in waits:
            held = [h | wait[j] if j else h for j, h in enumerate(held)]
        admit = [Signal(name=f"in_admit{j}") for j in range(L)]
        m.d.comb += [admit[j].eq(~held[j]) for j in range(L)]
        for j in range(1, L):
            admit[j] = admit[j] & admit[j - 1]
        return admit

    # ---------------------------------------------------------------- A
    def _stage_a(self, m):
        """A: input registers, decoded (reads the input lanes, A and R of the groups ahead,
        the EOS tracker's ``opened`` and ``p_sel``); each packet's data goes straight into
        its lane's write buffer."""
        cfg, L = self.cfg, self.cfg.lanes
        S, C, Tg = cfg.sources, cfg.chunks_per_row, cfg.tags_per_source
        self.ecnt = []
        for j in range(L):
            q, a, buf = self.i[j].payload, self.a[j], self.wbuf[j]
            m.d.comb += [buf.load.eq(self.i[j].valid & self.reserve.room), buf.data.eq(q.data),
                         buf.take.eq(self.acc[j])]
            # (the chunk table's one-hot read select is decoded from the input's index)
            idx = Signal(range(cfg.entries), name=f"in_idx{j}")
            m.d.comb += [idx.eq(q.src * Tg + q.tag), self.table.rd_idx[j].eq(idx)]
            is_data = self.counts.kinds(q.kind)[0]
            m.d.sync += [
                a.valid.eq(self.acc[j]), a.pkt.eq(q), a.slot.eq(buf.slot),
                a.bad_src.eq((q.src >= S) | (is_data & (q.tag >= Tg))),
                a.bad_chunk.eq(is_data & (q.chunk >= C)),
                a.bad_exp.eq(self.rows.bad_dests(m, q, j)),
                a.idx.eq(idx),
                a.oh.eq(Const(1, C) << q.chunk),
            ]
            self.rows.a_lane(m, j, a)
            for i in range(j):
                qi = self.i[i].payload
                m.d.sync += [a.same_idx[i].eq((qi.src == q.src) & (qi.tag == q.tag)),
                             a.same_src[i].eq(qi.src == q.src),
                             a.same_exp[i].eq(self.rows.dest_key(qi) == self.rows.dest_key(q)),
                             a.same_chunk[i].eq(qi.chunk == q.chunk)]
            for k in range(L):
                ahead, ahead2 = self.a[k].pkt, self.r[k].pkt
                m.d.sync += [a.hit[k].eq((q.src == ahead.src) & (q.tag == ahead.tag)),
                             a.hit2[k].eq((q.src == ahead2.src) & (q.tag == ahead2.tag))]
            # For an end-of-stream: count - opened - k for every small k (R's `dec`), with
            # `opened` up to the group four ahead of it (the register when the EOS comes
            # in), and the openers of the two groups between folded in later by one-hots.
            # On the way into A, count - opened in its low bits (SplitDifference: the low
            # difference for every source side by side, then chosen by the input's source
            # one-hot, so the source select does not sit in front of the subtraction); in R, the high bits and every k (from registers only), and the sum
            # of the openers of the groups three and two ahead (p_sel then and now) as a
            # one-hot (`lag`). T adds the openers of the group right ahead and picks.
            src_in = Signal(S, name=f"in_src_oh{j}")
            m.d.comb += src_in.eq(Cat(q.src == s for s in range(S)))
            self.ecnt.append(SplitDifference(m, q.count, [(src_in[s], self.eos.opened[s]) for s in range(S)],
                                             dist_shape(cfg).width, (self.stages.nk - 1).bit_length(),
                                             f"a_ecnt{j}"))
            # (the source one-hot, decoded on the way in: p_sel is chosen by an AND-OR)
            m.d.sync += [a.psel_in.eq(Array(self.eos.p_sel)[q.src]),
                         a.src_oh.eq(src_in)]
        self.counts.stage_a(m)

    # ---------------------------------------------------------------- R
    def _stage_r(self, m):
        """R: the chunk table read (the table's registers, with the bypass from T and W)
        and what of T's rules depends on the packets alone. Reads A; owns nothing."""
        L, A, R, tab = self.cfg.lanes, self.a, self.r, self.table
        kinds = [self.counts.kinds(a.pkt.kind) for a in A]
        a_d = [a.valid & k[0] & ~a.bad_src & ~a.bad_chunk for a, k in zip(A, kinds)]
        a_eos = [a.valid & k[1] & ~a.bad_src for a, k in zip(A, kinds)]
        self.counts.stage_r(m, kinds)

        def a_row(i, j):                    # lane i is a data lane on lane j's row
            return a_d[i] & A[j].same_idx[i]
        a_first = [a_d[j] & ~_any(a_row(i, j) for i in range(j)) for j in range(L)]
        # (R's index as a one-hot: the row-info table is read with it, in R)
        self.r_sel = [Signal(self.cfg.entries, name=f"r_sel{j}") for j in range(L)]
        m.d.sync += [self.r_sel[j].eq(Const(1, self.cfg.entries) << a.idx) for j, a in enumerate(A)]
        for j, (a, r) in enumerate(zip(A, R)):
            m.d.comb += [tab.expert[j].eq(self.rows.dest_key(a.pkt)),
                         tab.hit[j].eq(a.hit), tab.hit2[j].eq(a.hit2)]
            m.d.sync += [
                r.valid.eq(a.valid), r.pkt.eq(a.pkt), r.slot.eq(a.slot), r.idx.eq(a.idx),
                r.bad_src.eq(a.bad_src), r.bad_chunk.eq(a.bad_chunk), r.bad_exp.eq(a.bad_exp),
                r.oh.eq(a.oh), r.same_idx.eq(a.same_idx), r.same_src.eq(a.same_src), r.same_exp.eq(a.same_exp),
                r.same_chunk.eq(a.same_chunk), r.src_oh.eq(a.src_oh),
                r.row.eq(Cat(a_row(i, j) for i in range(j))),
                r.ohs.eq(functools.reduce(operator.or_, [Mux(a_row(i, j), A[i].oh, 0) for i in range(j)], a.oh)),
                r.d.eq(a_d[j]), r.eos.eq(a_eos[j]), r.first.eq(a_first[j]),
                r.last.eq(a_d[j] & ~_any(a_d[n] & A[n].same_idx[j] for n in range(j + 1, L))),
                r.match_new.eq(~_any(a_row(i, j) for i in range(j))
                               | _any(a_first[i] & a_row(i, j) & a.same_exp[i] for i in range(j))),
                r.eos_prior.eq(_any(a_eos[i] & a.same_src[i] for i in range(j))),
            ]
            self._r_eos_candidates(m, j)
            self.rows.r_lane(m, a, r)

    def _r_eos_candidates(self, m, j):
        """R's EOS arithmetic for lane j: the lag one-hot and ``count - opened - k``."""
        L, S = self.cfg.lanes, self.cfg.sources
        a, r, ecnt = self.a[j], self.r[j], self.ecnt[j]
        psel_a = Signal(L + 1, name=f"a_psel{j}")
        m.d.comb += psel_a.eq(select([(a.src_oh[s], self.eos.p_sel[s]) for s in range(S)], L + 1))
        m.d.sync += [r.lag[t].eq(_any(a.psel_in[b] & psel_a[t - b]
                                      for b in range(max(0, t - L), min(t, L) + 1)))
                     for t in range(2 * L + 1)]
        m.d.sync += [r.dec[k].eq(ecnt.select_minus(m, [(Const(1), k)], f"a_ecnt{j}_m{k}"))
                     for k in range(self.stages.nk)]

    # ---------------------------------------------------------------- T
    def _stage_t(self, m):
        """T: the rules (reads R, the chunk table's read registers and the EOS tracker;
        decides the table's write-back and the EOS summary, asks for rows)."""
        v = self._t_rows(m)
        self._t_eos(m, v)
        self._t_write_back(m, v)
        self._t_summary(m, v)
        self._t_register(m, v)

    def _t_rows(self, m):
        """Row rules: opener, duplicate, protocol, completion, per lane (as in lane order)."""
        L, C, R, tab = self.cfg.lanes, self.cfg.chunks_per_row, self.r, self.table
        names = ("opener", "match", "full_before", "protocol", "dup", "setb", "comp", "stored_bit")
        v = {n: [Signal(name=f"{n}{j}") for j in range(L)] for n in names}
        v["bits_before"] = [Signal(C, name=f"bits_before{j}") for j in range(L)]
        for j, r in enumerate(R):
            ent = tab.ent[j]
            m.d.comb += [v["opener"][j].eq(r.first & ~ent.open),
                         v["stored_bit"][j].eq(ent.open & (ent.bitmap & r.oh).any()),
                         # the row's expert: the stored one, or its first lane's in this group
                         v["match"][j].eq(Mux(ent.open, tab.exp_eq[j], r.match_new))]
        v["full_if"] = {}                         # (j, lane j adds): full after lanes <= j
        for j in range(L):
            self._t_row_lane(m, v, j)
        if self.formal:
            m.d.comb += self.formal_open_split.eq(_any(
                R[j].d & R[j].row[i] & (tab.ent[i].open != tab.ent[j].open) for j in range(L) for i in range(j)))
        return v

    def _t_row_lane(self, m, v, j):
        """Lane j's row verdicts. Whether its row is full (all chunks in) after some of the
        lanes up to j add their chunk, without ORing the late verdicts into a chunks-wide
        bitmap first: ``base`` (registers only) says the row would be full if every lane
        on it up to j added its chunk; then each such lane's chunk must really be in --
        stored already, added by itself, or by another adding lane with the same chunk.
        Formed for an open row and for a closed one (:meth:`_t_full_if`), chosen by the
        entry's ``open`` last: the lanes on a row read one entry, so ``open`` is the same
        for all of them, and it then drives a mux per lane rather than every lane's
        ``match`` in front of the AND trees of the lanes after it (at 8 lanes that fan-out
        led the chunk table's bypass loop: 22.7 FO4 on b200-nvlink5)."""
        R, ent = self.r, self.table.ent[j]
        r, match, stored_bit = R[j], v["match"], v["stored_bit"]
        full_open, full_closed = self._t_full_if(m, j, True), self._t_full_if(m, j, False)
        for own in (0, 1):
            full = v["full_if"][j, own] = Signal(name=f"row_full{j}_{own}")
            m.d.comb += full.eq(Mux(ent.open, full_open[own], full_closed[own]))
        adds = [r.row[i] & match[i] for i in range(j)]
        # Chunks already in (for the write-back bitmap): the stored bitmap, plus earlier
        # lanes of the group on this row (a duplicate sets a bit that is already set; a
        # protocol error none).
        earlier = 0
        for i in range(j):
            earlier = earlier | Mux(adds[i], R[i].oh, 0)
        # (whether this lane's own chunk is in: the stored bit, or an earlier lane's)
        own_in = stored_bit[j] | _any(adds[i] & r.same_chunk[i] for i in range(j))
        d, opener, full_before = r.d, v["opener"][j], v["full_before"][j]
        protocol, dup = v["protocol"][j], v["dup"][j]
        m.d.comb += [
            v["bits_before"][j].eq(Mux(ent.open, ent.bitmap, 0) | earlier),
            full_before.eq(v["full_if"][j, 0]),
            protocol.eq(d & ~opener & ~full_before & ~match[j]),
            dup.eq(d & ~opener & (full_before | (match[j] & own_in))),
            v["setb"][j].eq(d & ~protocol & ~dup),
            v["comp"][j].eq(v["setb"][j] & v["full_if"][j, 1]),
        ]

    def _t_full_if(self, m, j, is_open: bool) -> list:
        """Lane j's row full after the lanes up to j add their chunks (``[own 0, own 1]``:
        lane j's own chunk not added / added), if the row's entry is open (``is_open``) or
        closed: open, a lane on the row adds when its expert is the stored one and the
        stored bitmap counts; closed, when its expert is the row's first lane's in this
        group, and nothing is stored."""
        C, R, tab = self.cfg.chunks_per_row, self.r, self.table
        r, ent, all_chunks = R[j], tab.ent[j], (1 << C) - 1
        tag = "o" if is_open else "c"

        def row(i):                               # lane i is a data lane on lane j's row
            return r.row[i]

        def same_chunk(i, k):
            return R[max(i, k)].same_chunk[min(i, k)]
        # (r.ohs: the chunks of this group's lanes on the row, up to this one)
        base = Signal(name=f"full_base{j}{tag}")
        m.d.comb += base.eq(((ent.bitmap | r.ohs) if is_open else r.ohs) == all_chunks)
        adds = [row(i) & (tab.exp_eq[i] if is_open else R[i].match_new) for i in range(j)]
        stored = [(ent.bitmap & R[i].oh).any() if is_open else Const(0) for i in range(j + 1)]
        out = []
        for own in (0, 1):
            c = adds + [Const(own)]
            terms = []
            for i in range(j + 1):
                covered = c[i] | stored[i] | _any(c[k] & same_chunk(i, k) for k in range(j + 1) if k != i)
                terms.append(covered if i == j else (~row(i) | covered))
            full = Signal(name=f"full{j}_if{own}{tag}")
            m.d.comb += full.eq(base & Cat(*terms).all())
            out.append(full)
        return out

    def _t_eos(self, m, v):
        """End-of-stream rules. An EOS takes effect at the end of the group (rows opened in
        the same group still count). Whether an opener comes after its source's count is a
        small compare from registers: ``dist <= k``, k = the source's earlier openers in the
        group. (``opened`` counts every opener, post-EOS ones too: the condition is
        monotone, so counting them changes no outcome.)"""
        L, S, R, eos = self.cfg.lanes, self.cfg.sources, self.r, self.eos
        v["seen_before"] = [Signal(name=f"seen_before{j}") for j in range(L)]
        v["post"] = [Signal(name=f"post{j}") for j in range(L)]
        for j, r in enumerate(R):
            # (the source's state chosen by R's source one-hot, an AND-OR: no decoder of
            # the source number in front of T's verdicts; a bad source chooses nothing)
            seen_src = Signal(name=f"seen_src{j}")
            m.d.comb += seen_src.eq((r.src_oh & eos.seen).any())
            m.d.comb += v["seen_before"][j].eq(seen_src | r.eos_prior)
            earlier_openers = [v["opener"][i] & r.same_src[i] for i in range(j)]
            dle_src = Signal(L, name=f"dle_src{j}")
            m.d.comb += dle_src.eq(select([(r.src_oh[s], eos.le[s]) for s in range(S)], L))
            m.d.comb += v["post"][j].eq(~r.bad_exp & seen_src & Cat(
                exactly(earlier_openers, k) & dle_src[k] for k in range(j + 1)).any())

    def _t_write_back(self, m, v):
        """The last data lane on each row leaves the row's entry to the chunk table (W)
        and to the bypass into R."""
        C, R, tab = self.cfg.chunks_per_row, self.r, self.table
        m.d.comb += tab.live.eq(self.live)
        for k, r in enumerate(R):
            ent, match = tab.ent[k], v["match"][k]
            openers = [(R[i].first & r.same_idx[i], i) for i in range(k)]
            key = self.rows.dest_key
            expert = Mux(ent.open, ent.expert, onehot_mux(
                [(sel, key(R[i].pkt)) for sel, i in openers], key(r.pkt)))
            # (the same select over each candidate's compare with A's keys, for R's bypass)
            for j, a in enumerate(self.a):
                a_key = key(a.pkt)
                m.d.comb += tab.after_eq[j][k].eq(Mux(ent.open, ent.expert == a_key, onehot_mux(
                    [(sel, key(R[i].pkt) == a_key) for sel, i in openers], key(r.pkt) == a_key)))
            bits = Signal(C, name=f"bits_after{k}")
            # (a duplicate's bit is already set and a protocol error's does not match, so
            # the bitmap needs neither verdict: off the duplicate/completion logic)
            m.d.comb += bits.eq(v["bits_before"][k] | Mux(r.d & match, r.oh, 0))
            after = Signal(self.lay.chunk_entry, name=f"t_after{k}")
            m.d.comb += [
                after.open.eq(~Mux(match, v["full_if"][k, 1], v["full_if"][k, 0])),
                after.expert.eq(expert), after.bitmap.eq(bits),
                tab.after[k].eq(after), tab.last[k].eq(r.last), tab.idx[k].eq(r.idx),
                tab.idx_oh[k].eq(self.r_sel[k]),
            ]

    def _t_summary(self, m, v):
        """The group's summary per source for the EOS tracker: the openers' count (one-hot),
        the EOS lane (at most one per source) and the distance after it for each count."""
        cfg, L, R, eos = self.cfg, self.cfg.lanes, self.r, self.eos
        ds = dist_shape(cfg)
        shifted, ahead_les = [], []
        for j, r in enumerate(R):
            # count - opened after the group ahead (its source's p_sel, b of them, added to
            # the lag one-hot), minus n for each count n of openers in its own group; and
            # whether that is <= k (k < L): the sign of the value k + 1 further on. The lag
            # one-hot's candidates are chosen first, from R's registers alone (ahead[v]:
            # dec[t + v] for the lag t), so that p_sel, the late one-hot, only picks among
            # them: a dec of (lag + b + n) is ahead[b + n].
            # (named signals, here and below: an unnamed expression is walked whole by every
            # statement that reads it, and nvl72's 72-source select is read by thousands)
            psel_t = Signal(L + 1, name=f"t_psel{j}")
            m.d.comb += psel_t.eq(select([(r.src_oh[s], eos.p_sel[s]) for s in range(cfg.sources)], L + 1))
            ahead = [Signal(ds, name=f"t_ahead{j}_{v}") for v in range(2 * L + 1)]
            ahead_le = [None] + [Signal(name=f"t_ahead_le{j}_{v}") for v in range(1, 3 * L + 1)]
            m.d.comb += [ahead[v].eq(select([(r.lag[t], r.dec[t + v]) for t in range(2 * L + 1)], ds))
                         for v in range(2 * L + 1)]
            m.d.comb += [ahead_le[v].eq(_any(r.lag[t] & r.dec[t + v][-1] for t in range(2 * L + 1)))
                         for v in range(1, 3 * L + 1)]
            sh = [Signal(ds, name=f"t_shifted{j}_{n}") for n in range(L + 1)]
            m.d.comb += [sh[n].eq(select([(psel_t[b], ahead[b + n]) for b in range(L + 1)], ds))
                         for n in range(L + 1)]
            shifted.append(sh)
            ahead_les.append(ahead_le)
        # (each lane's EOS values go to the EOS tracker as they are; it picks a source's)
        m.d.comb += [eos.nxt_cnt[j].eq(R[j].pkt.count) for j in range(L)]
        m.d.comb += [eos.nxt_evec[j][n].eq(shifted[j][n]) for j in range(L) for n in range(L + 1)]
        for s in range(cfg.sources):
            src_openers = [v["opener"][j] & R[j].src_oh[s] for j in range(L)]
            sel_n = [Signal(name=f"n_open{s}_is{n}") for n in range(L + 1)]
            m.d.comb += [sel_n[n].eq(exactly(src_openers, n)) for n in range(L + 1)]
            # (lane j's EOS is accepted for source s: an EOS of s, none ahead of it in the
            # group, and s's EOS not seen before -- an accepted EOS with the source known, so
            # seen is s's own bit, not read through the lane's source; and it gates last)
            eos_new = [R[j].eos & ~R[j].eos_prior & R[j].src_oh[s] for j in range(L)]
            not_seen = ~eos.seen[s]
            eos_sel = [Signal(name=f"eos_sel{s}_{j}") for j in range(L)]
            m.d.comb += [eos_sel[j].eq(eos_new[j] & not_seen) for j in range(L)]
            # (gated by ``armed``, not ``live``: a finished layer has every EOS in, so
            # ``not_seen`` is 0 already, and openers counted past it keep every source's
            # count reached -- the condition is monotone -- so the layer stays finished
            # until START clears the tracker. That keeps the tracker's 72 x (lanes + 1)
            # selects off ``finished``'s fan-out, whose AND over the sources starts at
            # these very registers.)
            m.d.comb += [
                eos.nxt_sel[s].eq(Mux(self.armed, Cat(*sel_n), 1)),
                eos.nxt_eos[s].eq(self.armed & not_seen & Cat(*eos_new).any()),
                eos.nxt_lane[s].eq(Cat(*eos_sel)),
            ]
            # (whether the EOS's distance after the group ahead is <= i -- after n openers of
            # its own group, <= k is i = n + k: the sign i + 1 further on, shifted by the
            # openers b of the group ahead. The EOS lane of s is chosen first,
            # from R's registers; then s's own p_sel -- the lane's source is s -- picks b:
            # the late one-hot passes one AND-OR, with no 72-source select in front of it)
            pick_le = [None] + [Signal(name=f"eos_le{s}_{v}") for v in range(1, 3 * L + 1)]
            m.d.comb += [pick_le[v].eq(_any(eos_new[j] & ahead_les[j][v] for j in range(L)))
                         for v in range(1, 3 * L + 1)]
            m.d.comb += [eos.nxt_le[s][i].eq(
                not_seen & _any(eos.p_sel[s][b] & pick_le[b + i + 1] for b in range(L + 1)))
                for i in range(2 * L)]

    def _t_register(self, m, v):
        """T's output registers (and its reasons, for the statistics); the row requests
        to the allocator, from them."""
        L, live = self.cfg.lanes, self.live
        R, T = self.r, self.t
        reasons = {
            Reason.NOT_ARMED: [r.valid & ~live for r in R],
            Reason.BAD_SOURCE: [live & r.valid & r.bad_src for r in R],
            Reason.BAD_CHUNK: [live & r.valid & ~r.bad_src & r.bad_chunk for r in R],
            Reason.BAD_EXPERT: [live & _or(v["opener"][j], self.counts.r_cnt(r)) & r.bad_exp for j, r in enumerate(R)],
            Reason.POST_EOS: [live & v["opener"][j] & v["post"][j] for j in range(L)],
            Reason.PROTOCOL: [live & x for x in v["protocol"]],
            Reason.DUPLICATE: [live & x for x in v["dup"]],
            Reason.EOS_DUPLICATE: [live & r.eos & v["seen_before"][j] for j, r in enumerate(R)],
        }
        self.t_reasons = Signal(self.stages.reasons, name="t_reasons")
        m.d.sync += [getattr(self.t_reasons, r.name.lower()).eq(Cat(*hits)) for r, hits in reasons.items()]
        reqs = self.t_reqs = [Signal(name=f"t_req{j}") for j in range(L)]
        m.d.comb += [reqs[j].eq(live & v["opener"][j] & ~r.bad_exp & ~v["post"][j]) for j, r in enumerate(R)]
        for j, (r, t) in enumerate(zip(R, T)):
            self.rows.t_lane(m, j, r, t, reqs[j])
            m.d.sync += [
                t.valid.eq(live & _or(r.d | r.eos, self.counts.r_cnt(r))), t.pv.eq(r.valid),
                t.opener.eq(live & v["opener"][j]), t.setb.eq(live & v["setb"][j]),
                t.comp.eq(live & v["comp"][j]), t.post.eq(v["post"][j]), t.bad_exp.eq(r.bad_exp),
                t.pkt.eq(r.pkt), t.slot.eq(r.slot), t.idx.eq(r.idx), t.same_exp.eq(r.same_exp),
                # (the row request, formed here: the allocator starts at registers)
                t.req.eq(reqs[j]),
                # lane i opened lane j's row in this group
                t.fwd.eq(Cat(v["opener"][i] & r.same_idx[i] for i in range(j))),
                # lane j's row is the row of lane k of the group ahead (for the row-info read
                # in AL, whose table that group writes in the same cycle)
                t.hit.eq(Cat(r.idx == T[k].idx for k in range(L))),
                # ... of lane k of the group two ahead (in AL now: it writes the table as the
                # entry is read, below)
                t.hit2.eq(Cat(r.idx == self.al[k].idx for k in range(L))),
            ]
            # (the row-info entry, read with R's one-hot index and registered: AL's bypass
            # then starts from a register, not behind the entries-to-one read)
            m.d.sync += self.q_info[j].eq(select([(self.r_sel[j][e], self.rowinfo[e])
                                                  for e in range(self.cfg.entries)], self.lay.row_info))
            self.rows.t_lane_gate(m, j, r, t, reqs[j])
            self.counts.t_lane(m, v, j, r, t)
        self.req = Signal(L, name="req")
        self.rows.t_requests(m, v)

    # ---------------------------------------------------------------- AL
    def _stage_al(self, m):
        """AL: the allocator's grants, the region base, the row-info entry (read a stage
        early, or the grant of a group ahead that wrote it since). Reads T; owns nothing."""
        T, AL = self.t, self.al
        for j, (t, al) in enumerate(zip(T, AL)):
            m.d.sync += [
                al.valid.eq(t.valid), al.pv.eq(t.pv), al.opener.eq(t.opener), al.setb.eq(t.setb),
                al.comp.eq(t.comp), al.ok.eq(self.alloc.ok[j]),
                # (refused for room; not for counts: COUNT_MISMATCH)
                al.ovf.eq(self.counts.ovf(self.req[j] & ~self.alloc.ok[j], j)),
                al.pkt.eq(t.pkt), al.slot.eq(t.slot), al.idx.eq(t.idx),
                # (the expert's region base, looked up here: RI only adds the chunk offset)
                al.base.eq(self.rows.base(t)),
                al.fwd.eq(t.fwd),
                self.al_dec[j].eq(Const(1, self.cfg.entries) << t.idx),
            ]
            self.rows.al_lane(m, j, t, al)
            self.counts.al_lane(m, j, t, al)
            self.rows.al_page(m, j, al)
            # (newest first: the group right ahead writes the table now, the one before it
            # wrote it as the entry was read; at most one lane of a group opens the row)
            m.d.sync += al.info.eq(newest_of(
                [[(t.hit[k] & AL[k].opener, self.rows.grant_info(AL[k])) for k in range(len(AL))],
                 [(t.hit2[k] & self.ri_wen[k], self.ri_data[k]) for k in range(len(AL))]],
                self.q_info[j], self.lay.row_info))

    # ---------------------------------------------------------------- RI
    def _stage_ri(self, m):
        """RI: the row-info table written by openers and read through AL; events, credits
        and the address parts for B. Owns the pipeline group counter."""
        cfg, AL, B = self.cfg, self.al, self.b
        # Address translation in four steps: the region base (AL); the chunk offset and,
        # apart, the row's place (here); place * stride (B, into the write buffer's slot
        # beside base + chunk offset); their sum (the write buffer, per slot).
        chunk_shift = cfg.chunk_bytes.bit_length() - 1
        # (base + chunk offset: the chunk's few bits added at the shift, the bits above +1
        # beside them, chosen by the carry -- as a full add the carry chain from the chunk
        # to the top address bit was 511 ps at N5 on ASAP7, mixtral-8gpu, over the
        # 1.98 GHz cycle)
        pre = [Cat(al.base[:chunk_shift], add_narrow(al.base[chunk_shift:], al.pkt.chunk)) for al in AL]
        # (the place of every row a lane may take -- its own grant, an earlier lane's, the
        # stored one -- and then the choice; the multiply waits for a register in B: behind
        # the choice here it was the deepest stage of the paged hubs, AL -> B 24.6 FO4 at
        # deepseek-v3-8gpu, x 14336 being a subtract of two shifted copies)
        own_pl = [Signal(cfg.addr_bits, name=f"own_place{j}") for j in range(cfg.lanes)]
        info_pl = [Signal(cfg.addr_bits, name=f"info_place{j}") for j in range(cfg.lanes)]
        m.d.comb += [own_pl[j].eq(self.rows.place(al)) for j, al in enumerate(AL)]
        m.d.comb += [info_pl[j].eq(self.rows.place(al.info)) for j, al in enumerate(AL)]
        allocated, ev_valid = [], []
        for j, (al, b) in enumerate(zip(AL, B)):
            p = al.pkt
            info = Signal(self.lay.row_info, name=f"info{j}")
            own = self.rows.grant_info(al)   # row_info layout order: alloc, row, ...
            m.d.comb += info.eq(Mux(al.opener, own, newest_of(
                [[(al.fwd[i], self.rows.grant_info(AL[i])) for i in range(j)]], al.info, self.lay.row_info)))
            # (an earlier lane's place by one AND-OR -- at most one lane opens the row --
            # not a chain of a mux per lane)
            row_pl = Mux(al.opener, own_pl[j], newest_of(
                [[(al.fwd[i], own_pl[i]) for i in range(j)]], info_pl[j], cfg.addr_bits))
            allocated.append(info.alloc)
            # (kept a cycle: the row-info read of the group two behind misses this write)
            m.d.sync += [self.ri_wen[j].eq(al.opener), self.ri_data[j].eq(own)]
            ev_v = Signal(name=f"ri_ev_valid{j}")
            m.d.comb += ev_v.eq(_or((al.opener & al.ok) | (al.comp & info.alloc), self.counts.al_cnt(al)))
            self.counts.ri_event(m, b, al)
            self.rows.ri_event(m, b, info)
            m.d.sync += self.rows.event_targets(b.ev, p, info)
            ev_valid.append(ev_v)
            m.d.sync += [
                b.valid.eq(al.setb & info.alloc), b.pv.eq(al.pv),
                b.pre.eq(pre[j]), b.place.eq(row_pl), b.slot.eq(al.slot),
                b.ev_valid.eq(ev_v), b.ev.complete.eq(al.comp), b.ev.row.eq(info.row),
                b.ev.src.eq(p.src), b.ev.token.eq(p.token), b.ev.group.eq(self.group),
                b.cr_valid.eq(al.comp), b.cr.src.eq(p.src), b.cr.tag.eq(p.tag),
            ]
        self._row_info_write(m)
        # (the queues' one-hot ranks of this group's events and credits, registered with them)
        # (init 1: no entry, a one-hot from reset on -- the queues rotate their write pointer by it)
        self.b_ev_count = Signal(cfg.lanes + 1, name="b_ev_count", init=1)
        self.b_cr_count = Signal(cfg.lanes + 1, name="b_cr_count", init=1)
        for valid, field, count in ((ev_valid, "ev_rank", self.b_ev_count),
                                    (_lanes(AL, "comp"), "cr_rank", self.b_cr_count)):
            rank, n = push_ranks(valid)
            m.d.sync += [getattr(b, field).eq(rank[j]) for j, b in enumerate(B)]
            m.d.sync += count.eq(n)
        if self.ev_copies > 1:
            self._event_take_copies(m, ev_valid)
        self.b_group = Signal(GROUP_BITS, name="b_group")
        m.d.sync += [self.group.eq(self.group + 1), self.b_group.eq(self.group)]
        # (counted here, so that the input reservations add registers only)
        # (each lane's row-info grant bit for the count as a flat priority select of the
        # forwarding lanes -- the newest forwarding lane wins, as in onehot_mux -- not the
        # chain of muxes; the count as one-hot levels, not an adder tree)
        alloc_flat = []
        for j, al in enumerate(AL):
            fwd_ok = _any(al.fwd[i] & ~_any(al.fwd[i2] for i2 in range(i + 1, j)) & AL[i].ok for i in range(j))
            alloc_flat.append(Mux(al.opener, al.ok, Mux(_any(al.fwd[i] for i in range(j)), fwd_ok, al.info.alloc)))
        self.b_no_ev = Signal(range(cfg.lanes + 1), name="b_no_ev")
        self.b_no_cr = Signal(range(cfg.lanes + 1), name="b_no_cr")
        m.d.sync += [
            self.b_no_ev.eq(count_binary(al.pv & ~_or((al.opener & al.ok) | (al.comp & alloc_flat[j]),
                                                      self.counts.al_cnt(al))
                                         for j, al in enumerate(AL))),
            self.b_no_cr.eq(popcount(al.pv & ~al.comp for al in AL)),
        ]

    def _event_take_copies(self, m, ev_valid):
        """(Multicast: :func:`~.interfaces.take_copies`) B's event valid and rank bits for
        the event queue's takes, once per half of its entries (``push.take_valid``,
        ``push.take_rank``), registered from the same next values as B's by
        :func:`~.logic.register_copies` (``zero_at_reset``: equal to B's in every cycle):
        the first half reads the plain copy, which synthesis merges with B's register, the
        second the inverted copy, which it keeps apart.

        Lane 0's rank is 1 whenever its valid is (no slot comes before it), so B's register
        of it is a constant loaded at reset, which synthesis merges with every such register
        of the packet manager (a flop with hundreds of loads): both halves read its
        inverted copy."""
        n, L = self.ev_copies, self.cfg.lanes
        rank, _ = push_ranks(ev_valid)
        valid = register_copies(m, Cat(*ev_valid), n, "b_ev_valid_copy", zero_at_reset=True)
        # (lane j's rank has j + 1 bits that can be set: the others are 0, no register)
        ranks = [register_copies(m, rank[j][:j + 1], n, f"b_ev_rank{j}_copy", zero_at_reset=True)
                 for j in range(L)]
        ranks[0] = [ranks[0][1]] * n          # (lane 0: its plain copy is B's merged flop)
        for g in range(n):
            m.d.comb += self.ev.take_valid[g].eq(valid[g])
            m.d.comb += [self.ev.take_rank[g][j].eq(ranks[j][g]) for j in range(L)]

    def _row_info_write(self, m):
        """RI's openers write their grant into the row-info table (at most one lane opens
        a row in a group); the one-hot of each lane's index was registered by AL."""
        AL = self.al
        for e in range(self.cfg.entries):
            hits = [(self.al_dec[j][e] & al.opener, self.rows.grant_info(al)) for j, al in enumerate(AL)]
            with m.If(Cat(sel for sel, _ in hits).any()):
                m.d.sync += self.rowinfo[e].eq(select(hits, self.lay.row_info))

    # ---------------------------------------------------------------- B
    def _stage_b(self, m):
        """B: events and credits into their queues; each write completes its slot in its
        lane's write buffer. Owns the ordering guard's registers (``c_*``)."""
        L, B, guard = self.cfg.lanes, self.b, self.guard
        m.d.comb += [self.ev.valid.eq(_lanes(B, "ev_valid")), self.cr.valid.eq(_lanes(B, "cr_valid"))]
        m.d.comb += [self.ev.data[j].eq(b.ev) for j, b in enumerate(B)]
        m.d.comb += [self.cr.data[j].eq(b.cr) for j, b in enumerate(B)]
        m.d.comb += [self.ev.rank[j].eq(b.ev_rank) for j, b in enumerate(B)]
        m.d.comb += [self.cr.rank[j].eq(b.cr_rank) for j, b in enumerate(B)]
        m.d.comb += [self.ev.count.eq(self.b_ev_count), self.cr.count.eq(self.b_cr_count)]
        m.d.comb += [self.reserve.no_ev.eq(self.b_no_ev), self.reserve.no_cr.eq(self.b_no_cr)]
        for j, (b, buf) in enumerate(zip(B, self.wbuf)):
            m.d.comb += [buf.fill.eq(b.pv), buf.fill_write.eq(b.valid), buf.fill_slot.eq(b.slot),
                         buf.fill_base.eq(b.pre), buf.fill_off.eq(times_const(b.place, self.cfg.stride_bytes)),
                         buf.fill_group.eq(self.b_group)]
            wiring.connect(m, buf.wr, wiring.flipped(self.wr[j]))
            # The ordering guard sees each lane's oldest waiting write a cycle late (and B
            # of the cycle before, below): a write can only move on, so this errs on the
            # safe side. (A void head is older than the writes behind it.)
            m.d.sync += [guard.c_busy[j].eq(buf.pending), guard.c_group[j].eq(buf.head_group)]
        b_busy = _lanes(B, "valid").any()
        m.d.comb += [guard.b_busy.eq(b_busy), guard.b_group.eq(self.b_group)]
        m.d.sync += [guard.c_busy[L].eq(b_busy), guard.c_group[L].eq(self.b_group)]

    # ---------------------------------------------------------------- statistics
    def _statistics(self, m):
        """Status counters, off every loop: each group's increments are counted into
        registers as it leaves T's output registers (AL's, for overflow) and added to the
        32-bit counters a cycle later. (START and FLUSH wait for an empty pipeline, which
        covers the two cycles.) :meth:`_layer_control` resets them.

        The add is narrow: the increment's few bits into the counter's low bits, and the
        high bits +1 formed beside it, chosen by the low part's carry
        (:func:`~moehub.rtl.logic.add_narrow`) -- the same value every cycle, without a
        32-bit carry chain behind the increment register: the full add was the hub's
        deepest path on ASAP7 (``inc_drops_*`` -> the drop counters' top bit and each
        overflow counter's own increment, 21.6 FO4, 524 ps at N5 against 505 ps at
        1.98 GHz, on tiny and mixtral-8gpu)."""
        cfg, L, T, AL = self.cfg, self.cfg.lanes, self.t, self.al
        self.inflight = Signal(range(cfg.entries + 1), name="inflight")
        self.drops = [Signal(32, name=f"drops_{r.name.lower()}") for r in config_reasons(cfg)]
        self.overflow = [Signal(32, name=f"overflow{e}") for e in range(cfg.experts)]
        self.src_rows = [Signal(cfg.count_bits, name=f"src_rows{s}") for s in range(cfg.sources)]
        self.errors = Signal(len(config_reasons(cfg)), name="errors")

        def counted(counter, bits, name, count=popcount):
            inc = Signal(range(L + 1), name=f"inc_{name}")
            m.d.sync += [inc.eq(count(bits)), counter.eq(add_narrow(counter, inc))]
            return inc

        al_open_net = Signal(range(-L, L + 1), name="al_open_net")
        m.d.sync += al_open_net.eq(popcount(_lanes(T, "opener")) - popcount(_lanes(T, "comp")))
        m.d.sync += self.inflight.eq(self.inflight + al_open_net)
        for s in range(cfg.sources):
            # (an AND-OR count, not an adder tree: the lanes' bits come behind the decode
            # of T's source numbers, 72 compares deep in fan-out on nvl72)
            counted(self.src_rows[s], [t.opener & ~t.post & (t.pkt.src == s) for t in T], f"src_rows{s}",
                    count_binary)
        hits = [(r, list(getattr(self.t_reasons, r.name.lower()))) for r in T_REASONS]
        # (the mismatches come late, behind the EOS tracker's per-lane select of the
        # sources: registered before they are counted -- START and FLUSH wait for B to
        # empty, which the EOS's lane leaves after this register is written)
        mismatch = Signal(L, name="eos_mismatch_q")
        m.d.sync += mismatch.eq(self.eos.mismatch)
        for r, bits in [*hits, (Reason.EOS_MISMATCH, list(mismatch)),
                        (Reason.OVERFLOW, [al.ovf for al in AL]), *self.counts.reasons(),
                        *self.rows.reasons()]:
            inc = counted(self.drops[r], bits, f"drops_{r.name.lower()}")
            with m.If(inc != 0):
                m.d.sync += self.errors[r].eq(1)
        for e in range(cfg.experts):
            counted(self.overflow[e], [al.ovf & self.rows.names(al, e) for al in AL], f"overflow{e}")
        status = self.status
        m.d.comb += [status.inflight.eq(self.inflight), status.errors.eq(self.errors),
                     status.eos_seen.eq(self.eos.got_eos)]
        for s in range(cfg.sources):
            m.d.comb += [status.src_rows[s].eq(self.src_rows[s]), status.src_eos[s].eq(self.eos.count[s])]
        m.d.comb += [status.overflow[e].eq(x) for e, x in enumerate(self.overflow)]
        m.d.comb += [status.drops[r].eq(x) for r, x in enumerate(self.drops)]

    # ---------------------------------------------------------------- layer control
    def _layer_drained(self):
        """(pipeline empty, nothing of the layer left after T): START and FLUSH wait for
        both; the end of a layer for the second (lanes past a finished layer have no
        effect)."""
        lanes = [_lanes(self.a, "valid"), _lanes(self.r, "valid"), _lanes(self.t, "pv"),
                 _lanes(self.al, "pv"), _lanes(self.b, "pv")]
        pipe_empty = ~Cat(*lanes).any() & self.reserve.idle
        left = [_lanes(self.t, "valid"), _lanes(self.al, "valid"), _lanes(self.b, "valid"),
                _lanes(self.b, "ev_valid"), _lanes(self.b, "cr_valid"), Cat(buf.pending for buf in self.wbuf)]
        left += self.rows.drain_signals()
        drained = self.ev.empty & self.tracker.idle & ~Cat(*left).any()
        return pipe_empty, drained

    def _layer_control(self, m):
        """START, FLUSH, the watchdog and the end of a layer. Owns the layer's control
        registers; resets the statistics, the chunk table and the EOS tracker."""
        csr, trk = self.csr, self.tracker
        armed, finished = self.armed, self.finished
        start_go, flush_go, sweep_req = self.start_go, self.flush_go, self.sweep_req
        pipe_empty, drained = self._layer_drained()
        with m.If(csr.start):
            m.d.sync += self.start_pending.eq(1)
        with m.If(csr.flush & armed):
            m.d.sync += self.flush_pending.eq(1)
        with m.If(csr.clear_errors):
            m.d.sync += self.errors.eq(0)
        self._watchdog(m)
        # START and FLUSH wait until the pipeline is empty and drained, decide in one cycle
        # and act in the next, so that what they reset (the allocator, the tables, the
        # tracker) is driven from registers. Nothing is accepted meanwhile (block).
        quiet = pipe_empty & drained & ~(armed & finished) & ~start_go & ~flush_go
        can_start = self.start_pending & quiet & ~sweep_req & ~csr.start
        m.d.sync += [start_go.eq(can_start), flush_go.eq(self.flush_pending & quiet & ~can_start)]
        # The end of a layer is decided in the same way (``end_go``, a register: the
        # statistics and the tables it leaves alone need not wait for ``finished``). The
        # three are exclusive: START and FLUSH are decided only when the layer is not
        # finished, the end only when it is, and none in the cycle one of them acts.
        end_go = Signal(name="end_go")
        m.d.sync += end_go.eq(armed & finished & drained & ~end_go)
        m.d.comb += [trk.layer_start.eq(start_go), self.alloc.clear.eq(start_go),
                     trk.mark_dirty.eq((start_go & armed) | flush_go)]
        m.d.comb += [self.eos.clear.eq(start_go), self.table.clear.eq(start_go | flush_go)]
        with m.If(end_go):
            # The layer is complete: hand over to the tracker's end-of-layer sweep.
            m.d.sync += [armed.eq(0), sweep_req.eq(1), self.flush_pending.eq(0), self.flush_timeout.eq(0)]
        with m.If(start_go):
            # START: a new layer (a running one is abandoned; the tracker re-clears).
            m.d.sync += [self.start_pending.eq(csr.start), self.flush_pending.eq(0),
                         self.flush_timeout.eq(0), armed.eq(1), self.done.eq(0), self.inflight.eq(0)]
            m.d.sync += [x.eq(0) for x in self.src_rows + self.drops + self.overflow]
        with m.Elif(flush_go):
            self._flush(m)
        m.d.comb += self.layer_done.eq(0)
        with m.If(trk.sweep_done):
            m.d.sync += [sweep_req.eq(0), self.done.eq(1)]
            m.d.comb += self.layer_done.eq(1)
        m.d.comb += [trk.sweep_req.eq(sweep_req), self.status.sweeping.eq(sweep_req),
                     self.status.armed.eq(armed), self.status.done.eq(self.done)]

    def _watchdog(self, m):
        """An armed layer that accepts nothing for ``timeout`` cycles is flushed.
        (Compared with timeout - 1, registered: no adder in front of the compare.)"""
        timeout = self.csr.timeout
        idle_cycles = Signal(32, name="idle_cycles")
        timeout_m1 = Signal(32, name="timeout_m1")
        m.d.sync += timeout_m1.eq(timeout - 1)
        # (a finished layer is not flushed: ``finished`` gates the flush alone, not the
        # 32-bit counter -- a finished layer stays finished while armed, and the counter
        # restarts when the layer ends -- so its fan-out stays small)
        with m.If(~self.armed | self.block | self.accepted | (timeout == 0)):
            m.d.sync += idle_cycles.eq(0)
        with m.Else():
            m.d.sync += idle_cycles.eq(idle_cycles + 1)
            with m.If((idle_cycles >= timeout_m1) & ~self.finished):
                m.d.sync += [self.flush_pending.eq(1), self.flush_timeout.eq(1)]

    def _flush(self, m):
        """FLUSH (or the watchdog): rows in flight are dropped as INCOMPLETE, the layer ends."""
        incomplete, timeout = self.drops[Reason.INCOMPLETE], self.drops[Reason.TIMEOUT]
        with m.If(self.inflight != 0):
            # (the rows in flight are few bits: the high bits of the 32-bit count are chosen
            # by the low part's carry, +1 formed from the register alongside)
            m.d.sync += [incomplete.eq(add_narrow(incomplete, self.inflight)),
                         self.errors[Reason.INCOMPLETE].eq(1)]
        with m.If(self.flush_timeout):
            m.d.sync += [timeout.eq(timeout + 1), self.errors[Reason.TIMEOUT].eq(1)]
        m.d.sync += [self.flush_pending.eq(0), self.flush_timeout.eq(0), self.armed.eq(0),
                     self.inflight.eq(0), self.sweep_req.eq(1)]
