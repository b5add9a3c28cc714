"""Runtime packet manager: the row tables, per-lane packet handling and address translation.

Pipeline (one *group* of up to ``lanes`` packets per stage). The pipeline never stalls:
every stage register loads every cycle, so no enable fans out across it. Back-pressure
acts only at the input, by reservation: a group is accepted only when every packet in
flight is sure to find room for its write (in its lane's write FIFO), its event and its
credit (in the queues), counted in registers a cycle ahead (``room``).

* **A** -- input registers, with everything that depends on the packets alone decoded on
  the way in: range checks, the table index, the chunk's one-hot bit, and the lane-pair
  comparisons (same row, same source, same expert; same row as the group ahead).
* **R** -- chunk-table read for every lane. The group ahead (in T) writes the table at
  the end of this cycle, so a lane on a row that group touches takes T's result instead
  (bypass); that is the only path from T back into R.
* **T** -- every rule of the hub, applied to the lanes *as if in lane order* (lane 0
  first), written as parallel prefix logic rather than a chain of lanes: the first chunk
  of a row (any index, any lane) opens it; duplicate, protocol and end-of-stream rules;
  row completion (all chunks in). T owns the state those rules need: the chunk table
  (open, expert, chunk bitmap per (source, tag)) and per source the end-of-stream flag
  and count and the rows opened, and commits them every cycle.
* **AL** -- the :class:`AddressAllocator` grants rows to the rows T opened (lane order;
  overflow refused); each lane's expert region base is looked up, and its row-info entry
  read (the group ahead, in RI, writes the table in this cycle: a lane on a row that
  group opens takes the grant from it instead).
* **RI** -- row-info table (granted row, allocated or dropped) per (source, tag): openers
  write it, later chunks take what AL read, or the grant of their opener in the same
  group. Per-row events (metadata write, completion), credits, and the two parts of the
  address (``region_base[e] + chunk * chunk_bytes`` and ``row * row_stride``) are formed.
* **B** -- events and credits enter their queues in lane order; the address parts are
  added; each lane's write enters the lane's write FIFO (``WRITE_FIFO_DEPTH`` entries),
  whose head is the lane's ``wr`` port.

Latency: a packet accepted in cycle *t* is written out in cycle *t+6* (``WRITE_LATENCY``)
when its FIFO is empty; its row's events enter the event queue in cycle *t+5*.

Bad input (see :class:`~moehub.rtl.formats.Reason`), each counted in ``drops`` and in the
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

A layer is *finished* when every source's end-of-stream has arrived, its count is reached
and no row is open (a row opened past its source's count, dropped, holds the layer open
until it completes, or until the watchdog flushes it); every later group is dropped as
NOT_ARMED, and once the pipeline has drained the packet manager asks the tracker for the
end-of-layer sweep.
"""
from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config.schema import QUEUE_GROUPS, HubConfig
from .formats import Reason
from .layouts import GROUP_AGE_LIMIT, GROUP_BITS, HubLayouts
from .logic import SplitDifference, exactly, popcount as _popcount, select as _select, times_const

#: Cycles from a packet's acceptance to its data write leaving the hub (nothing stalled).
WRITE_LATENCY = 6
#: Cycles from a packet's acceptance to its row's event entering the event queue.
EVENT_LATENCY = 5
#: Pipeline registers a packet passes before it leaves B (A, R, T, AL, RI->B): the packets
#: the input reservations must cover (config.schema.QUEUE_GROUPS = this + 1).
IN_FLIGHT_GROUPS = QUEUE_GROUPS - 1
#: Entries of each lane's write FIFO: the writes in flight plus one leaving, so that a lane
#: whose port is always ready never holds the input back.
WRITE_FIFO_DEPTH = 8


def _any(bits):
    bits = list(bits)
    return Cat(*bits).any() if bits else Const(0)


def _onehot_mux(sel_vals, default):
    """``default`` unless one of the (select, value) pairs is selected (at most one is)."""
    out = default
    for sel, val in sel_vals:
        out = Mux(sel, val, out)
    return out


class PacketManager(wiring.Component):
    """See the module docstring. Members (L = lanes, E = experts, S = sources):

    i : In(stream packet).array(L)        input lanes
    wr : Out(stream write).array(L)       data writes (one port per lane)
    ev_push_valid / ev_push_data          per-row events to the event queue (one slot per lane)
    ev_pop, ev_empty                      event-queue state (an event left; empty)
    cr_push_valid / cr_push_data          credits to the credit queue (L slots)
    cr_pop                                a credit left the credit queue
    alloc_*                               the allocator's request/grant interface
    region_base : In(addr_bits).array(E)  from the CSRs
    start, flush : In(1)                  CSR strobes; timeout : In(32)
    tracker_idle, clearing, sweep_done    from the tracker
    layer_start, mark_dirty, sweep_req    to the tracker
    armed, done, inflight, eos_seen, src_rows, src_eos, overflow, drops, errors   status
    clear_errors : In(1)
    b_busy, b_group                       writes in B (the tracker's ordering guard)
    c_busy, c_group                       registered: each write FIFO's head, and B, a cycle ago
    """

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.lay = lay = HubLayouts(cfg)
        L, E, S = cfg.lanes, cfg.experts, cfg.sources
        nr = len(Reason)
        super().__init__({
            "i": In(stream.Signature(lay.packet)).array(L),
            "wr": Out(stream.Signature(lay.write)).array(L),
            "ev_push_valid": Out(L),
            "ev_push_data": Out(lay.event).array(L),
            "ev_pop": In(1),
            "ev_empty": In(1),
            "cr_push_valid": Out(L),
            "cr_push_data": Out(lay.credit).array(L),
            "cr_pop": In(1),
            "alloc_req": Out(L),
            "alloc_expert": Out(E).array(L),
            "alloc_row": In(cfg.row_bits).array(L),
            "alloc_ok": In(L),
            "alloc_commit": Out(1),
            "alloc_clear": Out(1),
            "region_base": In(cfg.addr_bits).array(E),
            "start": In(1), "flush": In(1), "clear_errors": In(1), "timeout": In(32),
            "tracker_idle": In(1), "clearing": In(1), "sweep_done": In(1),
            "layer_start": Out(1), "mark_dirty": Out(1), "sweep_req": Out(1),
            "armed": Out(1), "done": Out(1), "layer_done": Out(1),
            "inflight": Out(32),
            "eos_seen": Out(S),
            "src_rows": Out(cfg.count_bits).array(S),
            "src_eos": Out(cfg.count_bits).array(S),
            "overflow": Out(32).array(E),
            "drops": Out(32).array(nr),
            "errors": Out(nr),
            "b_busy": Out(1), "b_group": Out(GROUP_BITS), "c_busy": Out(L + 1),
            "c_group": Out(GROUP_BITS).array(L + 1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.lay
        L, E, S, T, C = cfg.lanes, cfg.experts, cfg.sources, cfg.tags_per_source, cfg.chunks_per_row
        N = cfg.entries
        pairs = [(i, j) for j in range(L) for i in range(j)]

        def lane_sigs(name, shape=1):
            return [Signal(shape, name=f"{name}{j}") for j in range(L)]

        def pair_sigs(name):
            return {(i, j): Signal(name=f"{name}{i}_{j}") for i, j in pairs}

        # ------------------------------------------------------------ state
        # Chunk table (T): open bits in flops (one-cycle clear), expert and bitmap in a
        # memory read by every lane in R and written by every lane in T.
        open_v = Signal(N)
        m.submodules.chunks = ct = Memory(shape=lay.chunk_body, depth=N, init=[])
        ct_rd = [ct.read_port(domain="comb") for _ in range(L)]
        ct_wr = [ct.write_port() for _ in range(L)]
        # Row-info table (RI): granted row and whether it was granted.
        m.submodules.rowinfo = ri = Memory(shape=lay.row_info, depth=N, init=[])
        ri_rd = [ri.read_port(domain="comb") for _ in range(L)]
        ri_wr = [ri.write_port() for _ in range(L)]
        # Per-source end-of-stream state and rows opened (all openers, see T).
        eos_seen = Signal(S)
        eos_cnt = [Signal(cfg.count_bits, name=f"eos_cnt{s}") for s in range(S)]
        opened = [Signal(cfg.count_bits + 1, name=f"opened{s}") for s in range(S)]
        src_rows = [Signal(cfg.count_bits, name=f"src_rows{s}") for s in range(S)]
        dist = [Signal(signed(cfg.count_bits + 3), name=f"dist{s}") for s in range(S)]
        # These registers run a group behind: the group T committed last is summarised in
        # p_* (how many rows each source opened -- one-hot --, its EOS and what the distance
        # becomes), and the state after it (seen_t, opened_t, dist_t) is formed from
        # registers only; T's own results go straight into p_* (no adder after T's logic).
        p_sel = [Signal(L + 1, name=f"p_sel{s}", init=1) for s in range(S)]
        p_eos = Signal(S)
        p_evec = [[Signal.like(dist[0], name=f"p_evec{s}_{n}") for n in range(L + 1)] for s in range(S)]
        p_cnt = [Signal(cfg.count_bits, name=f"p_cnt{s}") for s in range(S)]
        seen_t = Signal(S)
        opened_t = [Signal.like(opened[0], name=f"opened_t{s}") for s in range(S)]
        dist_t = [Signal.like(dist[0], name=f"dist_t{s}") for s in range(S)]
        for s in range(S):
            m.d.comb += [
                seen_t[s].eq(eos_seen[s] | p_eos[s]),
                opened_t[s].eq(_select([(p_sel[s][n], opened[s] + n) for n in range(L + 1)],
                                       opened[0].shape())),
                dist_t[s].eq(Mux(p_eos[s],
                                 _select([(p_sel[s][n], p_evec[s][n]) for n in range(L + 1)], dist[0].shape()),
                                 _select([(p_sel[s][n], dist[s] - n) for n in range(L + 1)], dist[0].shape()))),
            ]
            m.d.sync += [eos_seen[s].eq(seen_t[s]), opened[s].eq(opened_t[s]), dist[s].eq(dist_t[s])]
            with m.If(p_eos[s]):
                m.d.sync += eos_cnt[s].eq(p_cnt[s])
        # T needs only whether dist_t <= k (k = 0..L-1: the source's earlier openers in the
        # group), not dist_t itself: the comparisons are registers chosen by one-hots.
        # dist_le[m] = dist <= m (m = 0..2L-1), so dist_t = dist - n <= k is dist_le[n + k];
        # after an EOS, p_le[n][k] = p_evec[n] <= k, the sign of another r_dec candidate.
        dist_le = [Signal(2 * L, name=f"dist_le{s}", init=(1 << 2 * L) - 1) for s in range(S)]
        p_le = [[Signal(L, name=f"p_le{s}_{n}") for n in range(L + 1)] for s in range(S)]
        dle_t = [Signal(L, name=f"dle_t{s}") for s in range(S)]
        for s in range(S):
            for k in range(L):
                m.d.comb += dle_t[s][k].eq(Mux(
                    p_eos[s], Cat(p_sel[s][n] & p_le[s][n][k] for n in range(L + 1)).any(),
                    Cat(p_sel[s][n] & dist_le[s][n + k] for n in range(L + 1)).any()))
            # (dist_t <= k for the next cycle: every candidate compared with a constant,
            # then chosen -- no subtraction in front of the compares)
            m.d.sync += [dist_le[s][k].eq(Mux(
                p_eos[s], Cat(p_sel[s][n] & (p_evec[s][n] <= k) for n in range(L + 1)).any(),
                Cat(p_sel[s][n] & (dist[s] <= n + k) for n in range(L + 1)).any())) for k in range(2 * L)]
        eos_seen_rd, dle_rd = Array(seen_t), Array(dle_t)
        count_reached = Signal(S)
        m.d.comb += count_reached.eq(Cat(dle_t[s][0] for s in range(S)))
        # (rows open in the table: at most one per entry, so a narrow counter)
        inflight = Signal(range(N + 1))
        drops = [Signal(32, name=f"drops_{r.name.lower()}") for r in Reason]
        overflow = [Signal(32, name=f"overflow{e}") for e in range(E)]
        errors = Signal(len(Reason))
        armed = Signal()
        done = Signal()
        start_pending = Signal()
        flush_pending = Signal()
        flush_timeout = Signal()
        sweep_req = Signal()
        idle_cycles = Signal(32)
        group = Signal(GROUP_BITS)

        # ------------------------------------------------------------ flow control
        # The pipeline never stalls: every stage register loads every cycle. Back-pressure
        # acts at the input only, by reservation: a group is accepted only if every packet
        # in flight (and this group) is sure to find room in its lane's write FIFO and in
        # the event and credit queues. The counters below are registers, so `ready` is a
        # short path from flops, and no enable fans out to the pipeline.
        wf_used = [Signal(range(WRITE_FIFO_DEPTH + 1), name=f"wf_used{j}") for j in range(L)]
        # Queue entries neither used nor reserved by a packet in flight (before B).
        ev_avail = Signal(range(cfg.event_queue_depth + 1), init=cfg.event_queue_depth)
        cr_avail = Signal(range(cfg.credit_queue_depth + 1), init=cfg.credit_queue_depth)
        block = Signal()
        m.d.comb += block.eq(start_pending | flush_pending | self.clearing)
        # A write still waiting in a lane's FIFO also holds the input back once it is
        # GROUP_AGE_LIMIT groups old, so that the group ids the tracker's ordering guard
        # compares (modulo 2**GROUP_BITS) stay within half the id space.
        # `room` is a register: the reservations' next values, checked a cycle ahead as if
        # every lane were accepted whenever `room` allowed it, and not counting this
        # cycle's queue pops (conservative: it depends on no input and on no `block`).
        young = Signal()
        room = Signal(init=1)
        ready = Signal()
        m.d.comb += ready.eq(room & ~block)
        for j in range(L):
            m.d.comb += self.i[j].ready.eq(ready)
        acc = Signal(L)
        m.d.comb += acc.eq(Cat(self.i[j].valid for j in range(L)) & Cat(*(ready for _ in range(L))))
        accepted = Signal()
        m.d.comb += accepted.eq(acc.any())

        # ------------------------------------------------------------ input -> A (decode)
        a_valid = Signal(L)
        # Each lane's write buffer (see B): slots taken in order at acceptance.
        slot_sigs = []
        a_slot = lane_sigs("a_slot", range(WRITE_FIFO_DEPTH))
        for j in range(L):
            D = WRITE_FIFO_DEPTH
            sl = {"wa": Signal(range(D), name=f"wf_wa{j}"), "rp": Signal(range(D), name=f"wf_rp{j}"),
                  "ready": Signal(D, name=f"wf_ready{j}"), "void": Signal(D, name=f"wf_void{j}"),
                  "data": Array(Signal(cfg.data_bits, name=f"wf_data{j}_{k}") for k in range(D)),
                  "addr": Array(Signal(cfg.addr_bits, name=f"wf_addr{j}_{k}") for k in range(D)),
                  "group": Array(Signal(GROUP_BITS, name=f"wf_group{j}_{k}") for k in range(D))}
            slot_sigs.append(sl)
            # (the data is written whenever `room` says slot `wa` is free, accepted or not --
            # `wa` only moves on acceptance --, so the wide write enable does not wait for
            # `block` and the input handshake)
            with m.If(self.i[j].valid & room):
                m.d.sync += sl["data"][sl["wa"]].eq(self.i[j].payload.data)
            with m.If(acc[j]):
                m.d.sync += sl["wa"].eq(sl["wa"] + 1)
            m.d.sync += a_slot[j].eq(sl["wa"])
        a_pkt = [Signal(lay.packet, name=f"a_pkt{j}") for j in range(L)]
        a_bad_src, a_bad_chunk, a_bad_exp = Signal(L), Signal(L), Signal(L)
        a_idx = lane_sigs("a_idx", range(N))
        a_oh = lane_sigs("a_oh", C)
        a_same_idx, a_same_src, a_same_exp = pair_sigs("a_same_idx"), pair_sigs("a_same_src"), pair_sigs("a_same_exp")
        a_same_chunk = pair_sigs("a_same_chunk")
        # a_hit[j, k]: lane j of this group is on the row lane k of the group ahead is on;
        # a_hit2: ... of the group two ahead (whose table write is still pending, see W).
        a_hit = {(j, k): Signal(name=f"a_hit{j}_{k}") for j in range(L) for k in range(L)}
        a_hit2 = {(j, k): Signal(name=f"a_hit2_{j}_{k}") for j in range(L) for k in range(L)}
        for j in range(L):
            q = self.i[j].payload
            m.d.sync += [
                a_valid[j].eq(acc[j]), a_pkt[j].eq(q),
                a_bad_src[j].eq((q.src >= S) | (~q.kind & (q.tag >= T))),
                a_bad_chunk[j].eq(~q.kind & (q.chunk >= C)),
                a_bad_exp[j].eq(q.expert >= E),
                a_idx[j].eq(q.src * T + q.tag),
                a_oh[j].eq(Const(1, C) << q.chunk),
            ]
            for i in range(j):
                qi = self.i[i].payload
                m.d.sync += [a_same_idx[i, j].eq((qi.src == q.src) & (qi.tag == q.tag)),
                             a_same_src[i, j].eq(qi.src == q.src),
                             a_same_exp[i, j].eq(qi.expert == q.expert),
                             a_same_chunk[i, j].eq(qi.chunk == q.chunk)]
            for k in range(L):
                m.d.sync += a_hit[j, k].eq((q.src == a_pkt[k].src) & (q.tag == a_pkt[k].tag))

        # ------------------------------------------------------------ A -> R (table read)
        r_valid = Signal(L)
        r_slot = lane_sigs("r_slot", range(WRITE_FIFO_DEPTH))
        r_pkt = [Signal(lay.packet, name=f"r_pkt{j}") for j in range(L)]
        for j in range(L):
            q = self.i[j].payload
            m.d.sync += [a_hit2[j, k].eq((q.src == r_pkt[k].src) & (q.tag == r_pkt[k].tag))
                         for k in range(L)]
        r_bad_src, r_bad_chunk, r_bad_exp = Signal(L), Signal(L), Signal(L)
        r_idx = lane_sigs("r_idx", range(N))
        r_oh = lane_sigs("r_oh", C)
        r_same_idx, r_same_src = pair_sigs("r_same_idx"), pair_sigs("r_same_src")
        # What of T's rules depends on the packets alone is decided in A (registered here):
        # data / EOS lanes, each lane's first lane on its row, the last (which writes the
        # table back), the row's expert for a row opened in this group.
        r_d, r_eos, r_first, r_last, r_match_new, r_eos_prior = (
            Signal(L, name=n) for n in ("r_d", "r_eos", "r_first", "r_last", "r_match_new", "r_eos_prior"))
        r_row = pair_sigs("r_row")                 # (i, j): lane i is a data lane on lane j's row
        r_same_chunk = pair_sigs("r_same_chunk")   # ... and on the same chunk (for duplicates)
        a_d = Signal(L)
        a_eos = Signal(L)
        a_row = pair_sigs("a_row")
        m.d.comb += [a_d.eq(Cat(a_valid[j] & ~a_pkt[j].kind & ~a_bad_src[j] & ~a_bad_chunk[j]
                                for j in range(L))),
                     a_eos.eq(Cat(a_valid[j] & a_pkt[j].kind & ~a_bad_src[j] for j in range(L)))]
        m.d.comb += [a_row[i, j].eq(a_d[i] & a_same_idx[i, j]) for i, j in pairs]
        a_first = [a_d[j] & ~_any(a_row[i, j] for i in range(j)) for j in range(L)]
        m.d.sync += [
            r_d.eq(a_d), r_eos.eq(a_eos),
            r_first.eq(Cat(*a_first)),
            r_last.eq(Cat(a_d[k] & ~_any(a_d[n] & a_same_idx[k, n] for n in range(k + 1, L)) for k in range(L))),
            r_match_new.eq(Cat(~_any(a_row[i, j] for i in range(j))
                               | _any(a_first[i] & a_row[i, j] & a_same_exp[i, j] for i in range(j))
                               for j in range(L))),
            r_eos_prior.eq(Cat(_any(a_eos[i] & a_same_src[i, j] for i in range(j)) for j in range(L))),
        ]
        m.d.sync += [r_row[key].eq(a_row[key]) for key in pairs]
        m.d.sync += [r_same_chunk[key].eq(a_same_chunk[key]) for key in pairs]
        r_ent = [Signal(lay.chunk_entry, name=f"r_ent{j}") for j in range(L)]
        r_exp_eq = lane_sigs("r_exp_eq")      # r_ent's expert == the packet's
        # Filled in by T below: which of T's lanes writes back which entry value.
        t_wen = lane_sigs("t_wen")
        t_after = [Signal(lay.chunk_entry, name=f"t_after{k}") for k in range(L)]
        # W: T's write-back, registered; the table is written from here a cycle later, so
        # the wide write fan-out is off T's loop (R takes pending writes from W too).
        w_wen = lane_sigs("w_wen")
        w_idx = lane_sigs("w_idx", range(N))
        w_after = [Signal(lay.chunk_entry, name=f"w_after{k}") for k in range(L)]
        m.d.sync += [r_valid.eq(a_valid), r_bad_src.eq(a_bad_src), r_bad_chunk.eq(a_bad_chunk),
                     r_bad_exp.eq(a_bad_exp)]
        m.d.sync += [r_pkt[j].eq(a_pkt[j]) for j in range(L)]
        m.d.sync += [r_slot[j].eq(a_slot[j]) for j in range(L)]
        m.d.sync += [r_idx[j].eq(a_idx[j]) for j in range(L)]
        m.d.sync += [r_oh[j].eq(a_oh[j]) for j in range(L)]
        for key in pairs:
            m.d.sync += [r_same_idx[key].eq(a_same_idx[key]), r_same_src[key].eq(a_same_src[key])]
        # For an end-of-stream: count - opened - k for every small k (`r_dec`), with `opened`
        # up to the group four ahead of it (the register when the EOS comes in), and the
        # openers of the two groups between folded in later by one-hots. On the way into
        # A, count - opened in its low bits (SplitDifference, behind the source mux); in A,
        # the high bits and every k (from registers only), and the sum of the openers of
        # the groups three and two ahead (p_sel then and now) as a one-hot (`r_lag`). T
        # adds the openers of the group right ahead (p_sel in T) and picks.
        # (k up to 5 x lanes: 2 lags and the group ahead (3L), the openers n of its own
        # group (L), and the signs of p_evec[n] - k' - 1 (k' < L))
        NK = 5 * L + 1
        ecnt_shape = signed(cfg.count_bits + 3)
        a_psel_in = [Signal(L + 1, name=f"a_psel_in{j}") for j in range(L)]
        a_src_oh = [Signal(S, name=f"a_src_oh{j}") for j in range(L)]
        r_dec = [[Signal(ecnt_shape, name=f"r_dec{j}_{k}") for k in range(NK)] for j in range(L)]
        r_lag = [Signal(2 * L + 1, name=f"r_lag{j}") for j in range(L)]
        r_src_oh = [Signal(S, name=f"r_src_oh{j}") for j in range(L)]
        for j in range(L):
            q_in = self.i[j].payload
            a_ecnt = SplitDifference(m, q_in.count, Array(opened)[q_in.src], ecnt_shape.width,
                                     (NK - 1).bit_length(), f"a_ecnt{j}")
            # (the source one-hot, decoded on the way in: p_sel is chosen by an AND-OR)
            m.d.sync += [a_psel_in[j].eq(Array(p_sel)[q_in.src]),
                         a_src_oh[j].eq(Cat(q_in.src == s for s in range(S)))]
            psel_a = Signal(L + 1, name=f"a_psel{j}")
            m.d.comb += psel_a.eq(_select([(a_src_oh[j][s], p_sel[s]) for s in range(S)], L + 1))
            m.d.sync += [r_lag[j][t].eq(_any(a_psel_in[j][b] & psel_a[t - b]
                                             for b in range(max(0, t - L), min(t, L) + 1)))
                         for t in range(2 * L + 1)]
            m.d.sync += [r_dec[j][k].eq(a_ecnt.select_minus(m, [(Const(1), k)], f"a_ecnt{j}_m{k}"))
                         for k in range(NK)]
            m.d.sync += r_src_oh[j].eq(a_src_oh[j])
        for j in range(L):
            stored = Signal(lay.chunk_entry, name=f"stored{j}")
            m.d.comb += [
                ct_rd[j].addr.eq(a_idx[j]),
                stored.open.eq(open_v.bit_select(a_idx[j], 1)),
                stored.expert.eq(ct_rd[j].data.expert),
                stored.bitmap.eq(ct_rd[j].data.bitmap),
            ]
            # (T's entries are taken on `r_last`, a register, not on t_wen = live & last:
            # a group T finds not live leaves the state unchanged and is followed only by
            # groups that are not live either -- `finished` holds until START, and START
            # and FLUSH wait for an empty pipeline -- so what it passes on is never used;
            # that keeps `live` out of this loop)
            bypass = ([(a_hit2[j, k] & w_wen[k], w_after[k]) for k in range(L)]
                      + [(a_hit[j, k] & r_last[k], t_after[k]) for k in range(L)])
            m.d.sync += r_ent[j].eq(_onehot_mux(bypass, stored))
            # (the expert compare T needs, made here on every candidate: off T's loop)
            expert_j = a_pkt[j].expert
            m.d.sync += r_exp_eq[j].eq(_onehot_mux([(sel, ent.expert == expert_j) for sel, ent in bypass],
                                                   stored.expert == expert_j))

        # ------------------------------------------------------------ T (the rules, on R)
        finished = Signal()
        # (open rows: the table's, with W's pending writes applied)
        wmask, wopen = Const(0, N), Const(0, N)
        for k in range(L):
            dec = Signal(N, name=f"w_dec{k}")
            m.d.comb += dec.eq(Mux(w_wen[k], Const(1, N) << w_idx[k], 0))
            wmask = wmask | dec
            wopen = wopen | Mux(w_after[k].open, dec, 0)
        open_eff = Signal(N)
        m.d.comb += open_eff.eq((open_v & ~wmask) | wopen)
        m.d.sync += open_v.eq(open_eff)
        # Whether a row is open, without an OR over the table in front of T: the entries W
        # does not write were reduced a cycle earlier (others_open), W's own are 4 bits.
        others_open = Signal()
        w_open_any = Cat(w_wen[k] & w_after[k].open for k in range(L)).any()
        m.d.comb += finished.eq(~others_open & ~w_open_any & Cat(
            seen_t[s] & count_reached[s] for s in range(S)).all())
        live = Signal()
        m.d.comb += live.eq(armed & ~finished)

        d, eos, first, opener = r_d, r_eos, r_first, lane_sigs("opener")
        match, full_before, protocol, dup, setb, comp, post = (
            lane_sigs(n) for n in ("match", "full_before", "protocol", "dup", "setb", "comp", "post"))
        eos_acc, seen_before = lane_sigs("eos_acc"), lane_sigs("seen_before")
        bits_before = lane_sigs("bits_before", C)
        lasts = []
        all_chunks = (1 << C) - 1
        # Whether a row is full (all chunks in) after some of the lanes up to j add their
        # chunk, without ORing the late verdicts into a chunks-wide bitmap first: `base`
        # (registers only) says the row would be full if every lane on it up to j added its
        # chunk; then each such lane's chunk must really be in -- stored already, added by
        # itself, or by another adding lane with the same chunk (pairwise compares).
        stored_bit = lane_sigs("stored_bit")     # the lane's chunk is in the stored bitmap
        for j in range(L):
            ent = r_ent[j]
            m.d.comb += [opener[j].eq(first[j] & ~ent.open),
                         stored_bit[j].eq(ent.open & (ent.bitmap & r_oh[j]).any()),
                         # the row's expert: the stored one, or its first lane's in this group
                         match[j].eq(Mux(ent.open, r_exp_eq[j], r_match_new[j]))]

        def same_chunk(i, k):
            return r_same_chunk[min(i, k), max(i, k)]

        full_if = {}                             # (j, lane j adds): full after lanes <= j
        for j in range(L):
            ent = r_ent[j]
            union = Mux(ent.open, ent.bitmap, 0) | r_oh[j]
            for i in range(j):
                union = union | Mux(r_row[i, j], r_oh[i], 0)
            base = Signal(name=f"full_base{j}")
            m.d.comb += base.eq(union == all_chunks)
            adds = [r_row[i, j] & match[i] for i in range(j)]
            for own in (0, 1):
                c = adds + [Const(own)]
                terms = []
                for i in range(j + 1):
                    covered = c[i] | stored_bit[i] | _any(c[k] & same_chunk(i, k) for k in range(j + 1) if k != i)
                    terms.append(covered if i == j else (~r_row[i, j] | covered))
                full_if[j, own] = Signal(name=f"full{j}_if{own}")
                m.d.comb += full_if[j, own].eq(base & Cat(*terms).all())
            # Chunks already in (for the write-back bitmap): the stored bitmap, plus earlier
            # lanes of the group on this row (a duplicate sets a bit that is already set; a
            # protocol error none).
            earlier = 0
            for i in range(j):
                earlier = earlier | Mux(adds[i], r_oh[i], 0)
            # (whether this lane's own chunk is in: the stored bit, or an earlier lane's)
            own_in = stored_bit[j] | _any(adds[i] & r_same_chunk[i, j] for i in range(j))
            m.d.comb += [
                bits_before[j].eq(Mux(ent.open, ent.bitmap, 0) | earlier),
                full_before[j].eq(full_if[j, 0]),
                protocol[j].eq(d[j] & ~opener[j] & ~full_before[j] & ~match[j]),
                dup[j].eq(d[j] & ~opener[j] & (full_before[j] | (match[j] & own_in))),
                setb[j].eq(d[j] & ~protocol[j] & ~dup[j]),
                comp[j].eq(setb[j] & full_if[j, 1]),
            ]

        for j in range(L):
            p = r_pkt[j]
            # End of stream (it takes effect at the end of the group: rows opened in the
            # same group still count), and whether an opener comes after its source's
            # count. ``opened`` counts every opener, post-EOS ones too: the condition is
            # monotone, so counting them changes no outcome. Per source T keeps the
            # distance ``dist = count - opened`` (once the EOS is in), so an opener's check
            # is a small compare from registers: dist <= k, k = the source's earlier
            # openers in this group.
            src = p.src
            m.d.comb += [seen_before[j].eq(eos_seen_rd[src] | r_eos_prior[j]),
                         eos_acc[j].eq(eos[j] & ~seen_before[j])]
            # (dist <= k for every k from registers; the k that holds selects)
            earlier_openers = [opener[i] & r_same_src[i, j] for i in range(j)]
            dle_src = Signal(L, name=f"dle_src{j}")
            m.d.comb += dle_src.eq(dle_rd[src])
            m.d.comb += post[j].eq(~r_bad_exp[j] & eos_seen_rd[src] & Cat(
                exactly(earlier_openers, k) & dle_src[k] for k in range(j + 1)).any())

        # Write-back: the last data lane on each row leaves the row's state in the table
        # (and in the bypass to R).
        for k in range(L):
            last = r_last[k]
            lasts.append(last)
            expert_k = Mux(r_ent[k].open, r_ent[k].expert, _onehot_mux(
                [(first[i] & r_same_idx[i, k], r_pkt[i].expert) for i in range(k)], r_pkt[k].expert))
            bits_k = Signal(C, name=f"bits_after{k}")
            # (a duplicate's bit is already set and a protocol error's does not match, so
            # the bitmap needs neither verdict: off the duplicate/completion logic)
            m.d.comb += bits_k.eq(bits_before[k] | Mux(d[k] & match[k], r_oh[k], 0))
            m.d.comb += [
                t_wen[k].eq(live & last),
                t_after[k].open.eq(~Mux(match[k], full_if[k, 1], full_if[k, 0])),
                t_after[k].expert.eq(expert_k),
                t_after[k].bitmap.eq(bits_k),
                ct_wr[k].addr.eq(w_idx[k]),
                ct_wr[k].en.eq(w_wen[k]),
                ct_wr[k].data.expert.eq(w_after[k].expert),
                ct_wr[k].data.bitmap.eq(w_after[k].bitmap),
            ]
        # others_open for the next cycle: the table as it will be then, except the entries
        # this group writes (those come from W then); both cases of `live`, chosen last.
        tmask = Const(0, N)
        for k in range(L):
            tmask = tmask | Mux(lasts[k], Const(1, N) << r_idx[k], 0)
        m.d.sync += others_open.eq(Mux(live, (open_eff & ~tmask).any(), open_eff.any()))
        # At most one lane writes an entry (the last on its row): W applies the writes.
        m.d.sync += [w_wen[k].eq(t_wen[k]) for k in range(L)]
        m.d.sync += [w_idx[k].eq(r_idx[k]) for k in range(L)]
        m.d.sync += [w_after[k].eq(t_after[k]) for k in range(L)]
        # Each lane's count - opened after the group ahead (its source's p_sel, added to the
        # lag one-hot: `lag`), minus n for each count n of openers in its own group; and
        # whether that is <= k (k < L): the sign of the value k + 1 further on.
        shifted, shifted_le = [], []
        for j in range(L):
            psel_t = _select([(r_src_oh[j][s], p_sel[s]) for s in range(S)], L + 1)
            lag = [Signal(name=f"t_lag{j}_{u}") for u in range(3 * L + 1)]
            m.d.comb += [lag[u].eq(_any(r_lag[j][t] & psel_t[u - t]
                                        for t in range(max(0, u - L), min(u, 2 * L) + 1)))
                         for u in range(3 * L + 1)]
            shifted.append([_select([(lag[u], r_dec[j][u + n]) for u in range(3 * L + 1)], dist[0].shape())
                            for n in range(L + 1)])
            shifted_le.append([[_any(lag[u] & r_dec[j][u + n + k + 1][-1] for u in range(3 * L + 1))
                                for k in range(L)] for n in range(L + 1)])
        for s in range(S):
            # This group's summary per source (see p_*): the openers' count (one-hot), the
            # EOS lane (at most one per source) and the distance after it for each count.
            src_openers = [opener[j] & (r_pkt[j].src == s) for j in range(L)]
            sel_n = [Signal(name=f"n_open{s}_is{n}") for n in range(L + 1)]
            m.d.comb += [sel_n[n].eq(exactly(src_openers, n)) for n in range(L + 1)]
            eos_sel = [Signal(name=f"eos_sel{s}_{j}") for j in range(L)]
            m.d.comb += [eos_sel[j].eq(eos_acc[j] & (r_pkt[j].src == s)) for j in range(L)]
            m.d.sync += [
                p_sel[s].eq(Mux(live, Cat(*sel_n), 1)),
                p_eos[s].eq(live & Cat(*eos_sel).any()),
                p_cnt[s].eq(_select([(eos_sel[j], r_pkt[j].count) for j in range(L)], p_cnt[s].shape())),
            ]
            m.d.sync += [p_evec[s][n].eq(_select([(eos_sel[j], shifted[j][n]) for j in range(L)],
                                                  dist[0].shape())) for n in range(L + 1)]
            m.d.sync += [p_le[s][n][k].eq(_select([(eos_sel[j], shifted_le[j][n][k]) for j in range(L)], 1))
                         for n in range(L + 1) for k in range(L)]
        # EOS_MISMATCH (the count below the source's rows at the end of the EOS's group):
        # checked a cycle later, on the distance after that group.
        # (dist_t < 0 after an EOS: the sign of the chosen p_evec, registers only)
        mismatch_hits = Signal(S)
        m.d.comb += mismatch_hits.eq(Cat(
            p_eos[s] & Cat(p_sel[s][n] & p_evec[s][n][-1] for n in range(L + 1)).any() for s in range(S)))

        # Reasons found in T, registered for the statistics.
        reason_hits = {
            Reason.NOT_ARMED: [r_valid[j] & ~live for j in range(L)],
            Reason.BAD_SOURCE: [live & r_valid[j] & r_bad_src[j] for j in range(L)],
            Reason.BAD_CHUNK: [live & r_valid[j] & ~r_bad_src[j] & r_bad_chunk[j] for j in range(L)],
            Reason.BAD_EXPERT: [live & opener[j] & r_bad_exp[j] for j in range(L)],
            Reason.POST_EOS: [live & opener[j] & post[j] for j in range(L)],
            Reason.PROTOCOL: [live & protocol[j] for j in range(L)],
            Reason.DUPLICATE: [live & dup[j] for j in range(L)],
            Reason.EOS_DUPLICATE: [live & eos[j] & seen_before[j] for j in range(L)],
        }

        # ------------------------------------------------------------ T -> AL (allocation)
        t_valid = Signal(L)     # lanes with an effect downstream (live)
        t_pv = Signal(L)        # lanes holding a packet (for the input reservations)
        t_pkt = [Signal(lay.packet, name=f"t_pkt{j}") for j in range(L)]
        t_slot = lane_sigs("t_slot", range(WRITE_FIFO_DEPTH))
        t_idx = lane_sigs("t_idx", range(N))
        t_opener, t_setb, t_comp, t_post, t_bad_exp = (Signal(L, name=n) for n in
                                                        ("t_opener", "t_setb", "t_comp", "t_post", "t_bad_exp"))
        t_fwd = pair_sigs("t_fwd")     # (i, j): lane i opened lane j's row in this group
        t_hits = {r: Signal(L, name=f"t_{r.name.lower()}") for r in reason_hits}
        m.d.sync += [
            t_valid.eq(Cat(live & (d[j] | eos[j]) for j in range(L))), t_pv.eq(r_valid),
            t_opener.eq(Cat(live & opener[j] for j in range(L))),
            t_setb.eq(Cat(live & setb[j] for j in range(L))),
            t_comp.eq(Cat(live & comp[j] for j in range(L))),
            t_post.eq(Cat(*post)), t_bad_exp.eq(r_bad_exp),
        ]
        m.d.sync += [t_pkt[j].eq(r_pkt[j]) for j in range(L)]
        # (the expert one-hot, for the allocator: no decoder in front of its counters)
        t_exp_oh = lane_sigs("t_exp_oh", E)
        m.d.sync += [t_exp_oh[j].eq(Cat(r_pkt[j].expert == e for e in range(E))) for j in range(L)]
        m.d.sync += [t_slot[j].eq(r_slot[j]) for j in range(L)]
        m.d.sync += [t_idx[j].eq(r_idx[j]) for j in range(L)]
        m.d.sync += [t_fwd[i, j].eq(opener[i] & r_same_idx[i, j]) for i, j in pairs]
        # (j, k): lane j's row is the row lane k of the group ahead is on (for the row-info
        # read in AL, whose table that group writes in the same cycle)
        t_hit = {(j, k): Signal(name=f"t_hit{j}_{k}") for j in range(L) for k in range(L)}
        m.d.sync += [t_hit[j, k].eq(r_idx[j] == t_idx[k]) for j in range(L) for k in range(L)]
        m.d.sync += [t_hits[r].eq(Cat(*hits)) for r, hits in reason_hits.items()]

        req = Signal(L)
        m.d.comb += req.eq(t_opener & ~t_bad_exp & ~t_post)
        m.d.comb += [self.alloc_req.eq(req), self.alloc_commit.eq(1)]
        m.d.comb += [self.alloc_expert[j].eq(t_exp_oh[j]) for j in range(L)]

        # ------------------------------------------------------------ AL -> RI (row info)
        al_valid = Signal(L)
        al_pv = Signal(L)
        al_pkt = [Signal(lay.packet, name=f"al_pkt{j}") for j in range(L)]
        al_slot = lane_sigs("al_slot", range(WRITE_FIFO_DEPTH))
        al_idx = lane_sigs("al_idx", range(N))
        al_opener, al_setb, al_comp, al_ok, al_ovf = (Signal(L, name=n) for n in
                                                      ("al_opener", "al_setb", "al_comp", "al_ok", "al_ovf"))
        al_row = lane_sigs("al_row", cfg.row_bits)
        al_fwd = pair_sigs("al_fwd")
        m.d.sync += [al_valid.eq(t_valid), al_pv.eq(t_pv), al_opener.eq(t_opener), al_setb.eq(t_setb),
                     al_comp.eq(t_comp), al_ok.eq(self.alloc_ok), al_ovf.eq(req & ~self.alloc_ok)]
        m.d.sync += [al_pkt[j].eq(t_pkt[j]) for j in range(L)]
        m.d.sync += [al_slot[j].eq(t_slot[j]) for j in range(L)]
        m.d.sync += [al_idx[j].eq(t_idx[j]) for j in range(L)]
        m.d.sync += [al_row[j].eq(self.alloc_row[j]) for j in range(L)]
        # (the expert's region base, looked up here: RI only adds the chunk offset)
        al_base = lane_sigs("al_base", cfg.addr_bits)
        m.d.sync += [al_base[j].eq(Array(self.region_base)[t_pkt[j].expert]) for j in range(L)]
        m.d.sync += [al_fwd[key].eq(t_fwd[key]) for key in pairs]
        # Row-info read for the group in AL (registered for RI), or the row the group
        # ahead grants now (its openers write the table at the end of this cycle).
        al_info = [Signal(lay.row_info, name=f"al_info{j}") for j in range(L)]
        for j in range(L):
            m.d.comb += ri_rd[j].addr.eq(t_idx[j])
            m.d.sync += al_info[j].eq(_onehot_mux(
                [(t_hit[j, k] & al_opener[k], Cat(al_ok[k], al_row[k])) for k in range(L)], ri_rd[j].data))

        # ------------------------------------------------------------ RI -> B
        b_valid = Signal(L)
        b_pv = Signal(L)
        b_group = Signal(GROUP_BITS)
        b_pre = lane_sigs("b_pre", cfg.addr_bits)     # region base + chunk offset
        b_rowoff = lane_sigs("b_rowoff", cfg.addr_bits)   # row * row stride
        b_slot = lane_sigs("b_slot", range(WRITE_FIFO_DEPTH))
        b_ev_valid = Signal(L)
        b_ev = [Signal(lay.event, name=f"b_ev{j}") for j in range(L)]
        b_cr_valid = Signal(L)
        b_cr = [Signal(lay.credit, name=f"b_cr{j}") for j in range(L)]
        ri_alloc = []
        # Address translation in three steps: the region base (AL); the chunk offset and,
        # apart, row * stride (here); their sum (B).
        chunk_shift = cfg.chunk_bytes.bit_length() - 1
        # (row * stride for every row a lane may take -- its own grant, an earlier lane's,
        # the stored one -- and then the choice: the multiply does not wait for the choice)
        own_off = lane_sigs("own_off", cfg.addr_bits)
        info_off = lane_sigs("info_off", cfg.addr_bits)
        m.d.comb += [own_off[j].eq(times_const(al_row[j], cfg.stride_bytes)) for j in range(L)]
        m.d.comb += [info_off[j].eq(times_const(al_info[j].row, cfg.stride_bytes)) for j in range(L)]
        for j in range(L):
            p = al_pkt[j]
            info = Signal(lay.row_info, name=f"info{j}")
            own = Cat(al_ok[j], al_row[j])   # row_info layout order: alloc, row
            m.d.comb += info.eq(Mux(al_opener[j], own, _onehot_mux(
                [(al_fwd[i, j], Cat(al_ok[i], al_row[i])) for i in range(j)], al_info[j])))
            row_off = Mux(al_opener[j], own_off[j], _onehot_mux(
                [(al_fwd[i, j], own_off[i]) for i in range(j)], info_off[j]))
            ri_alloc.append(info.alloc)
            m.d.comb += [ri_wr[j].addr.eq(al_idx[j]), ri_wr[j].en.eq(al_opener[j]),
                         ri_wr[j].data.eq(own)]
            m.d.sync += [
                b_valid[j].eq(al_setb[j] & info.alloc),
                b_pre[j].eq(al_base[j] + (p.chunk << chunk_shift)), b_rowoff[j].eq(row_off),
                b_slot[j].eq(al_slot[j]),
                b_ev_valid[j].eq((al_opener[j] & al_ok[j]) | (al_comp[j] & info.alloc)),
                b_ev[j].complete.eq(al_comp[j]), b_ev[j].expert.eq(p.expert),
                b_ev[j].row.eq(info.row), b_ev[j].src.eq(p.src), b_ev[j].token.eq(p.token),
                b_ev[j].slot.eq(p.slot), b_ev[j].group.eq(group),
                b_cr_valid[j].eq(al_comp[j]),
                b_cr[j].src.eq(p.src), b_cr[j].tag.eq(p.tag),
            ]
        m.d.sync += [group.eq(group + 1), b_group.eq(group), b_pv.eq(al_pv)]
        # (counted here, so that the input reservations add registers only)
        b_no_ev = Signal(range(L + 1))
        b_no_cr = Signal(range(L + 1))
        m.d.sync += [
            b_no_ev.eq(_popcount(al_pv[j] & ~((al_opener[j] & al_ok[j]) | (al_comp[j] & ri_alloc[j]))
                                 for j in range(L))),
            b_no_cr.eq(_popcount(al_pv[j] & ~al_comp[j] for j in range(L))),
        ]

        # ------------------------------------------------------------ B: events out, address, write FIFO
        m.d.comb += [self.ev_push_valid.eq(b_ev_valid), self.cr_push_valid.eq(b_cr_valid)]
        m.d.comb += [self.ev_push_data[j].eq(b_ev[j]) for j in range(L)]
        m.d.comb += [self.cr_push_data[j].eq(b_cr[j]) for j in range(L)]
        wf_pending = Signal(L)     # writes waiting in the lane's buffer
        wf_room = []
        for j in range(L):
            # The lane's write buffer: a slot per packet, taken at acceptance (the data is
            # written then and does not travel down the pipeline); B fills in the address
            # (or marks the slot void: no write); slots leave in order from the head.
            sl = slot_sigs[j]
            with m.If(b_pv[j]):
                m.d.sync += [sl["addr"][b_slot[j]].eq(b_pre[j] + b_rowoff[j]),
                             sl["group"][b_slot[j]].eq(b_group)]
            head = sl["rp"]
            head_ready = Signal(name=f"wf_head_ready{j}")
            head_void = Signal(name=f"wf_head_void{j}")
            m.d.comb += [
                head_ready.eq(sl["ready"].bit_select(head, 1)),
                head_void.eq(sl["void"].bit_select(head, 1)),
                wf_pending[j].eq((sl["ready"] & ~sl["void"]).any()),
                self.wr[j].valid.eq(head_ready & ~head_void),
                self.wr[j].payload.addr.eq(sl["addr"][head]),
                self.wr[j].payload.data.eq(sl["data"][head]),
            ]
            pop = Signal(name=f"wf_pop{j}")
            m.d.comb += pop.eq(head_ready & (head_void | self.wr[j].ready))
            set_mask = Mux(b_pv[j], Const(1, WRITE_FIFO_DEPTH) << b_slot[j], 0)
            clr_mask = Mux(pop, Const(1, WRITE_FIFO_DEPTH) << head, 0)
            m.d.sync += [sl["ready"].eq((sl["ready"] & ~clr_mask) | set_mask),
                         sl["void"].eq(Mux(b_pv[j] & ~b_valid[j], sl["void"] | set_mask,
                                           sl["void"] & ~set_mask))]
            with m.If(pop):
                m.d.sync += head.eq(head + 1)
            # The tracker's ordering guard sees each lane's oldest waiting write a cycle
            # late (and B of the cycle before, below): a write can only move on, so this
            # errs on the safe side. (A void head is older than the writes behind it.)
            m.d.sync += [self.c_busy[j].eq(wf_pending[j]), self.c_group[j].eq(sl["group"][head])]
            # Reservation: a slot per accepted packet until it leaves the head.
            m.d.sync += wf_used[j].eq(wf_used[j] + acc[j] - pop)
            # (for `room`: as if `room` let a packet in on every lane this cycle)
            # (both outcomes of the pop compared from registers; the pop only chooses)
            wf_room.append(Mux(pop, wf_used[j] + room <= WRITE_FIFO_DEPTH, wf_used[j] + room < WRITE_FIFO_DEPTH))
        m.d.comb += [self.b_busy.eq(b_valid.any()), self.b_group.eq(b_group)]
        m.d.sync += [self.c_busy[L].eq(b_valid.any()), self.c_group[L].eq(b_group)]
        m.d.comb += young.eq(Cat(~self.c_busy[j] | ((group - self.c_group[j])[:GROUP_BITS] < GROUP_AGE_LIMIT)
                                 for j in range(L)).all())
        # Events and credits: every packet in flight before B may still push one of each.
        # A packet reaching B either pushes (the entry moves from reserved to used) or does
        # not (its reservation returns); a pop frees an entry.
        # (the queues' pops are counted a cycle late: conservative, and off the tracker's
        # and the credit port's paths)
        ev_pop, cr_pop = Signal(), Signal()
        m.d.sync += [ev_pop.eq(self.ev_pop), cr_pop.eq(self.cr_pop)]
        # (acceptances too, counted into A: so that no input path reaches these registers)
        n_acc = Signal(range(L + 1))
        m.d.sync += n_acc.eq(_popcount(acc))
        ev_delta = Signal(range(-L, L + 2))
        cr_delta = Signal(range(-L, L + 2))
        m.d.comb += [ev_delta.eq(ev_pop + b_no_ev - n_acc), cr_delta.eq(cr_pop + b_no_cr - n_acc)]
        m.d.sync += [ev_avail.eq(ev_avail + ev_delta), cr_avail.eq(cr_avail + cr_delta)]
        need = Mux(room, 2 * L, L) + n_acc
        m.d.sync += room.eq(young & Cat(*wf_room).all()
                            & (ev_avail + b_no_ev >= need) & (cr_avail + b_no_cr >= need))

        # ------------------------------------------------------------ statistics
        # Status and FLUSH only, off every loop: each group's increments are counted into
        # registers as it leaves T's output registers (AL's, for overflow) and added to the
        # 32-bit counters a cycle later. (START and FLUSH wait for an empty pipeline,
        # which covers the two cycles.)
        def counted(counter, bits, name):
            inc = Signal(range(L + 1), name=f"inc_{name}")
            m.d.sync += [inc.eq(_popcount(bits)), counter.eq(counter + inc)]
            return inc

        al_open_net = Signal(range(-L, L + 1))
        m.d.sync += al_open_net.eq(_popcount(t_opener) - _popcount(t_comp))
        m.d.sync += inflight.eq(inflight + al_open_net)
        for s in range(S):
            counted(src_rows[s], [t_opener[j] & ~t_post[j] & (t_pkt[j].src == s) for j in range(L)],
                    f"src_rows{s}")
        for r, hits in [*t_hits.items(), (Reason.EOS_MISMATCH, mismatch_hits),
                        (Reason.OVERFLOW, al_ovf)]:
            inc = counted(drops[r], list(hits), f"drops_{r.name.lower()}")
            with m.If(inc != 0):
                m.d.sync += errors[r].eq(1)
        for e in range(E):
            counted(overflow[e], [al_ovf[j] & (al_pkt[j].expert == e) for j in range(L)], f"overflow{e}")

        # ------------------------------------------------------------ layer control
        pipe_empty = ~(a_valid | r_valid | t_pv | al_pv | b_pv).any() & Cat(u == 0 for u in wf_used).all()
        # Nothing of the layer left after T (lanes past a finished layer have no effect).
        drained = (self.ev_empty & self.tracker_idle
                   & ~(t_valid | al_valid | b_valid | b_ev_valid | b_cr_valid | wf_pending).any())
        with m.If(self.start):
            m.d.sync += start_pending.eq(1)
        with m.If(self.flush & armed):
            m.d.sync += flush_pending.eq(1)
        with m.If(self.clear_errors):
            m.d.sync += errors.eq(0)
        m.d.comb += self.layer_done.eq(0)

        # Watchdog: an armed layer that accepts nothing for `timeout` cycles is flushed.
        # (compared with timeout - 1, registered: no adder in front of the compare)
        timeout_m1 = Signal(32)
        m.d.sync += timeout_m1.eq(self.timeout - 1)
        with m.If(~armed | finished | block | accepted | (self.timeout == 0)):
            m.d.sync += idle_cycles.eq(0)
        with m.Else():
            m.d.sync += idle_cycles.eq(idle_cycles + 1)
            with m.If(idle_cycles >= timeout_m1):
                m.d.sync += [flush_pending.eq(1), flush_timeout.eq(1)]

        # START and FLUSH wait until the pipeline is empty and drained, decide in one cycle
        # and act in the next, so that what they reset (the allocator, the tables, the
        # tracker) is driven from registers. Nothing is accepted meanwhile (block).
        start_go = Signal()
        flush_go = Signal()
        quiet = pipe_empty & drained & ~(armed & finished) & ~start_go & ~flush_go
        can_start = start_pending & quiet & ~sweep_req & ~self.start
        m.d.sync += [start_go.eq(can_start), flush_go.eq(flush_pending & quiet & ~can_start)]
        # (start_go excludes a finished layer, so the sweep branch below never preempts it.)
        m.d.comb += [self.layer_start.eq(start_go), self.alloc_clear.eq(start_go),
                     self.mark_dirty.eq((start_go & armed) | flush_go)]
        with m.If(armed & finished & drained):
            # The layer is complete: hand over to the tracker's end-of-layer sweep.
            m.d.sync += [armed.eq(0), sweep_req.eq(1), flush_pending.eq(0), flush_timeout.eq(0)]
        with m.Elif(start_go):
            # START: a new layer (a running one is abandoned; the tracker re-clears). A layer
            # that has just finished is swept first (the branch above).
            m.d.sync += [start_pending.eq(self.start), flush_pending.eq(0), flush_timeout.eq(0),
                         armed.eq(1), done.eq(0), eos_seen.eq(0), inflight.eq(0)]
            m.d.sync += [open_v.eq(0), others_open.eq(0)]
            m.d.sync += [x.eq(0) for x in eos_cnt + opened + dist + src_rows + drops + overflow]
            m.d.sync += [x.eq(1) for x in p_sel]
            m.d.sync += [x.eq(x.init) for x in dist_le]
            m.d.sync += p_eos.eq(0)
        with m.Elif(flush_go):
            with m.If(inflight != 0):
                m.d.sync += [drops[Reason.INCOMPLETE].eq(drops[Reason.INCOMPLETE] + inflight),
                             errors[Reason.INCOMPLETE].eq(1)]
            with m.If(flush_timeout):
                m.d.sync += [drops[Reason.TIMEOUT].eq(drops[Reason.TIMEOUT] + 1),
                             errors[Reason.TIMEOUT].eq(1)]
            m.d.sync += [flush_pending.eq(0), flush_timeout.eq(0), armed.eq(0), inflight.eq(0),
                         sweep_req.eq(1)]
            m.d.sync += [open_v.eq(0), others_open.eq(0)]
        with m.If(self.sweep_done):
            m.d.sync += [sweep_req.eq(0), done.eq(1)]
            m.d.comb += self.layer_done.eq(1)

        # ------------------------------------------------------------ status
        m.d.comb += [
            self.sweep_req.eq(sweep_req), self.armed.eq(armed), self.done.eq(done),
            self.inflight.eq(inflight), self.eos_seen.eq(eos_seen), self.errors.eq(errors),
        ]
        for s in range(S):
            m.d.comb += [self.src_rows[s].eq(src_rows[s]), self.src_eos[s].eq(eos_cnt[s])]
        for e in range(E):
            m.d.comb += self.overflow[e].eq(overflow[e])
        for r in Reason:
            m.d.comb += self.drops[r].eq(drops[r])
        return m

