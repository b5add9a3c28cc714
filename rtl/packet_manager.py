"""Runtime packet manager: the row table, per-lane packet handling and address translation.

Pipeline (one group of up to ``lanes`` packets per stage, global stall):

* **A** -- input registers: the packets accepted from the lanes this cycle.
* **table stage** (combinational on A, committed when the pipeline advances) -- every
  rule of the hub, applied to the lanes *as if in lane order* (lane 0 first):
  range checks; the row table lookup by (source, tag) with forwarding between lanes that
  hit the same row in one cycle; the first chunk of a row (any index, any lane) opens it
  and asks the :class:`AddressAllocator` for a row; duplicate, protocol and
  end-of-stream rules; row completion (all chunks in). Per-row events (metadata write,
  completion) go to the event queue and credits to the credit queue in lane order.
* **B** -- per-lane write of an allocated row: (expert, row, chunk, data).
* **C** -- address translation ``region_base[e] + row * row_stride + chunk * chunk_bytes``
  into the ``wr`` output registers; each lane's write leaves when its ``wr`` port is ready.

Latency: a packet accepted in cycle *t* is written out in cycle *t+3*.

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
* a chunk whose bit is already set (or whose row completed earlier in the same cycle):
  dropped as DUPLICATE; a chunk whose expert differs from the row's: dropped as PROTOCOL;
* a second end-of-stream from a source: ignored, EOS_DUPLICATE; an end-of-stream count
  smaller than the rows already opened by that source: EOS_MISMATCH (the rows stay);
* FLUSH (CSR) or the watchdog (TIMEOUT idle cycles): rows in flight are dropped as
  INCOMPLETE (their tiles are never flagged), the table is cleared, and the layer ends.

A layer is *finished* when every source's end-of-stream has arrived and all the rows it
counted are complete; the packet manager then asks the tracker for the end-of-layer sweep.
"""
from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config.schema import HubConfig
from .formats import Reason
from .layouts import ALLOC, CLOSED, DROP, FREE, GROUP_BITS, HubLayouts


def _ordered_update(vec, after, dat, idx, state, n):
    """Next value of a per-entry state bit vector: lanes in order, each setting or
    clearing the bit of its entry, so the last lane touching an entry decides."""
    for j in range(len(after)):
        bit = Const(1, n) << idx[j]
        vec = Mux(dat[j], Mux(after[j].state == state, vec | bit, vec & ~bit), vec)
    return vec


def _popcount(bits):
    total = 0
    for b in bits:
        total = total + b
    return total


class PacketManager(wiring.Component):
    """See the module docstring. Members (L = lanes, E = experts, S = sources):

    i : In(stream packet).array(L)        input lanes
    wr : Out(stream write).array(L)       data writes (one port per lane)
    ev_push_valid / ev_push_data          per-row events to the event queue (one slot per lane)
    ev_free, ev_empty                     event-queue state
    cr_push_valid / cr_push_data          credits to the credit queue (L slots)
    cr_free                               credit-queue state
    alloc_*                               the allocator's request/grant interface
    region_base : In(addr_bits).array(E)  from the CSRs
    start, flush : In(1)                  CSR strobes; timeout : In(32)
    tracker_idle, clearing, sweep_done    from the tracker
    layer_start, mark_dirty, sweep_req    to the tracker
    armed, done, inflight, eos_seen, src_rows, src_eos, overflow, drops, errors   status
    clear_errors : In(1)
    b_busy, b_group, c_busy, c_group      writes still in flight (the tracker's ordering guard)
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
            "ev_free": In(range(cfg.event_queue_depth + 1)),
            "ev_empty": In(1),
            "cr_push_valid": Out(L),
            "cr_push_data": Out(lay.credit).array(L),
            "cr_free": In(range(cfg.credit_queue_depth + 1)),
            "alloc_req": Out(L),
            "alloc_expert": Out(cfg.expert_bits).array(L),
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
            "b_busy": Out(1), "b_group": Out(GROUP_BITS), "c_busy": Out(1),
            "c_group": Out(GROUP_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lay = self.cfg, self.lay
        L, E, S, T, C = cfg.lanes, cfg.experts, cfg.sources, cfg.tags_per_source, cfg.chunks_per_row
        all_chunks = (1 << C) - 1

        # ------------------------------------------------------------ state
        # Row table: state bits in flops (one-cycle clear), the rest in a memory with one
        # read and one write port per lane.
        alloc_v = Signal(cfg.entries)        # entry holds an allocated row
        drop_v = Signal(cfg.entries)         # entry holds a row being dropped
        m.submodules.rows = rt = Memory(shape=lay.entry_body, depth=cfg.entries, init=[])
        rt_rd = [rt.read_port(domain="comb") for _ in range(L)]
        rt_wr = [rt.write_port() for _ in range(L)]
        eos_seen = Signal(S)
        eos_cnt = [Signal(cfg.count_bits, name=f"eos_cnt{s}") for s in range(S)]
        opened = [Signal(cfg.count_bits, name=f"opened{s}") for s in range(S)]
        closed = [Signal(cfg.count_bits, name=f"closed{s}") for s in range(S)]
        eos_seen_rd, eos_cnt_rd, opened_rd = Array(eos_seen), Array(eos_cnt), Array(opened)
        inflight = Signal(32)
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

        a_valid = Signal(L)
        a_pkt = [Signal(lay.packet, name=f"a_pkt{j}") for j in range(L)]
        b_valid = Signal(L)
        b_group = Signal(GROUP_BITS)
        b_expert = [Signal(cfg.expert_bits, name=f"b_expert{j}") for j in range(L)]
        b_row = [Signal(cfg.row_bits, name=f"b_row{j}") for j in range(L)]
        b_chunk = [Signal(cfg.chunk_bits, name=f"b_chunk{j}") for j in range(L)]
        b_data = [Signal(cfg.data_bits, name=f"b_data{j}") for j in range(L)]
        c_valid = Signal(L)
        c_group = Signal(GROUP_BITS)
        c_payload = [Signal(lay.write, name=f"c_wr{j}") for j in range(L)]

        # ------------------------------------------------------------ handshake
        finished = Signal()
        m.d.comb += finished.eq(Cat(
            eos_seen[s] & (closed[s] == opened[s]) & (opened[s] >= eos_cnt[s]) for s in range(S)
        ).all())
        live = Signal()
        m.d.comb += live.eq(armed & ~finished)

        c_stall = Signal()
        m.d.comb += c_stall.eq(Cat(c_valid[j] & ~self.wr[j].ready for j in range(L)).any())
        advance = Signal()
        m.d.comb += advance.eq(~c_stall & (self.ev_free >= L) & (self.cr_free >= L))
        block = Signal()
        m.d.comb += block.eq(start_pending | flush_pending | self.clearing)
        for j in range(L):
            m.d.comb += [
                self.i[j].ready.eq(advance & ~block),
                self.wr[j].valid.eq(c_valid[j]),
                self.wr[j].payload.eq(c_payload[j]),
            ]
        accepted = Signal()
        m.d.comb += accepted.eq(Cat(self.i[j].valid & self.i[j].ready for j in range(L)).any())

        # Decode on the way into A (depends on the packets only, not on the hub's state):
        # range checks, the row-table index and the lane-pair comparisons the table stage
        # needs, so that its state loop starts from registers.
        a_bad_src = Signal(L)
        a_bad_chunk = Signal(L)
        a_idx = [Signal(range(cfg.entries), name=f"a_idx{j}") for j in range(L)]
        a_same_idx = {}
        a_same_src = {}
        for j in range(L):
            for i in range(j):
                a_same_idx[i, j] = Signal(name=f"a_same_idx{i}_{j}")
                a_same_src[i, j] = Signal(name=f"a_same_src{i}_{j}")
        with m.If(advance):
            for j in range(L):
                q = self.i[j].payload
                m.d.sync += [
                    a_valid[j].eq(self.i[j].valid & ~block), a_pkt[j].eq(q),
                    a_bad_src[j].eq((q.src >= S) | (~q.kind & (q.tag >= T))),
                    a_bad_chunk[j].eq(~q.kind & (q.chunk >= C)),
                    a_idx[j].eq(q.src * T + q.tag),
                ]
                for i in range(j):
                    qi = self.i[i].payload
                    m.d.sync += [a_same_idx[i, j].eq((qi.src == q.src) & (qi.tag == q.tag)),
                                 a_same_src[i, j].eq(qi.src == q.src)]

        # ------------------------------------------------------------ table stage (on A)
        reason_hits = {r: [] for r in Reason}
        idx = []
        dat = []
        eos_acc = []
        counted_open = []
        after = []
        complete = []
        post_flag = []
        openers = []
        for j in range(L):
            p = a_pkt[j]
            v = a_valid[j]
            is_eos = p.kind
            bad_src = a_bad_src[j]
            bad_chunk = a_bad_chunk[j]
            ix = a_idx[j]
            d = Signal(name=f"dat{j}")
            eos = Signal(name=f"eos{j}")
            m.d.comb += [
                d.eq(v & live & ~is_eos & ~bad_src & ~bad_chunk),
                eos.eq(v & live & is_eos & ~bad_src),
            ]
            reason_hits[Reason.NOT_ARMED].append(v & ~live)
            reason_hits[Reason.BAD_SOURCE].append(v & live & bad_src)
            reason_hits[Reason.BAD_CHUNK].append(v & live & ~bad_src & bad_chunk)

            # The row as lane j sees it: the table, or the last earlier lane on the same row.
            before = Signal(lay.entry, name=f"before{j}")
            m.d.comb += rt_rd[j].addr.eq(ix)
            stored = Signal(lay.entry, name=f"stored{j}")
            m.d.comb += [
                stored.state.eq(Mux(alloc_v.bit_select(ix, 1), ALLOC,
                                    Mux(drop_v.bit_select(ix, 1), DROP, FREE))),
                stored.expert.eq(rt_rd[j].data.expert), stored.row.eq(rt_rd[j].data.row),
                stored.post_eos.eq(rt_rd[j].data.post_eos), stored.bitmap.eq(rt_rd[j].data.bitmap),
            ]
            sel = stored
            for i in range(j):
                same = Signal(name=f"same{i}_{j}")
                m.d.comb += same.eq(dat[i] & a_same_idx[i, j])
                sel = Mux(same, after[i], sel)
            m.d.comb += before.eq(sel)

            # This source's end-of-stream state and opened rows, as left by earlier lanes.
            seen_eff = eos_seen_rd[p.src]
            cnt_eff = eos_cnt_rd[p.src]
            opened_eff = opened_rd[p.src]
            for i in range(j):
                hit_eos = eos_acc[i] & a_same_src[i, j]
                seen_eff = seen_eff | hit_eos
                cnt_eff = Mux(hit_eos, a_pkt[i].count, cnt_eff)
                opened_eff = opened_eff + (counted_open[i] & a_same_src[i, j])
            seen_j = Signal(name=f"seen{j}")
            cnt_j = Signal(cfg.count_bits, name=f"eoscnt{j}")
            opened_j = Signal(cfg.count_bits + 1, name=f"opened_eff{j}")
            m.d.comb += [seen_j.eq(seen_eff), cnt_j.eq(cnt_eff), opened_j.eq(opened_eff)]

            opener = Signal(name=f"opener{j}")
            is_closed = Signal(name=f"closed{j}")
            bad_expert = Signal(name=f"bad_expert{j}")
            post = Signal(name=f"post_eos{j}")
            m.d.comb += [
                opener.eq(d & (before.state == FREE)),
                is_closed.eq(before.state == CLOSED),
                bad_expert.eq(p.expert >= E),
                post.eq(~bad_expert & seen_j & (opened_j >= cnt_j)),
                self.alloc_req[j].eq(opener & ~bad_expert & ~post),
                self.alloc_expert[j].eq(p.expert),
            ]
            got_row = Signal(name=f"got_row{j}")
            m.d.comb += got_row.eq(self.alloc_ok[j])   # implies alloc_req
            co = Signal(name=f"counted_open{j}")
            m.d.comb += co.eq(opener & ~post)
            reason_hits[Reason.BAD_EXPERT].append(opener & bad_expert)
            reason_hits[Reason.POST_EOS].append(opener & post)
            reason_hits[Reason.OVERFLOW].append(self.alloc_req[j] & ~got_row)

            protocol = Signal(name=f"protocol{j}")
            dup = Signal(name=f"dup{j}")
            m.d.comb += [
                protocol.eq(d & ~opener & ~is_closed & (before.expert != p.expert)),
                dup.eq(d & ~opener & (is_closed | (~protocol & before.bitmap.bit_select(p.chunk, 1)))),
            ]
            reason_hits[Reason.PROTOCOL].append(protocol)
            reason_hits[Reason.DUPLICATE].append(dup)

            setb = Signal(name=f"set{j}")
            bits = Signal(C, name=f"bits{j}")
            state_mid = Signal(2, name=f"state_mid{j}")
            comp = Signal(name=f"complete{j}")
            m.d.comb += [
                setb.eq(d & ~protocol & ~dup),
                bits.eq(Mux(opener, 0, before.bitmap) | Mux(setb, Const(1, C) << p.chunk, 0)),
                state_mid.eq(Mux(opener, Mux(got_row, ALLOC, DROP), before.state)),
                comp.eq(setb & (bits == all_chunks)),
            ]
            aft = Signal(lay.entry, name=f"after{j}")
            m.d.comb += [
                aft.state.eq(Mux(comp, CLOSED, state_mid)),
                aft.expert.eq(Mux(opener, p.expert, before.expert)),
                aft.row.eq(Mux(opener, self.alloc_row[j], before.row)),
                aft.post_eos.eq(Mux(opener, post, before.post_eos)),
                aft.bitmap.eq(bits),
            ]
            wj = Signal(name=f"write{j}")
            m.d.comb += wj.eq(setb & (state_mid == ALLOC))

            ea = Signal(name=f"eos_acc{j}")
            m.d.comb += ea.eq(eos & ~seen_j)
            reason_hits[Reason.EOS_DUPLICATE].append(eos & seen_j)
            reason_hits[Reason.EOS_MISMATCH].append(ea & (p.count < opened_j))

            # Per-row event of lane j: the metadata of the row it opened, or the completion
            # of the row it completed (never both: a row has at least two chunks).
            m.d.comb += [
                self.ev_push_valid[j].eq(advance & ((opener & got_row) | (comp & (state_mid == ALLOC)))),
                self.ev_push_data[j].complete.eq(comp),
                self.ev_push_data[j].expert.eq(aft.expert),
                self.ev_push_data[j].row.eq(aft.row),
                self.ev_push_data[j].src.eq(p.src),
                self.ev_push_data[j].token.eq(p.token),
                self.ev_push_data[j].slot.eq(p.slot),
                self.ev_push_data[j].group.eq(group),
                self.cr_push_valid[j].eq(advance & comp),
                self.cr_push_data[j].src.eq(p.src),
                self.cr_push_data[j].tag.eq(p.tag),
            ]
            idx.append(ix)
            dat.append(d)
            eos_acc.append(ea)
            counted_open.append(co)
            after.append(aft)
            complete.append(comp)
            post_flag.append(aft.post_eos)
            openers.append(opener)

            with m.If(advance):
                m.d.sync += [
                    b_valid[j].eq(wj),
                    b_expert[j].eq(aft.expert),
                    b_row[j].eq(aft.row),
                    b_chunk[j].eq(p.chunk),
                    b_data[j].eq(p.data),
                ]

        m.d.comb += [self.alloc_commit.eq(advance)]

        # ------------------------------------------------------------ commit the table stage
        with m.If(advance):
            m.d.sync += [group.eq(group + 1), b_group.eq(group)]
            # Each entry takes the state left by the last lane that touched it this cycle.
            for j in range(L):
                last = dat[j]
                for k in range(j + 1, L):
                    last = last & ~(dat[k] & a_same_idx[j, k])
                m.d.comb += [
                    rt_wr[j].addr.eq(idx[j]), rt_wr[j].en.eq(last),
                    rt_wr[j].data.expert.eq(after[j].expert), rt_wr[j].data.row.eq(after[j].row),
                    rt_wr[j].data.post_eos.eq(after[j].post_eos),
                    rt_wr[j].data.bitmap.eq(after[j].bitmap),
                ]
            m.d.sync += [alloc_v.eq(_ordered_update(alloc_v, after, dat, idx, ALLOC, cfg.entries)),
                         drop_v.eq(_ordered_update(drop_v, after, dat, idx, DROP, cfg.entries))]
            for s in range(S):
                n_open = _popcount(counted_open[j] & (a_pkt[j].src == s) for j in range(L))
                n_close = _popcount(complete[j] & ~post_flag[j] & (a_pkt[j].src == s)
                                    for j in range(L))
                m.d.sync += [opened[s].eq(opened[s] + n_open), closed[s].eq(closed[s] + n_close)]
                for j in range(L):
                    with m.If(eos_acc[j] & (a_pkt[j].src == s)):
                        m.d.sync += [eos_seen[s].eq(1), eos_cnt[s].eq(a_pkt[j].count)]
        # ------------------------------------------------------------ statistics, a cycle later
        # The drop/overflow/in-flight counters only feed status registers and FLUSH, so the
        # table stage registers its per-lane outcomes and the counters add them up in the
        # next cycle, off the table stage's critical path.
        st_valid = Signal()
        st_hits = {r: Signal(L, name=f"st_{r.name.lower()}") for r in Reason if reason_hits[r]}
        st_open = Signal(L)
        st_comp = Signal(L)
        st_expert = [Signal(cfg.expert_bits, name=f"st_expert{j}") for j in range(L)]
        with m.If(advance):
            m.d.sync += [st_valid.eq(a_valid.any()), st_open.eq(Cat(*openers)),
                         st_comp.eq(Cat(*complete))]
            m.d.sync += [st_hits[r].eq(Cat(*reason_hits[r])) for r in st_hits]
            m.d.sync += [st_expert[j].eq(a_pkt[j].expert) for j in range(L)]
        with m.Else():
            m.d.sync += st_valid.eq(0)
        with m.If(st_valid):
            m.d.sync += inflight.eq(inflight + _popcount(st_open) - _popcount(st_comp))
            ovf = st_hits[Reason.OVERFLOW]
            for e in range(E):
                n_ovf = _popcount(ovf[j] & (st_expert[j] == e) for j in range(L))
                m.d.sync += overflow[e].eq(overflow[e] + n_ovf)
            for r, hits in st_hits.items():
                m.d.sync += drops[r].eq(drops[r] + _popcount(hits))
                with m.If(hits.any()):
                    m.d.sync += errors[r].eq(1)

        # ------------------------------------------------------------ B -> C: address translation
        stride_terms = [k for k in range(cfg.stride_bytes.bit_length()) if cfg.stride_bytes >> k & 1]
        base_rd = Array(self.region_base)
        chunk_shift = cfg.chunk_bytes.bit_length() - 1
        for j in range(L):
            row_off = 0
            for k in stride_terms:
                row_off = row_off + (b_row[j] << k)
            addr = Signal(cfg.addr_bits, name=f"addr{j}")
            m.d.comb += addr.eq(base_rd[b_expert[j]] + row_off + (b_chunk[j] << chunk_shift))
            with m.If(advance):
                m.d.sync += [c_valid[j].eq(b_valid[j]), c_payload[j].addr.eq(addr),
                             c_payload[j].data.eq(b_data[j])]
            with m.Elif(self.wr[j].ready):
                m.d.sync += c_valid[j].eq(0)
        with m.If(advance):
            m.d.sync += c_group.eq(b_group)
        m.d.comb += [
            self.b_busy.eq(b_valid.any()), self.b_group.eq(b_group),
            self.c_busy.eq(c_valid.any()), self.c_group.eq(c_group),
        ]

        # ------------------------------------------------------------ layer control
        pipe_empty = ~a_valid.any() & ~b_valid.any() & ~c_valid.any()
        drained = self.ev_empty & self.tracker_idle & ~b_valid.any() & ~c_valid.any()
        with m.If(self.start):
            m.d.sync += start_pending.eq(1)
        with m.If(self.flush & armed):
            m.d.sync += flush_pending.eq(1)
        with m.If(self.clear_errors):
            m.d.sync += errors.eq(0)
        m.d.comb += [self.layer_start.eq(0), self.mark_dirty.eq(0), self.alloc_clear.eq(0),
                     self.layer_done.eq(0)]

        # Watchdog: an armed layer that accepts nothing for `timeout` cycles is flushed.
        with m.If(~armed | finished | block | accepted | (self.timeout == 0)):
            m.d.sync += idle_cycles.eq(0)
        with m.Else():
            m.d.sync += idle_cycles.eq(idle_cycles + 1)
            with m.If(idle_cycles + 1 >= self.timeout):
                m.d.sync += [flush_pending.eq(1), flush_timeout.eq(1)]

        with m.If(armed & finished & drained):
            # The layer is complete: hand over to the tracker's end-of-layer sweep.
            m.d.sync += [armed.eq(0), sweep_req.eq(1), flush_pending.eq(0), flush_timeout.eq(0)]
        with m.Elif(start_pending & pipe_empty & drained & ~st_valid & ~sweep_req & ~self.start):
            # START: a new layer (a running one is abandoned; the tracker re-clears). A layer
            # that has just finished is swept first (the branch above).
            m.d.comb += [self.layer_start.eq(1), self.alloc_clear.eq(1),
                         self.mark_dirty.eq(armed)]
            m.d.sync += [start_pending.eq(0), flush_pending.eq(0), flush_timeout.eq(0),
                         armed.eq(1), done.eq(0), eos_seen.eq(0), inflight.eq(0)]
            m.d.sync += [alloc_v.eq(0), drop_v.eq(0)]
            m.d.sync += [x.eq(0) for x in eos_cnt + opened + closed + drops + overflow]
        with m.Elif(flush_pending & pipe_empty & drained & ~st_valid):
            with m.If(inflight != 0):
                m.d.sync += [drops[Reason.INCOMPLETE].eq(drops[Reason.INCOMPLETE] + inflight),
                             errors[Reason.INCOMPLETE].eq(1)]
            with m.If(flush_timeout):
                m.d.sync += [drops[Reason.TIMEOUT].eq(drops[Reason.TIMEOUT] + 1),
                             errors[Reason.TIMEOUT].eq(1)]
            m.d.comb += self.mark_dirty.eq(1)
            m.d.sync += [flush_pending.eq(0), flush_timeout.eq(0), armed.eq(0), inflight.eq(0),
                         sweep_req.eq(1)]
            m.d.sync += [alloc_v.eq(0), drop_v.eq(0)]
        with m.If(self.sweep_done):
            m.d.sync += [sweep_req.eq(0), done.eq(1)]
            m.d.comb += self.layer_done.eq(1)

        # ------------------------------------------------------------ status
        m.d.comb += [
            self.sweep_req.eq(sweep_req), self.armed.eq(armed), self.done.eq(done),
            self.inflight.eq(inflight), self.eos_seen.eq(eos_seen), self.errors.eq(errors),
        ]
        for s in range(S):
            m.d.comb += [self.src_rows[s].eq(opened[s]), self.src_eos[s].eq(eos_cnt[s])]
        for e in range(E):
            m.d.comb += self.overflow[e].eq(overflow[e])
        for r in Reason:
            m.d.comb += self.drops[r].eq(drops[r])
        return m
