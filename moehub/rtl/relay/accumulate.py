"""The reduce-on-combine's accumulate datapath (protocol v3): the arithmetic behind the
:class:`~.reduce_unit.ReduceUnit`'s operations, one chunk of a partial output row a beat.

The reduce unit decides, per partial row, which operation it takes (WRITE: acc = w y;
ADD: acc += w y; LAST: send acc + w y; ONLY: send w y; FLUSH: send acc) and with which
BF16 gate weight; this datapath applies it to the row's chunks as they stream through:
each beat carries the operation, the weight, the chunk's BF16 elements ``y`` and the
accumulator's FP32 elements read for it (``acc``; ignored by WRITE and ONLY), and returns
the new accumulator elements (written back by WRITE and ADD) and their BF16 rounding (the
reduced row's chunk, sent by LAST, ONLY and FLUSH). The arithmetic is the reference
model's to the bit (:class:`moehub.spec.relay.ReduceModel`: ``float32(w * y)``, then
``float32(acc + term)``, then the BF16 rounding; :mod:`.fp`).

Width: ``elements`` BF16 elements a beat, by default a chunk of the hub's data path
(``data_bits / 16``): the datapath keeps up with the packet lane it sits behind. Two
stages, a beat a cycle, stalled as a whole by the output (a beat taken in cycle c leaves
in c + 2 when the output is ready): the product and its rounding, then the sum, its
rounding and the BF16 rounding.
"""
from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import WEIGHT_BITS
from .fp import bf16_of, bf16_product, fp32_sum
from .reduce_unit import Op

#: cycles from a beat in to its result out (the output ready)
LATENCY = 2


def beat_layouts(elements: int) -> tuple:
    """(in, out) payload layouts of a datapath of ``elements`` elements a beat."""
    beat_in = data.StructLayout({"kind": 3, "weight": WEIGHT_BITS,
                                 "y": data.ArrayLayout(16, elements), "acc": data.ArrayLayout(32, elements)})
    beat_out = data.StructLayout({"kind": 3, "acc": data.ArrayLayout(32, elements),
                                  "row": data.ArrayLayout(16, elements)})
    return beat_in, beat_out


class ReduceDatapath(wiring.Component):
    """The accumulate datapath (see the module docstring).

    Attributes
    ----------
    i : In(stream): kind (:class:`~.reduce_unit.Op`), weight (BF16), y[elements] (BF16),
        acc[elements] (FP32)
    o : Out(stream): kind, acc[elements] (FP32: the new accumulator), row[elements] (BF16)
    """

    def __init__(self, cfg: HubConfig, elements: int | None = None):
        if not cfg.relay:
            self._MustUse__silence = True
            raise ValueError(f"hub[{cfg.name}]: a reduce datapath needs relay: true")
        self.cfg = cfg
        self.elements = elements or max(1, cfg.data_bits // 16)
        beat_in, beat_out = beat_layouts(self.elements)
        super().__init__({"i": In(stream.Signature(beat_in)), "o": Out(stream.Signature(beat_out))})

    def elaborate(self, platform):
        m = Module()
        n = self.elements
        en = Signal(name="advance")                  # the pipeline moves (the output free)
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        # stage 1: the products w y, rounded to FP32; the beat's kind and accumulator along
        beat, out = self.i.payload, self.o.payload
        v1, kind1 = Signal(name="v1"), Signal(3, name="kind1")
        term1 = [Signal(32, name=f"term1_{j}") for j in range(n)]
        acc1 = [Signal(32, name=f"acc1_{j}") for j in range(n)]
        prods = [bf16_product(m, beat.weight, beat.y[j], f"prod_{j}") for j in range(n)]
        # stage 2: the new accumulator by the kind, and its BF16 rounding
        new = [Signal(32, name=f"new_{j}") for j in range(n)]
        for j in range(n):
            s = fp32_sum(m, acc1[j], term1[j], f"sum_{j}")
            with m.Switch(kind1):
                with m.Case(Op.WRITE, Op.ONLY):
                    m.d.comb += new[j].eq(term1[j])
                with m.Case(Op.FLUSH):
                    m.d.comb += new[j].eq(acc1[j])
                with m.Default():
                    m.d.comb += new[j].eq(s)
        rows = [bf16_of(m, new[j], f"bf16_{j}") for j in range(n)]
        with m.If(en):
            m.d.sync += [v1.eq(self.i.valid), kind1.eq(beat.kind),
                         self.o.valid.eq(v1), out.kind.eq(kind1)]
            for j in range(n):
                m.d.sync += [term1[j].eq(prods[j]), acc1[j].eq(beat.acc[j]),
                             out.acc[j].eq(new[j]), out.row[j].eq(rows[j])]
        return m
