"""Payload layouts of the relay's streams (protocol v3), from the config's widths: the
same fields as :class:`moehub.spec.formats.RelayFormats` minus the chunk and data (the
relay unit sees a row's target set once, not its chunks)."""
from amaranth.lib import data

from ...spec.config import HubConfig, field_bits
from ...spec.formats import WEIGHT_BITS


class RelayLayouts:
    """The relay unit's payloads for ``cfg`` (``relay: true``).

    * ``row``: an accepted relay row -- source (node, rank), tag, token and
      ``relay_targets`` entries of (valid, gpu, expert, slot, weight: BF16);
    * ``open``: the sum a good relay row opens at the reduce (source node, token, and per
      entry valid, slot, weight: :class:`~.reduce_unit.ReduceUnit`'s ``open``);
    * ``local``: the targets on this GPU as protocol v2's multicast row (``max_targets``
      entries, packed from entry 0 in the relay row's order) with the original source
      (global id) and token;
    * ``fwd``: a forward row -- destination and forwarder rank, forward tag, original
      source (node, rank), token, ``max_targets`` entries packed as ``local``'s;
    * ``rcredit``: a relay row's credit (global source, tag); ``fcredit``: a forward
      credit returned (destination rank, tag).
    """

    def __init__(self, cfg: HubConfig):
        if not cfg.relay:
            raise ValueError(f"hub[{cfg.name}]: relay layouts need relay: true")
        T, M = cfg.relay_targets, cfg.max_targets
        gb, eb, sb = cfg.gpu_bits, cfg.expert_bits, cfg.slot_bits
        self.ftag_bits = field_bits(cfg.forward_tags)       # (the wire format's: holds an out-of-range tag)
        self.row = data.StructLayout({
            "src_node": cfg.node_bits, "src_rank": gb, "tag": cfg.tag_bits, "token": cfg.token_bits,
            "valid": T, "gpu": data.ArrayLayout(gb, T), "expert": data.ArrayLayout(eb, T),
            "slot": data.ArrayLayout(sb, T), "weight": data.ArrayLayout(WEIGHT_BITS, T)})
        self.open = data.StructLayout({
            "src_node": cfg.node_bits, "token": cfg.token_bits, "valid": T,
            "slot": data.ArrayLayout(sb, T), "weight": data.ArrayLayout(WEIGHT_BITS, T)})
        entries = {"valid": M, "expert": data.ArrayLayout(eb, M), "slot": data.ArrayLayout(sb, M)}
        self.local = data.StructLayout({"src": cfg.src_bits, "token": cfg.token_bits, **entries})
        self.fwd = data.StructLayout({
            "dst": gb, "fwd": gb, "ftag": self.ftag_bits, "src_node": cfg.node_bits, "src_rank": gb,
            "token": cfg.token_bits, **entries})
        self.rcredit = data.StructLayout({"src": cfg.src_bits, "tag": cfg.tag_bits})
        self.fcredit = data.StructLayout({"dst": gb, "ftag": self.ftag_bits})
