"""Bit-level formats shared by the RTL, the reference model and the testbenches.

Pure Python (no Amaranth import): the RTL builds its ``data.StructLayout`` payloads from
the field lists here, and the cocotb drivers/monitors pack and unpack integers with the
same lists, so a field is defined exactly once. Fields are listed low bits first.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .config import HubConfig, field_bits


class PacketKind(enum.IntEnum):
    DATA = 0   #: one chunk of one row
    EOS = 1    #: end of stream: the source sent ``count`` rows to this GPU
    COUNT = 2  #: (protocol v2, ``count_packets``) the source sends ``count`` rows to ``expert``


class CtlKind(enum.IntEnum):
    """What a write on the ordered control-write port is."""
    META = 0   #: a row's metadata word (source, token, slot) in the per-expert index array
    FLAG = 1   #: a tile-ready flag (value = epoch)
    COUNT = 2  #: an expert's final row count, at the end of the layer
    DONE = 3   #: the layer-done word (value = epoch), last write of a layer


class Reason(enum.IntEnum):
    """Why something was dropped or flagged as an error; order = counter/bit index.

    Packet-level reasons count packets; row-level reasons count rows once, when the row
    is opened (INCOMPLETE: when the row is flushed).
    """
    NOT_ARMED = 0      #: packet while no layer is armed (before START, after DONE, after reset)
    BAD_SOURCE = 1     #: source id >= sources, or tag >= tags_per_source (packet)
    BAD_CHUNK = 2      #: chunk index >= chunks_per_row (packet)
    BAD_EXPERT = 3     #: expert id >= experts (row)
    OVERFLOW = 4       #: the expert's region is full (row; also counted per expert)
    POST_EOS = 5       #: a new row after its source's end-of-stream count was reached (row)
    DUPLICATE = 6      #: a chunk that already arrived for this row (packet)
    PROTOCOL = 7       #: a chunk whose expert differs from its row's first chunk (packet)
    INCOMPLETE = 8     #: a row still in flight when the layer was flushed (row)
    EOS_MISMATCH = 9   #: end-of-stream count smaller than the rows already received (event)
    EOS_DUPLICATE = 10 #: a second end-of-stream from the same source (event, ignored)
    TIMEOUT = 11       #: the watchdog flushed the layer (event)
    # ---- protocol v2: reachable only in configs with the feature ----
    COUNT_MISMATCH = 12   #: an expert's rows exceed its announced counts (row dropped), or fall short at the end (event)
    COUNT_DUPLICATE = 13  #: a second count packet from one source for one expert (event, ignored)
    PAGE_BAD = 14         #: a page returned that is not handed out (twice, or never; CSR write ignored)


#: Reasons only protocol v2's features reach (numbered last, so a v1 hub's DROPS and
#: ERRORS stop before them).
V2_REASONS = (Reason.COUNT_MISMATCH, Reason.COUNT_DUPLICATE, Reason.PAGE_BAD)


def config_reasons(cfg: HubConfig) -> tuple:
    """The reasons a hub of ``cfg`` counts (its DROPS array, its ERRORS bits): all of them
    with a protocol v2 feature, else all but :data:`V2_REASONS`."""
    if cfg.multicast or cfg.count_packets or cfg.paged:
        return tuple(Reason)
    return tuple(r for r in Reason if r not in V2_REASONS)


#: Reasons that drop a row (the row's credit is still returned when its chunks are in).
ROW_REASONS = (Reason.BAD_EXPERT, Reason.OVERFLOW, Reason.POST_EOS)


@dataclass(frozen=True)
class Field:
    name: str
    width: int


class Format:
    """An ordered list of fields, low bits first, with pack/unpack of Python ints."""

    def __init__(self, name: str, fields: list[Field]):
        self.name = name
        self.fields = fields
        self.offsets = {}
        off = 0
        for f in fields:
            self.offsets[f.name] = off
            off += f.width
        self.width = off
        self.widths = {f.name: f.width for f in fields}

    def pack(self, **values) -> int:
        word = 0
        for f in self.fields:
            v = int(values.get(f.name, 0))
            if v < 0 or v >> f.width:
                raise ValueError(f"{self.name}.{f.name} = {v} does not fit {f.width} bits")
            word |= v << self.offsets[f.name]
        return word

    def unpack(self, word: int) -> dict:
        return {f.name: (word >> self.offsets[f.name]) & ((1 << f.width) - 1) for f in self.fields}

    def __repr__(self):
        return f"Format({self.name}, {[(f.name, f.width) for f in self.fields]})"


class HubFormats:
    """All formats of one hub configuration."""

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        kind = Field("kind", 2 if cfg.count_packets else 1)
        tail = [Field("chunk", cfg.chunk_bits), Field("count", cfg.count_bits), Field("data", cfg.data_bits)]
        if not cfg.multicast:
            self.packet = Format("packet", [
                kind, Field("src", cfg.src_bits), Field("tag", cfg.tag_bits),
                Field("expert", cfg.expert_bits), Field("token", cfg.token_bits),
                Field("slot", cfg.slot_bits), *tail])
        else:   # (up to max_targets (valid, expert, slot) entries; a count packet uses expert0)
            self.packet = Format("packet", [
                kind, Field("src", cfg.src_bits), Field("tag", cfg.tag_bits),
                *[Field(f"{k}{i}", w) for i in range(cfg.max_targets)
                  for k, w in (("valid", 1), ("expert", cfg.expert_bits), ("slot", cfg.slot_bits))],
                Field("token", cfg.token_bits), *tail])
        self.write = Format("write", [Field("addr", cfg.addr_bits), Field("data", cfg.data_bits)])
        self.ctl = Format("ctl", [Field("kind", 2), Field("addr", cfg.addr_bits),
                                  Field("data", 8 * cfg.meta_word_bytes)])
        self.credit = Format("credit", [Field("src", cfg.src_bits), Field("tag", cfg.tag_bits)])
        self.meta_word = Format("meta_word", [Field("src", cfg.src_bits),
                                              Field("token", cfg.token_bits),
                                              Field("slot", cfg.slot_bits)]
                                + ([Field("loc", cfg.loc_bits)] if cfg.multicast else []))
        #: a tile flag: the layer's epoch; paged without multicast, the tile's page above
        #: 16 bits of epoch (the GEMM finds the tile's rows there)
        self.flag_word = Format("flag_word", [Field("epoch", 32)] if not (cfg.paged and not cfg.multicast)
                                else [Field("epoch", 16), Field("page", 16)])


# ---- addresses the hub forms (one definition, used by model and tests) ----

def data_addr(cfg: HubConfig, region_base: int, row: int, chunk: int) -> int:
    """Chunk ``chunk`` of row ``row`` of a region (or of the pool, ``row`` its place there)."""
    return (region_base + row * cfg.stride_bytes + chunk * cfg.chunk_bytes) % (1 << cfg.addr_bits)


def meta_addr(cfg: HubConfig, meta_base: int, expert: int, row: int) -> int:
    return (meta_base + (expert * cfg.max_rows_per_expert + row) * cfg.meta_word_bytes) \
        % (1 << cfg.addr_bits)


def flag_addr(cfg: HubConfig, flag_base: int, expert: int, tile: int) -> int:
    return (flag_base + 4 * (expert * cfg.tiles_per_expert + tile)) % (1 << cfg.addr_bits)


def count_addr(cfg: HubConfig, count_base: int, expert: int) -> int:
    """Expert e's final row count; index ``experts`` is the layer-done word."""
    return (count_base + 4 * expert) % (1 << cfg.addr_bits)


# ---- protocol v3: relay hubs (rows that cross nodes once and are forwarded in the node) ----

class RowClass(enum.IntEnum):
    """What a row on a protocol-v3 hub's input is (the ``cls`` field of the v3 formats)."""
    DIRECT = 0   #: from a GPU of this node, to this GPU's experts (protocol v1/v2's row)
    RELAY = 1    #: from a remote GPU of this hub's local rank: the token's targets in this node
    FORWARD = 2  #: from a relay hub of this node: a relay row's targets on this GPU
    PARTIAL = 3  #: from a GPU of this node (this one too): an expert's output row for the reduce of a remote token


class RelayReason(enum.IntEnum):
    """Why a relay hub dropped a row (index of the RELAY_DROPS registers). Apart from
    :class:`Reason` (whose members and counts the v1/v2 hubs' DROPS and ERRORS arrays
    fix): a v3 hub counts these in a register array of their own."""
    FWD_BAD_GPU = 0      #: a relay row names a GPU outside the node (local rank >= gpus_per_node)
    FWD_BAD_SOURCE = 1   #: unknown source: a relay row not from a remote GPU of this local rank, or a
                         #: forwarded row whose forwarder or original source cannot have sent it
    FWD_BAD_TARGETS = 2  #: a relay or forwarded row with no target, an expert out of range, a
                         #: (gpu, expert) named twice, or (relay row) a top-k slot out of range or twice


class ReduceReason(enum.IntEnum):
    """What a relay hub's reduce-on-combine refused (index of the RED_DROPS registers): a
    partial row dropped, or an open that made no sum (its partial rows then come back as
    BAD_PARTIAL)."""
    BAD_PARTIAL = 0      #: a partial output row for no open sum, a slot the sum does not expect, or one already in
    OPEN_TWICE = 1       #: an open of a sum still open (a source sends one relay row per (token, node)); the open sum kept
    NO_RECORD = 2        #: an open the record table has no place for: the source's node this hub's or
                         #: none, or the token >= ``reduce_tokens``


#: bits of a gate weight carried per target of a relay row (BF16)
WEIGHT_BITS = 16


class RelayPorts:
    """The payloads of the relay units' streams (protocol v3) as field widths, low bits
    first: a field is a width, or ``(width, count)`` for an array (element 0 lowest).
    :class:`moehub.rtl.relay.layouts.RelayLayouts` builds the Amaranth layouts from them;
    testbenches pack and unpack with :func:`pack_fields` and :func:`unpack_fields`.

    * ``row``: an accepted relay row -- source (node, rank), tag, token and
      ``relay_targets`` entries of (valid, gpu, expert, slot, weight: BF16);
    * ``open``: the sum a good relay row opens at the reduce (source node, token, and per
      entry valid, slot, weight);
    * ``local``: the targets on this GPU as protocol v2's multicast row (``max_targets``
      entries, packed from entry 0 in the relay row's order) with the original source
      (global id) and token;
    * ``fwd``: a forward row -- destination and forwarder rank, forward tag, original
      source (node, rank), token, ``max_targets`` entries packed as ``local``'s;
    * ``rcredit``: a relay row's credit (global source, tag); ``fcredit``: a forward
      credit returned (destination rank, tag);
    * ``pstage``: a partial row's chunk from the input to the partial staging -- the
      sender's rank, its P tag, the owner's node, token, slot, chunk, data and ``drop``
      (the row is dropped: only its credit is owed); ``pcredit``: a partial row's credit
      (the sender's local rank, its P tag), returned once the row has left the staging;
    * ``stage``: a relay row's chunk from the relay hub's input to its staging -- the
      row's fields as ``row``, then chunk, data, ``drop`` (the row is dropped: only its
      credit is owed) and ``local`` (it names targets on this GPU).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.relay:
            raise ValueError(f"hub[{cfg.name}]: relay ports need relay: true")
        T, M = cfg.relay_targets, cfg.max_targets
        gb, eb, sb = cfg.gpu_bits, cfg.expert_bits, cfg.slot_bits
        self.ftag_bits = field_bits(cfg.forward_tags)       # (the wire format's: holds an out-of-range tag)
        self.row = {"src_node": cfg.node_bits, "src_rank": gb, "tag": cfg.tag_bits, "token": cfg.token_bits,
                    "valid": T, "gpu": (gb, T), "expert": (eb, T), "slot": (sb, T), "weight": (WEIGHT_BITS, T)}
        self.open = {"src_node": cfg.node_bits, "token": cfg.token_bits, "valid": T,
                     "slot": (sb, T), "weight": (WEIGHT_BITS, T)}
        entries = {"valid": M, "expert": (eb, M), "slot": (sb, M)}
        self.local = {"src": cfg.src_bits, "token": cfg.token_bits, **entries}
        self.fwd = {"dst": gb, "fwd": gb, "ftag": self.ftag_bits, "src_node": cfg.node_bits,
                    "src_rank": gb, "token": cfg.token_bits, **entries}
        self.rcredit = {"src": cfg.src_bits, "tag": cfg.tag_bits}
        self.stage = {**self.row, "chunk": cfg.chunk_bits, "data": cfg.data_bits, "drop": 1, "local": 1}
        self.fcredit = {"dst": gb, "ftag": self.ftag_bits}
        self.ptag_bits = field_bits(cfg.partial_span)
        self.pstage = {"sender": gb, "ptag": self.ptag_bits, "src_node": cfg.node_bits,
                       "token": cfg.token_bits, "slot": sb, "chunk": cfg.chunk_bits,
                       "data": cfg.data_bits, "drop": 1}
        self.pcredit = {"sender": gb, "ptag": self.ptag_bits}


class ReducePorts:
    """The payloads of the reduce-on-combine's streams (protocol v3,
    :class:`moehub.rtl.relay.reduce_path.ReducePath`) as field widths, low bits first (as
    :class:`RelayPorts`), for a path of ``elements`` BF16 elements a chunk and ``chunks``
    chunks a row:

    * ``open``: :class:`RelayPorts`' ``open``;
    * ``partial``: a chunk of a partial output row with its header (source node, token,
      top-k slot; the data's element 0 lowest);
    * ``rd``: an accumulator chunk's read (address); ``wr``: its write (address, FP32 data);
    * ``out``: a chunk of a reduced row (source node and rank, token, parts summed, chunk,
      BF16 data). ``rdata`` is ``32 x elements`` bits.
    """

    def __init__(self, cfg: HubConfig, elements: int, chunks: int):
        self.open = RelayPorts(cfg).open
        self.partial = {"src_node": cfg.node_bits, "token": cfg.token_bits, "slot": cfg.slot_bits,
                        "data": 16 * elements}
        self.rd = {"addr": cfg.addr_bits}
        self.wr = {"addr": cfg.addr_bits, "data": 32 * elements}
        self.out = {"src_node": cfg.node_bits, "src_rank": cfg.gpu_bits, "token": cfg.token_bits,
                    "parts": field_bits(cfg.topk), "chunk": field_bits(chunks - 1), "data": 16 * elements}


def _field_width(f) -> int:
    return f[0] * f[1] if isinstance(f, tuple) else f


def pack_fields(fields: dict, values: dict) -> int:
    """``values`` (an int per field, a sequence per array; missing fields, and an array
    given as 0, are 0) as one word laid out as ``fields`` (:class:`RelayPorts`)."""
    word, at = 0, 0
    for name, f in fields.items():
        v = values.get(name, 0)
        if isinstance(f, tuple):
            w, n = f
            for i in range(n):
                word |= ((0 if isinstance(v, int) else int(v[i])) & ((1 << w) - 1)) << (at + i * w)
        else:
            word |= (int(v) & ((1 << f) - 1)) << at
        at += _field_width(f)
    return word


def unpack_fields(fields: dict, word: int) -> dict:
    """:func:`pack_fields`' inverse: a dict, a list per array."""
    out, at = {}, 0
    for name, f in fields.items():
        if isinstance(f, tuple):
            w, n = f
            out[name] = [(word >> (at + i * w)) & ((1 << w) - 1) for i in range(n)]
        else:
            out[name] = (word >> at) & ((1 << f) - 1)
        at += _field_width(f)
    return out


class RelayFormats:
    """The row formats of protocol v3 (``relay: true``), low bits first, as
    :class:`HubFormats`:

    * ``relay_row``: a row for a remote node -- the original source as (node, local rank),
      the source's tag (its window at the relay), the token and ``relay_targets`` entries
      of (valid, gpu, expert, slot, weight): every (gpu, expert, slot) target the token has
      in the relay's node, each with its gate weight (BF16, kept by the relay for the
      reduce-on-combine), then chunk and data;
    * ``forward_row``: what the relay sends one GPU of its node -- protocol v2's multicast
      row (``max_targets`` entries of (valid, expert, slot)) with the forwarder's local
      rank and a tag of the forward credit class (``forward_tags`` per pair), keeping the
      original source and token;
    * ``partial``: the header of an expert's output row returned to the relay for the
      reduce (original source, token, top-k slot);
    * ``partial_row``: a partial output row on the relay's input lanes -- the sender's
      local rank and a tag of the partial credit class (``partial_span`` per (sender,
      relay) pair), then ``partial``'s header, chunk and data;
    * ``reduced``: the header of the one row per (token, node) the relay sends back;
    * ``direct``: a row of protocol v1/v2 (:class:`HubFormats`' ``packet``, end-of-stream
      and count packets too) behind the class field;
    * ``lane``: what one input lane of a relay hub carries -- ``lane_bits`` bits, the class
      (:class:`RowClass`) in the low two, the rest one of ``direct``, ``relay_row``,
      ``forward_row`` or ``partial_row`` as the class says (each laid out from bit 0, the class its first
      field; the bits above the narrower formats are 0).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.relay:
            raise ValueError(f"hub[{cfg.name}]: relay formats need relay: true")
        self.cfg = cfg
        cls = Field("cls", 2)
        src = [Field("src_node", cfg.node_bits), Field("src_rank", cfg.gpu_bits)]
        tail = [Field("chunk", cfg.chunk_bits), Field("data", cfg.data_bits)]
        self.relay_row = Format("relay_row", [
            cls, *src, Field("tag", cfg.tag_bits), Field("token", cfg.token_bits),
            *[Field(f"{k}{i}", w) for i in range(cfg.relay_targets)
              for k, w in (("valid", 1), ("gpu", cfg.gpu_bits), ("expert", cfg.expert_bits),
                           ("slot", cfg.slot_bits), ("weight", WEIGHT_BITS))],
            *tail])
        self.forward_row = Format("forward_row", [
            cls, Field("fwd", cfg.gpu_bits), Field("ftag", field_bits(cfg.forward_tags)),
            *src, Field("token", cfg.token_bits),
            *[Field(f"{k}{i}", w) for i in range(cfg.max_targets)
              for k, w in (("valid", 1), ("expert", cfg.expert_bits), ("slot", cfg.slot_bits))],
            *tail])
        self.partial = Format("partial", [*src, Field("token", cfg.token_bits),
                                          Field("slot", cfg.slot_bits)])
        self.partial_row = Format("partial_row", [
            cls, Field("sender", cfg.gpu_bits), Field("ptag", field_bits(cfg.partial_span)),
            *self.partial.fields, *tail])
        self.reduced = Format("reduced", [*src, Field("token", cfg.token_bits),
                                          Field("parts", field_bits(cfg.relay_targets))])
        self.direct = Format("direct", [cls, *HubFormats(cfg).packet.fields])
        self.lane_bits = max(self.direct.width, self.relay_row.width, self.forward_row.width,
                             self.partial_row.width)
