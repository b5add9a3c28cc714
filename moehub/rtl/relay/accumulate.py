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
(``data_bits / 16``): the datapath keeps up with the packet lane it sits behind. A beat a
cycle through :data:`STEPS` (the product, its rounding, the sum, its rounding, the BF16
rounding: :mod:`.fp`'s steps), with a register in front of the first, after each step
named in :data:`CUTS` and at the output; the whole pipeline stalls when the output is not ready (a beat taken in
cycle c leaves in c + :data:`LATENCY`, the output ready). The cuts are where synthesis put
the deepest paths (``moehub synth-unit reduce_element``): each step is a few gate levels
of one kind -- a multiply, a priority encode, a barrel shift, a 28-bit add, an increment.
"""
from amaranth import Module, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig
from ...spec.formats import WEIGHT_BITS
from . import fp
from .layouts import refuse_without_relay
from .reduce_unit import Op

#: the steps of a beat, in order (each one of :mod:`.fp`'s, on each element)
ROUND = ("lead", "expo", "normalize", "subshift", "round_up", "pack")
STEPS = ("product", "product_sum", *ROUND, "order", "align", "add_lo", "add_hi", *ROUND, "select")
#: the steps a register follows (indexes into STEPS): every one but the product's expo --
#: the 18-bit product's normalize fits in the same cycle (each other cut left out, one at
#: a time, made the deepest stage 22-31 FO4 against 21.5: ``moehub synth-unit
#: reduce_element``) -- the select included, so the output stage is the BF16 rounding
#: alone (the select and the rounding in one stage, 21.5 FO4 alone, were 23.5 in the
#: reduce path, ``moehub synth-unit reduce_path``); the output is registered too
CUTS = frozenset(range(len(STEPS))) - {STEPS.index("expo")}
#: cycles from a beat in to its result out (the output ready): the input register, the
#: cuts, the output register
LATENCY = len(CUTS) + 2


def beat_layouts(elements: int, tag_bits: int = 0) -> tuple:
    """(in, out) payload layouts of a datapath of ``elements`` elements a beat (with a
    ``tag`` of ``tag_bits`` carried from a beat to its result, if any)."""
    tag = {"tag": tag_bits} if tag_bits else {}
    beat_in = data.StructLayout({"kind": 3, "weight": WEIGHT_BITS,
                                 "y": data.ArrayLayout(16, elements), "acc": data.ArrayLayout(32, elements),
                                 **tag})
    beat_out = data.StructLayout({"kind": 3, "acc": data.ArrayLayout(32, elements),
                                  "row": data.ArrayLayout(16, elements), **tag})
    return beat_in, beat_out


class ReduceDatapath(wiring.Component):
    """The accumulate datapath (see the module docstring).

    Attributes
    ----------
    i : In(stream): kind (:class:`~.reduce_unit.Op`), weight (BF16), y[elements] (BF16),
        acc[elements] (FP32), and with ``tag_bits`` a tag
    o : Out(stream): kind, acc[elements] (FP32: the new accumulator), row[elements] (BF16),
        and the beat's tag (what the engine needs of the beat: its chunk's context)
    """

    def __init__(self, cfg: HubConfig, elements: int | None = None, tag_bits: int = 0):
        refuse_without_relay(self, cfg, "a reduce datapath")
        self.cfg = cfg
        self.elements = elements or max(1, cfg.data_bits // 16)
        self.tag_bits = tag_bits
        beat_in, beat_out = beat_layouts(self.elements, tag_bits)
        super().__init__({"i": In(stream.Signature(beat_in)), "o": Out(stream.Signature(beat_out))})

    def elaborate(self, platform):
        m = Module()
        en = Signal(name="advance")                  # the pipeline moves (the output free)
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        beat, out = self.i.payload, self.o.payload
        ctl = {"valid": self.i.valid, "kind": beat.kind, **({"tag": beat.tag} if self.tag_bits else {})}
        lanes = [{"w": beat.weight, "y": beat.y[j], "acc": beat.acc[j]} for j in range(self.elements)]
        # (the beat is registered before the product: the 8 x 8 significand product behind
        # whatever chose the beat -- the engine's join, or a port -- was 22.6-23.6 FO4)
        ctl = _register(m, en, ctl, "in")
        lanes = [_register(m, en, d, f"e{j}_in") for j, d in enumerate(lanes)]
        for k, step in enumerate(STEPS):
            lanes = [self._step(m, step, d, ctl["kind"], f"e{j}_s{k}") for j, d in enumerate(lanes)]
            if k in CUTS:
                ctl = _register(m, en, ctl, f"s{k}")
                lanes = [_register(m, en, d, f"e{j}_s{k}") for j, d in enumerate(lanes)]
        with m.If(en):
            m.d.sync += [self.o.valid.eq(ctl["valid"]), out.kind.eq(ctl["kind"])]
            if self.tag_bits:
                m.d.sync += out.tag.eq(ctl["tag"])
            for j, d in enumerate(lanes):
                m.d.sync += [out.acc[j].eq(d["new"]), out.row[j].eq(fp.bf16(m, d["new"], f"e{j}_bf16"))]
        return m

    @staticmethod
    def _step(m, step: str, d: dict, kind, name: str) -> dict:
        """One step on one element's values: the step's outputs, and the operands later
        steps still need (the accumulator; the rounded product once it exists)."""
        keep = {k: d[k] for k in ("acc", "term") if k in d}
        if step == "pack" and "term" not in d:             # the product's rounding
            return {"acc": d["acc"], "term": fp.pack(m, d, name)["bits"]}
        if step == "pack":                                 # the sum's
            return {**keep, "sum": fp.pack(m, d, name)["bits"]}
        if step == "order":
            return {**keep, **fp.order(m, {"a": d["acc"], "b": d["term"]}, name)}
        if step == "select":
            new = Signal(32, name=f"{name}_new")
            with m.Switch(kind):
                with m.Case(Op.WRITE, Op.ONLY):
                    m.d.comb += new.eq(d["term"])
                with m.Case(Op.FLUSH):
                    m.d.comb += new.eq(d["acc"])
                with m.Default():
                    m.d.comb += new.eq(d["sum"])
            return {"new": new}
        return {**keep, **getattr(fp, step)(m, d, name)}


def _register(m: Module, en, values: dict, name: str) -> dict:
    """Each value of ``values`` through a register loaded while ``en``."""
    out = {}
    for key, v in values.items():
        v = Value.cast(v)
        reg = Signal(v.shape(), name=f"{name}_{key}")
        with m.If(en):
            m.d.sync += reg.eq(v)
        out[key] = reg
    return out


class ReduceElement(ReduceDatapath):
    """One element of the datapath (``moehub synth-unit reduce_element``): its deepest
    stage is the datapath's, and the datapath's area is its area times ``data_bits / 16``
    (the elements share only the beat's kind, weight and valid)."""

    def __init__(self, cfg: HubConfig):
        super().__init__(cfg, 1)
