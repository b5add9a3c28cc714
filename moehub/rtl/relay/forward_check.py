"""The verdict on a received forward row (protocol v3), for the receiving hub's input.

A forward row (:class:`moehub.spec.formats.RelayFormats` ``forward_row``) comes from a
relay hub of this node and carries, as protocol v2's multicast row, the targets on this
GPU with the original source and token. Exactly as
:meth:`moehub.spec.relay.RelayHubModel.forward_verdict`, first reason first:

* FWD_BAD_SOURCE -- an unknown source: the forwarder is outside the node or this GPU, its
  forward tag outside the F window, or the original source is not a remote GPU of the
  forwarder's local rank (node out of range or this node -- a row from this node is never
  forwarded --, or another rank: a relay relays only its own rail);
* FWD_BAD_TARGETS -- no valid entry, an expert out of range, or one expert twice.

A good row's original source as a global id (node x gpus_per_node + rank) is what its
metadata words carry. Purely combinational (compares with constants and the NODE_ID and
LOCAL_RANK registers, ``max_targets``^2/2 expert compares), beside the target decode.
"""
from amaranth import Cat, Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.config import HubConfig, field_bits
from .layouts import refuse_without_relay


class ForwardCheck(wiring.Component):
    """A forward row's verdict (see the module docstring).

    Attributes
    ----------
    node, rank : In
        This hub's node and local rank.
    fwd, ftag, src_node, src_rank : In
        The row's forwarder, forward tag and original source.
    valid : In(max_targets); expert : In(expert_bits).array(max_targets)
        The row's target entries.
    bad_source, bad_targets : Out(1)
        The verdict (at most one set).
    src : Out(src_bits)
        The original source's global id.
    """

    def __init__(self, cfg: HubConfig):
        refuse_without_relay(self, cfg, "a forward check")
        self.cfg = cfg
        M, gb = cfg.max_targets, cfg.gpu_bits
        super().__init__({
            "node": In(cfg.node_bits), "rank": In(gb),
            "fwd": In(gb), "ftag": In(field_bits(cfg.forward_tags)),
            "src_node": In(cfg.node_bits), "src_rank": In(gb),
            "valid": In(M), "expert": In(cfg.expert_bits).array(M),
            "bad_source": Out(1), "bad_targets": Out(1), "src": Out(cfg.src_bits),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        M, G = cfg.max_targets, cfg.node_gpus
        v, x = self.valid, self.expert
        bs = (self.fwd >= G) | (self.fwd == self.rank) | (self.ftag >= cfg.forward_tags) \
            | (self.src_node >= cfg.nodes) | (self.src_node == self.node) | (self.src_rank != self.fwd)
        twice = Cat(*(v[i] & v[k] & (x[i] == x[k]) for i in range(M) for k in range(i + 1, M))).any() \
            if M > 1 else Const(0)
        bt = ~v.any() | Cat(*(v[i] & (x[i] >= cfg.experts) for i in range(M))).any() | twice
        m.d.comb += [self.bad_source.eq(bs), self.bad_targets.eq(~bs & bt),
                     self.src.eq((self.src_node * G + self.src_rank)[:cfg.src_bits])]
        return m
