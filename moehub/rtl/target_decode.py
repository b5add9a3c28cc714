"""Target decode of protocol v2's multicast rows: the packet manager's A-stage part.

With ``max_targets`` > 1 a data packet carries, in place of one expert and slot,
``max_targets`` entries of (valid, expert, slot) (:class:`moehub.spec.formats.HubFormats`).
The row's target set is its valid entries, in entry order (the reference model's
``Packet.targets``, which packs its targets into entries 0, 1, ...; an entry with valid 0
is skipped wherever it sits, so a set with gaps means the same as the set packed).

Per entry this unit forms a valid bit (``tv``: the entry names a target) and the target's
expert as a one-hot (``oh``: zero for an entry not valid or an expert out of range), the
union of the one-hots (``mask``: the experts the row names), and the row's BAD_EXPERT
verdict exactly as :meth:`moehub.spec.model.HubModel._bad_dests`:

* an empty set (no entry valid);
* a valid entry naming an expert >= ``experts``;
* one expert named by two valid entries;
* more than ``max_targets`` targets -- which the packet cannot carry (it has
  ``max_targets`` entries), so this case never reaches the RTL: a model ``Packet`` with
  more targets packs its first ``max_targets`` only (``Format.pack`` ignores the rest).

Purely combinational, for the A stage's input registers: the one-hots are what the
allocator (:class:`moehub.rtl.multicast_allocator.MulticastAllocator`) selects with, so no
decoder sits in front of its counters. Depth: the range check (an ``expert_bits`` compare
with a constant), the one-hot (an ``expert_bits``-input AND), and the duplicate check --
``max_targets * (max_targets - 1) / 2`` equality compares of ``expert_bits`` bits, ORed --
in parallel; a few gate levels.
"""
from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..spec.config import HubConfig


class TargetDecode(wiring.Component):
    """A packet's target set decoded (see the module docstring).

    Parameters
    ----------
    cfg : HubConfig
        ``max_targets`` > 1 (multicast).

    Attributes
    ----------
    valid : In(max_targets)
        The packet's ``valid<i>`` fields.
    expert : In(expert_bits).array(max_targets)
        The packet's ``expert<i>`` fields.
    tv : Out(max_targets)
        Entry i names a target (``valid<i>``).
    oh : Out(experts).array(max_targets)
        Entry i's expert, one-hot; 0 when the entry is not valid or its expert out of range.
    mask : Out(experts)
        The experts the row names (the OR of ``oh``).
    bad : Out(1)
        BAD_EXPERT: the set is empty, names an expert out of range, or one expert twice.
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.multicast:
            self._MustUse__silence = True       # (refused: never elaborated)
            raise ValueError(f"hub[{cfg.name}]: a target decode needs max_targets > 1")
        self.cfg = cfg
        T, E = cfg.max_targets, cfg.experts
        super().__init__({
            "valid": In(T), "expert": In(cfg.expert_bits).array(T),
            "tv": Out(T), "oh": Out(E).array(T), "mask": Out(E), "bad": Out(1),
        })

    def connect_packet(self, m: Module, pkt) -> None:
        """Drive the inputs from a packet payload (a view of ``HubLayouts.packet``)."""
        for i in range(self.cfg.max_targets):
            m.d.comb += [self.valid[i].eq(getattr(pkt, f"valid{i}")),
                         self.expert[i].eq(getattr(pkt, f"expert{i}"))]

    def elaborate(self, platform):
        m = Module()
        T, E = self.cfg.max_targets, self.cfg.experts
        v, x = self.valid, self.expert
        out_of_range = Cat(v[i] & (x[i] >= E) for i in range(T)).any()
        twice = Cat(*(v[i] & v[k] & (x[i] == x[k]) for i in range(T) for k in range(i + 1, T))).any() \
            if T > 1 else Const(0)
        m.d.comb += [
            self.tv.eq(v),
            self.bad.eq(~v.any() | out_of_range | twice),
        ]
        for i in range(T):
            m.d.comb += self.oh[i].eq(Cat(v[i] & (x[i] == e) for e in range(E)))
        m.d.comb += self.mask.eq(Cat(Cat(self.oh[i][e] for i in range(T)).any() for e in range(E)))
        return m
