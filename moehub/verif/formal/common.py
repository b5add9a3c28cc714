"""Pieces every property harness uses: the reset at the start, unconstrained inputs,
protocol assumptions and the reduced configs.

A harness is a plain ``Elaboratable`` in the ``sync`` domain that instantiates the
component, drives its inputs from ``AnySeq``/``AnyConst`` under ``Assume``s (the protocol
the component's neighbours keep in the hub), tracks reference state in its own registers
and states the properties as ``Assert``s and the interesting states as ``Cover``s.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, ResetSignal, Signal
from amaranth.asserts import AnyConst, AnySeq, Initial
from amaranth.hdl import Assert, Assume, Cover

from ...spec.config import HubConfig, load_hub_config


class Props:
    """Adds asserts, assumptions and covers to ``m`` and remembers each one's message by
    its source line (sby's log names a failed property by file and line only)."""

    def __init__(self, m: Module):
        self.m = m
        self.messages: dict[str, list[str]] = {}

    def _add(self, prop, message):
        key = f"{prop.src_loc[0].rsplit('/', 1)[-1]}:{prop.src_loc[1]}"
        if message not in self.messages.setdefault(key, []):
            self.messages[key].append(message)
        self.m.d.comb += prop

    def check(self, cond, message: str, src_loc_at: int = 0) -> None:
        """An assert; ``src_loc_at``: how many more callers up its source line is (a
        harness's own helper)."""
        self._add(Assert(cond, message, src_loc_at=1 + src_loc_at), message)

    def cover(self, cond, message: str) -> None:
        self._add(Cover(cond, message, src_loc_at=1), message)

    def assume(self, cond) -> None:
        self.m.d.comb += Assume(cond, src_loc_at=1)


def reset_first(m: Module) -> None:
    """The proof starts from reset: ``rst`` is high in the first cycle and low after
    (the registers' initial values are their reset values anyway, so this only rules out a
    reset in mid-run, which would also reset the harness's reference state)."""
    m.d.comb += Assume(ResetSignal() == Initial())


def any_seq(m: Module, shape, name: str) -> Signal:
    """A free input: any value in every cycle (named, so it shows in traces)."""
    s = Signal(shape, name=name)
    m.d.comb += s.eq(AnySeq(s.shape()))
    return s


def any_const(m: Module, shape, name: str) -> Signal:
    """A free constant: one arbitrary value for the whole run (the 'chosen' index)."""
    s = Signal(shape, name=name)
    m.d.comb += s.eq(AnyConst(s.shape()))
    return s


def one_hot(v) -> "Value":
    """Exactly one bit of ``v`` is set."""
    return (v != 0) & ((v & (v - 1)) == 0)


def count_ones(bits) -> "Value":
    """Number of set bits of a list of 1-bit values (an adder chain; harness only)."""
    total = Const(0, 1)
    for b in bits:
        total = total + b
    return total


def past_valid(m: Module) -> Signal:
    """1 from the second cycle on (after the reset cycle)."""
    pv = Signal(name="past_valid")
    m.d.sync += pv.eq(1)
    return pv


#: Reduced configs: the tiny hub's structure (power-of-two sizes, out-of-range codes) with
#: fewer/narrower of everything the property does not depend on. See docs/verification.md, "Formal proofs",
#: for why each property carries over to the full configs.
REDUCED = {
    # allocator: tiny's 4 lanes and 3 experts, regions of 8 rows instead of 256
    "alloc-small": dict(max_rows_per_expert=8, min_tile_rows=2, tile_rows=2, max_tile_rows=4),
    # tracker: 2 experts, regions of 8 rows, tiles of 2 or 4 rows (4 tile counters per
    # expert), 16-bit addresses
    "trk-small": dict(experts=2, max_rows_per_expert=8, min_tile_rows=2, tile_rows=2,
                      max_tile_rows=4, addr_bits=16),
    # tracker, the largest that closes: tiny itself but regions of 32 rows instead of 256
    # (3 experts, every tile size 2-16, 32-bit addresses in 4 chunks; 48 counters, not 384)
    "trk-mid": dict(max_rows_per_expert=32, tile_rows=2),
    # packet manager: 2 lanes, 2 sources x 2 tags, 2 experts, 2-chunk rows of 1-byte
    # chunks, 1-bit data and token, regions of 4 rows, 8-bit addresses, queues of 16
    # (the schema's minimum for 2 lanes: 6 groups of 2)
    "pm-small": dict(sources=2, experts=2, lanes=2, chunk_bytes=1, row_bytes=2,
                     tags_per_source=2, max_rows_per_expert=4, tile_rows=2, min_tile_rows=2,
                     max_tile_rows=4, token_bits=1, topk=2, addr_bits=8, data_bits=1,
                     event_queue_depth=16, credit_queue_depth=16, timeout_cycles=0),
}


def formal_config(name: str) -> HubConfig:
    """A config by name: a hub config (``tiny``) or ``tiny/<reduced>`` from :data:`REDUCED`."""
    if "/" in name:
        base, variant = name.split("/", 1)
        return load_hub_config(base).replace(name=name, **REDUCED[variant])
    return load_hub_config(name)


class Internals(dict):
    """A component's signals by name (:func:`elaborate_into`); a missing name says which
    names exist (the RTL renamed a register the invariants read: update the harness)."""

    def __missing__(self, name):
        raise KeyError(f"{name!r}: no signal of that name assigned in the component "
                       f"(known: {', '.join(sorted(self))})")


def elaborate_into(m: Module, name: str, dut, platform=None, into: tuple = ()) -> Internals:
    """Add ``dut`` to ``m`` as submodule ``name``, elaborated here, and return the
    signals its own module assigns, by name -- its registers, which the strengthening
    invariants of a k-induction relate to the harness's reference state. The RTL stays
    as it is: no formal ports, nothing renamed; a name assigned to two signals is left
    out (ambiguous). ``into``: named submodules of the component (e.g. ``"ring"``) to
    elaborate the same way, their signals as ``"ring.<name>"``; other submodules are
    not reached (a ``Memory``'s words are no signals at all)."""
    dm = dut.elaborate(platform)
    dm._flush()
    dut._MustUse__silence = True          # (its module stands in for it)
    m.submodules[name] = dm
    found = Internals(_assigned(dm))
    modules = {"": dm}
    for sub in into:                      # (a dotted path: its parent comes first in ``into``)
        parent, _, leaf = sub.rpartition(".")
        pm_parent = modules[parent]
        if leaf not in pm_parent._named_submodules:
            raise KeyError(f"{sub!r}: no submodule of that name "
                           f"(known: {', '.join(pm_parent._named_submodules)})")
        part, src_loc = pm_parent._named_submodules[leaf]
        pm = part.elaborate(platform)
        pm._flush()
        part._MustUse__silence = True
        pm_parent._named_submodules[leaf] = (pm, src_loc)
        modules[sub] = pm
        found.update({f"{sub}.{n}": v for n, v in _assigned(pm).items()})
    return found


def _assigned(dm) -> dict:
    """The signals a module's statements assign, by name: its registers first, then the
    signals it drives combinationally under names no register has (a name assigned to
    two signals of one kind left out: e.g. a register ``pend`` and the port ``pend`` of a
    submodule it drives, the register wins)."""
    found = {}
    for regs in (True, False):
        seen = {}
        for domain, stmts in dm._statements.items():
            if (domain != "comb") != regs:
                continue
            for st in stmts:
                for s in st._lhs_signals():
                    seen.setdefault(s.name, {})[id(s)] = s
        for n, ss in seen.items():
            if n not in found and len(ss) == 1:
                found[n] = next(iter(ss.values()))
    return found


def memory_words(m: Module, memory: str, depth: int, width: int, name: str) -> tuple[list, tuple]:
    """The words of a component's ``amaranth.lib.memory.Memory`` as signals of the harness,
    for strengthening invariants: ``(words, script)``.

    A memory's words are no Amaranth signals, so an invariant cannot name them and
    k-induction starts the memory anywhere. Yosys's ``memory_map`` turns the memory into
    one flip-flop per word (``<memory>[i]``, e.g. ``dut.counters[3]``, after ``prep
    -flatten``); each word here is a harness signal (a free input until then) that the
    returned Yosys commands (the set's ``script``, run after ``prep``) disconnect from its
    free driver and connect to that flip-flop (they must run after ``memory_map``).
    ``memory`` is the memory's flattened path (``<submodule>.<name>``); ``name`` prefixes
    the harness's signals."""
    words = [any_seq(m, width, f"{name}{i}") for i in range(depth)]
    script = []
    for i, w in enumerate(words):
        free = f"w:{w.name} %ci1:+$anyseq[Y] t:$anyseq %i"
        script += [f"select -assert-count 1 {free}", f"delete {free}",
                   f"select -assert-count 1 w:{memory}[{i}]", f"connect -set {w.name} {memory}[{i}]"]
    return words, tuple(script)


def pick(values, k):
    """values[k] for a signal k (a mux chain; values[0] where k is past the list)."""
    out = values[0]
    for i in range(1, len(values)):
        out = Mux(k == i, values[i], out)
    return out


def fifo_entries(m, regs, name: str, depth: int, width: int):
    """The entries of a component's ``SyncFIFOBuffered`` ``name`` (of ``depth``), oldest
    first (each valid below its level), its pointer invariant and the Yosys commands that
    connect its memory's words (:func:`.common.memory_words`)."""
    D = depth - 1                                   # the memory's words (the rest: r_data)
    words, connect = memory_words(m, f"dut.{name}.storage", D, width, f"{name}_word")
    r_rdy, r_data, inner = regs[f"{name}.r_rdy"], regs[f"{name}.r_data"], regs[f"{name}.inner_level"]
    cons = regs[f"{name}.consume"] if D > 1 else Const(0, 1)
    prod = regs[f"{name}.produce"] if D > 1 else Const(0, 1)

    def word(j):                                    # the j-th oldest word of the memory
        return pick([words[(c + j) % D] for c in range(D)], cons) if D > 1 else words[0]
    entries = [Mux(r_rdy, r_data if q == 0 else word(q - 1), word(min(q, D - 1))) for q in range(depth)]
    # (the output register empty only before a just-written entry moves into it)
    ok = (inner <= D) & (r_rdy | (inner <= 1)) & (cons < D) & (prod < D) & Cat(
        (cons == c) & (inner == n) & (prod == (c + n) % D) for c in range(D) for n in range(D + 1)).any()
    return entries, ok, connect
