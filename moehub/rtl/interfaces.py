"""The signatures by which the hub's blocks talk to each other.

Each is written from the side that *starts* the exchange (the packet manager towards the
allocator, the queues and the tracker; the CSR bank towards the blocks it configures), so
that side declares ``Out(sig)`` and the other ``In(sig)``, and :mod:`moehub.rtl.hub` joins
them with :func:`amaranth.lib.wiring.connect`. A member added here is added to both ends
at once.
"""
from amaranth import Cat, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig
from ..spec.formats import Reason, config_reasons
from ..spec.timing import GROUP_BITS


def allocation_signature(cfg: HubConfig) -> wiring.Signature:
    """Row requests from the packet manager's T stage to the allocator, answered in the
    same cycle.

    Members
    -------
    req : Out(lanes)                      lane j asks for a row (its expert is in range)
    expert : Out(experts).array(lanes)    the expert, one-hot; zero on a lane that does not ask
                                          for a row (``count_packets``: before the count gate,
                                          which clears ``req`` only)
    same : Out(lanes).array(lanes)        bit i of ``same[j]`` (i < j): lanes i and j name the
                                          same expert (decoded a stage earlier, from the packets
                                          alone: the grant's count of the requests ahead then
                                          needs no experts-wide compare)
    row : In(row_bits).array(lanes)       granted row (valid when ``ok``)
    ok : In(lanes)                        the row fits the expert's region (else: overflow)
    clear : Out(1)                        layer start: zero the counters, latch the capacities

    With ``count_packets`` (:class:`~moehub.rtl.counts.limit.CountLimit`, in the allocator):

    full, add : Out(lanes)                the lane's expert has every count in; its count adds
    nge, free : Out(lanes).array(experts) bit n - 1: at least n requests for the expert; at
                                          least n of them before its counts are all in
    dtot : Out(total_bits).array(experts) the counts the group adds, per expert
    met, over : In(lanes)                 a request refused for counts (``ok`` is 0); a
                                          completing count below the rows held
    """
    L = cfg.lanes
    counts = {}
    if cfg.count_packets:
        from .counts.gate import total_bits
        counts = {"full": Out(L), "add": Out(L), "dtot": Out(total_bits(cfg)).array(cfg.experts),
                  "nge": Out(L).array(cfg.experts), "free": Out(L).array(cfg.experts),
                  "met": In(L), "over": In(L)}
    return wiring.Signature({
        "req": Out(L), "expert": Out(cfg.experts).array(L), "same": Out(L).array(L),
        "row": In(cfg.row_bits).array(L), "ok": In(L), "clear": Out(1), **counts,
    })


#: Copies of the push's valid and rank bits on a multicast hub (:func:`take_copies`): the
#: register and one copy, each read by the takes of half the entries. Synthesis keeps a
#: copy apart only where its next state or reset value differs (``opt_merge``); the one
#: copy that holds the register's value in every cycle, after any reset, is the inverted
#: one (:func:`moehub.rtl.logic.register_copies` with ``zero_at_reset``) -- a copy reset
#: to ones would read 1 in the cycle after reset and equal the register only from reset
#: on, not in every state of the register-by-register equivalence proof.
TAKE_COPIES = 2


def take_copies(cfg: HubConfig) -> int:
    """How many copies of the push's valid and rank registers the packet manager keeps for
    the takes of the event queue: :data:`TAKE_COPIES` on a multicast hub, else 1 (the
    registers themselves, no copy).

    Why only multicast: each entry's take selects the event it stores, so it drives one
    select per event bit behind a buffer tree of its own; and each valid and rank bit
    drives the take of every entry, a second tree in front of it. The multicast event
    carries its targets' experts, rows and slots (232 bits at deepseek-v3-8gpu with every
    protocol-v2 feature, against 47 for the protocol-v1 hub), and the two trees made the
    queue's take the deepest path of those hubs on ASAP7. A narrow event (at most 69 bits
    on any shipped hub without multicast) needs no copy, and those hubs keep their gates."""
    return TAKE_COPIES if cfg.multicast else 1


def queue_push_signature(layout, slots: int, copies: int = 1) -> wiring.Signature:
    """Up to ``slots`` entries pushed per cycle into an :class:`EventQueue`, in slot order.

    The producer reserves room itself (it counts ``pop``), so there is no ready. It also
    counts the valid slots, as one-hots (:func:`push_ranks`), so that it can form them a
    stage ahead, from registers: the queue's compaction then only selects.

    Members
    -------
    valid : Out(slots)                    bit i: slot i carries an entry this cycle
    data : Out(layout).array(slots)
    rank : Out(slots).array(slots)        bit r of slot i: r valid slots come before slot i
    count : Out(slots + 1)                bit c: c slots are valid (a one-hot: bit 0 when none)
    pop : In(1)                           an entry left the queue this cycle
    empty : In(1)                         the queue holds nothing

    With ``copies`` > 1 (:func:`take_copies`), the same bits once per group of entries,
    each from registers of its own, for the takes of group g's entries only (the queue's
    entries in ``copies`` equal groups, in order):

    take_valid : Out(slots).array(copies)              ``valid``
    take_rank : Out(slots).array(slots).array(copies)  ``rank``
    """
    copied = {}
    if copies > 1:
        copied = {"take_valid": Out(slots).array(copies), "take_rank": Out(slots).array(slots).array(copies)}
    return wiring.Signature({
        "valid": Out(slots), "data": Out(layout).array(slots),
        "rank": Out(slots).array(slots), "count": Out(slots + 1), "pop": In(1), "empty": In(1),
        **copied,
    })


def push_ranks(valid):
    """``(rank, count)`` of :func:`queue_push_signature` for the valid bits ``valid``: per
    slot, how many valid slots come before it, and how many are valid, as one-hots."""
    from .logic import count_onehot
    valid = list(valid)
    rank = [Cat(*count_onehot(valid[:i]), Const(0, len(valid) - i - 1)) for i in range(len(valid))]
    return rank, Cat(*count_onehot(valid))


def ordering_guard_signature(cfg: HubConfig) -> wiring.Signature:
    """Where the packet manager's data writes are, for the tracker's ordering guard (a tile
    flag waits until no write of its group or an older one is left).

    Members
    -------
    b_busy : Out(1)                       writes in the B stage this cycle
    b_group : Out(GROUP_BITS)             their group
    c_busy : Out(lanes + 1)               registered, a cycle old: lane j's write FIFO holds a
                                          write (bit ``lanes``: B did)
    c_group : Out(GROUP_BITS).array(lanes + 1)   the group of that FIFO's oldest write (of B's)
    """
    L = cfg.lanes
    return wiring.Signature({
        "b_busy": Out(1), "b_group": Out(GROUP_BITS),
        "c_busy": Out(L + 1), "c_group": Out(GROUP_BITS).array(L + 1),
    })


def layer_handshake_signature() -> wiring.Signature:
    """Layer control between the packet manager and the tracker.

    Members
    -------
    layer_start : Out(1)                  a new layer starts (the tracker clears if dirty)
    mark_dirty : Out(1)                   the tracker's counters are left non-zero (abandoned
                                          or flushed layer)
    sweep_req : Out(1)                    the layer is over: write counts, last tiles, done
    sweep_done : In(1)                    the done word has been written
    idle : In(1)                          the tracker holds nothing
    clearing : In(1)                      the tracker is zeroing its counters (no input)
    """
    return wiring.Signature({
        "layer_start": Out(1), "mark_dirty": Out(1), "sweep_req": Out(1),
        "sweep_done": In(1), "idle": In(1), "clearing": In(1),
    })


def layer_csr_signature() -> wiring.Signature:
    """The CSR bank's layer commands to the packet manager.

    Members
    -------
    start, flush, clear_errors : Out(1)   one-cycle strobes (CTRL bits)
    timeout : Out(32)                     watchdog: idle cycles before a forced flush (0: off)
    """
    return wiring.Signature({
        "start": Out(1), "flush": Out(1), "clear_errors": Out(1), "timeout": Out(32),
    })


def tracker_csr_signature(cfg: HubConfig) -> wiring.Signature:
    """The CSR bank's configuration of the tracker (latched by the tracker at layer start
    where it says so).

    Members
    -------
    epoch : Out(32)                       value of the flag and done words
    tile_rows_log2 : Out(8)               rows per tile (clamped by the CSR bank)
    flag_base, meta_base, count_base : Out(addr_bits)
    """
    A = cfg.addr_bits
    return wiring.Signature({
        "epoch": Out(32), "tile_rows_log2": Out(8),
        "flag_base": Out(A), "meta_base": Out(A), "count_base": Out(A),
    })


def layer_status_signature(cfg: HubConfig) -> wiring.Signature:
    """The packet manager's status, read by software through the CSR bank.

    Members
    -------
    armed, done, sweeping : Out(1)        a layer is accepting rows / over / being swept
    inflight : Out(32)                    rows open
    eos_seen : Out(sources)               end-of-stream received, per source
    src_rows, src_eos : Out(count_bits).array(sources)   rows received; EOS count
    overflow : Out(32).array(experts)     rows dropped for a full region, per expert
    drops : Out(32).array(nr)            drops by reason (nr = len(config_reasons(cfg)))
    errors : Out(nr)                      sticky: a reason occurred (until CLEAR_ERRORS)
    """
    S, nr = cfg.sources, len(config_reasons(cfg))
    return wiring.Signature({
        "armed": Out(1), "done": Out(1), "sweeping": Out(1), "inflight": Out(32),
        "eos_seen": Out(S),
        "src_rows": Out(cfg.count_bits).array(S), "src_eos": Out(cfg.count_bits).array(S),
        "overflow": Out(32).array(cfg.experts), "drops": Out(32).array(nr), "errors": Out(nr),
    })
