"""Reference model of protocol v3's relay hub: the dispatch's forwarding and the combine's
reduction, row by row.

Across nodes a token crosses the NIC once per destination node: its source sends one
*relay row* (:class:`RelayRow`) to the hub of the GPU with the source's local rank in
that node, naming every (gpu, expert, slot) target the token has there (the top-k
experts in that node) with each target's gate weight. The relay hub

* writes the targets on its own GPU through protocol v2's multicast path (one
  :class:`LocalRow`, the original source and token in its metadata words, exactly what
  :class:`~moehub.spec.model.HubModel` does with a multicast ``Packet``);
* emits one *forward row* (:class:`ForwardRow`) per other destination GPU of its node --
  protocol v2's multicast row for that GPU, carrying the original source and token, the
  lowest GPU holding a free tag first -- each taking a tag of the forward credit class at
  that GPU;
* returns the relay row's credit (its (source, tag)) once all its forwards have left (a
  dropped relay row's at once, unless its source is unknown: then there is no window);
* on the combine, sums the partial output rows of a (token, node) -- each scaled by its
  gate weight, in FP32 -- and sends one row back across the NIC (:class:`ReduceModel`).

A GPU receiving a forward row (:meth:`RelayHubModel.forward_row`) checks it, writes its
targets as a :class:`LocalRow` and returns the forward credit.

Checks and drops (counted per :class:`~moehub.spec.formats.RelayReason`, the
RELAY_DROPS registers; a dropped row is the whole row, as protocol v2 drops a multicast
row with a bad target), first reason first:

* a relay row: FWD_BAD_SOURCE if its source is no remote GPU of this hub's local rank
  (node out of range or this node, another local rank) or its tag is outside the
  source's window; FWD_BAD_GPU if a target names a GPU outside the node; FWD_BAD_TARGETS
  if it names no target, more than ``relay_targets``, an expert out of range, one
  (gpu, expert) twice, or a top-k slot out of range or twice (the reduction keys a
  token's partial rows by slot);
* a forward row: FWD_BAD_SOURCE if its forwarder is no other GPU of the node, its forward
  tag is out of range, or its original source is not a remote GPU of the forwarder's
  local rank (a row from this node is never forwarded; a relay only relays its own rail);
  FWD_BAD_TARGETS as above (experts, ``max_targets``).

Accounting, the property the RTL and the formal harness check (:func:`audit` across a node):
every (gpu, expert, slot) target of an accepted relay row is written here exactly once
(gpu = this hub's rank) or carried by exactly one forward row; every forward row is
emitted once; every refused row is counted once. Nothing is forwarded twice.

Credits and flow control: why a relay hub never deadlocks with its own sends
-----------------------------------------------------------------------------
Three credit classes, each a window at the receiving hub, each with its own row-table
entries there:

* **D** (direct): a GPU's rows to a GPU of its own node, ``tags_per_source`` per source;
* **R** (relay): a remote GPU's relay rows to the hub of its local rank in this node,
  ``tags_per_source`` per source -- at most ``relay_window = (nodes - 1) x
  tags_per_source`` relay rows at one relay hub;
* **F** (forward): a relay's forward rows to another GPU of its node, ``forward_tags`` per
  (relay, destination) pair. At the destination a forward row is the packet manager's
  row of (original source, forward tag) -- a multicast row of that source, whose metadata
  words then carry it (:func:`ingress`): the entries of a remote source of another rank
  are free for it, because such a source sends this GPU no direct rows, and the
  relay's forward tags towards this GPU are distinct among its rows in flight
  (``forward_tags`` <= ``tags_per_source``). The packet manager's credit of that row is
  the F credit.

What each waits for (a *wait* is an arrow from the thing waiting to the thing it waits on):

1. A hub's **input** (any class) waits only for its own memory writes and its own
   event/credit queues, which drain into memory and into credit messages -- never for a
   credit of its own, and never for its forward unit: an accepted relay row goes into the
   forward unit's row queue, ``relay_window`` deep, and its data into the hub's pool (its
   own targets) or a staging buffer of ``relay_window`` rows (forward-only rows). The
   queue and the buffer can always take a row the hub accepts, because no more than
   ``relay_window`` R credits exist: a source can only send a relay row holding one, and
   the relay returns it only when that row has left both. (ASSUMPTION, as for protocols
   v1 and v2: credit messages are consumed on arrival, on a channel of their own, so a
   credit queue drains whatever the rows on the links do; and a forward enters the
   NVLink egress only holding its F tag, so no forward waits inside a link.)
2. The **forward unit** of hub H waits for an F credit of destination G; G returns it when
   G's input has written the forward row (1), and a forward row is never forwarded again
   (its targets are all G's), so an F credit waits on nothing but G's input.
3. A **source** waits for D credits (its node's inputs, 1) and R credits (the remote
   relay's forward unit, 2, and input, 1).
4. H's **own sends** (the GPU's dispatch kernel) take D and R credits; the forward unit
   takes only F credits. Neither class lends to the other, so H's sends cannot starve its
   forwards of credits nor the reverse.

Every chain of waits therefore runs source -> forward unit -> input -> memory, and no
arrow leaves an input towards a forward unit or a source: the wait-for graph is acyclic,
so no cycle of waits -- no deadlock -- can form, whatever the interleaving, with as few as
one F tag per pair. (What would break it: forwards taking D credits -- H's sends and its
forwards then share a window and a relay row's input could wait for H's own sends to
complete -- or an input that stalls while a forward waits, which makes the cycle
input(H) -> F(G) -> input(G) -> F(H) -> input(H) when G relays for H at the same time;
tests/test_relay_model.py plays that blocking variant into a deadlock and the v3 rules
through random schedules to completion.)

Reduce on combine (:class:`ReduceModel`)
----------------------------------------
The relay opens an accumulator for each accepted relay row, keyed by (original source,
token), expecting one partial row per target (the row's targets, on this GPU or
forwarded). A partial output row returns to the relay with its (source, token, slot); the
relay multiplies it by that slot's gate weight (BF16, from the relay row, widened to
FP32) and adds it into the accumulator in FP32 (each product rounded, then each sum:
no fused multiply-add), in arrival order. The sum is **final** when every expected
partial row has arrived: the relay then sends the one reduced row (rounded to BF16 when
``out="bf16"``) and frees the accumulator -- the source's combine adds the node sums
with no weight. At a flush (the combine's end, the watchdog) sums still open are sent as
they are and counted incomplete. A partial row for no open sum, for a slot not expected
or for one already added is refused and counted (``bad_partials``).

Storage: the accumulators live in HBM, one FP32 row per (remote source, token) the relay
serves -- ``(nodes - 1) x tokens x hidden x 4`` bytes at most (:func:`accumulator_bytes`;
e.g. 117 MB for 2 nodes, 4096 tokens, hidden 7168), too large for SRAM -- with a small
record per open sum (expected slots, slots in and their count, weights; :func:`record_bytes`) in an SRAM
table beside the reduce unit, ``reduce_records`` = ``(nodes - 1) x reduce_tokens`` of them
(:func:`record_table_bits`): a sum's place is (the source's node among the other nodes,
token), so the table holds every sum one layer's combine can open with up to
``reduce_tokens`` tokens per GPU, and nothing else. An open the table has no place for (a
source of this node or of none, a token >= ``reduce_tokens``) makes no sum and is counted
(``NO_RECORD``); its partial rows then come back as ``BAD_PARTIAL``: the source's
software must not send larger batches through the reduce (the co-simulation sizes
``reduce_tokens`` to its layer, :func:`relay_config`). Refusals are counted per
:class:`~moehub.spec.formats.ReduceReason` (the RED_DROPS registers).
Each partial row costs a read-modify-write of the accumulator row in HBM except the
first (a write) and the sum's last (read, added, sent: no write back);
:class:`ReduceModel` counts these bytes. Against today's software reduce (the partial rows
land in HBM, a kernel reads them and writes one, :func:`software_reduce_bytes`) the FP32
read-modify-write moves ``8 (k - 1)`` against ``2 (2k + 1)`` x ``hidden`` bytes for a sum
of k parts: fewer only at k = 2 (8 against 10), more from 3 parts on (k = 4: 24 against
18; k = 8: 56 against 34) -- what it saves is the kernel's
launch and its wait for the last part, not bytes. BF16 accumulators (``acc_bytes=2``)
move fewer bytes at every k (k = 4: 12; k = 8: 28) at the cost of a BF16 rounding per
part; an SRAM window for sums whose parts arrive close together would remove the HBM
traffic altogether (not modelled).

Pure Python and numpy; no Amaranth.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .config import HubConfig, experts_per_gpu, field_bits
from .formats import PacketKind, ReduceReason, RelayFormats, RelayReason, RowClass


# ------------------------------------------------------------------ rows
@dataclass(frozen=True)
class RelayRow:
    """A row for this node from a remote GPU: ``targets`` are ``((gpu, expert, slot,
    weight), ...)`` -- gpu a local rank in this node, weight the gate weight (a float,
    carried as BF16)."""
    src_node: int
    src_rank: int
    tag: int
    token: int
    targets: tuple


@dataclass(frozen=True)
class ForwardRow:
    """A relay's row for GPU ``dst`` of its node: ``targets`` are ``((expert, slot), ...)``
    on that GPU; ``fwd`` is the relay's local rank, ``ftag`` its forward tag at ``dst``."""
    dst: int
    fwd: int
    ftag: int
    src_node: int
    src_rank: int
    token: int
    targets: tuple


@dataclass(frozen=True)
class LocalRow:
    """Targets written on this GPU through protocol v2's multicast path: the original
    source (global GPU id) and token go into each target's metadata word."""
    src: int
    token: int
    targets: tuple


def global_gpu(cfg: HubConfig, node: int, rank: int) -> int:
    """A GPU's id among the hub's sources: node-major (node x gpus_per_node + rank)."""
    return node * cfg.node_gpus + rank


# ------------------------------------------------------------------ configs
#: tokens per GPU the relay configs' reduce keeps records for unless a layer needs more
#: (``reduce_tokens``): the batch DeepEP's normal-mode kernels are benchmarked at (4096
#: tokens per GPU, DeepEP README) and the design point the one-node configs size their
#: regions for (``deepseek-v3-8gpu``: 8 GPUs x 4096 tokens x top-8 / 256 experts)
REDUCE_TOKENS = 4096


def relay_config(cfg: HubConfig, nodes: int, gpus_per_node: int, tokens: int = 0) -> HubConfig:
    """The relay hub's config of a system of ``nodes`` nodes of ``gpus_per_node`` GPUs:
    ``cfg`` is the hub config of one of its GPUs (``sources`` every GPU of the system,
    ``max_targets`` the multicast row a relay implies); the forward class is sized as the
    direct class, ``forward_tags`` = ``tags_per_source`` (ASSUMPTION; the contract needs
    >= 1); the reduce's record table holds :data:`REDUCE_TOKENS` tokens per remote source,
    or the power of two >= ``tokens`` where a layer has more (at most every token id).
    The contract's checks apply (:class:`~moehub.spec.config.ConfigError`).

    The one derivation of the co-simulation's relay layers
    (:func:`moehub.cosim.systems.relay.check_layer`) and of ``moehub synth-unit --nodes``
    (:func:`nodes_config`)."""
    want = max(REDUCE_TOKENS, 1 << max(0, int(tokens) - 1).bit_length())
    return cfg.replace(nodes=nodes, gpus_per_node=gpus_per_node, relay=True,
                       forward_tags=cfg.tags_per_source,
                       reduce_tokens=min(want, 1 << cfg.token_bits))


def nodes_config(cfg: HubConfig, nodes: int) -> HubConfig:
    """The relay hub config of ``nodes`` nodes, each of ``cfg``'s GPUs, as the
    co-simulation derives a multi-node layer's hub from the one-node config it starts from
    (:func:`moehub.cosim.layer.derive_hub`, the multicast feature, :func:`relay_config`):
    ``cfg`` is one node (``sources`` its GPUs, ``experts`` per GPU, so the model has
    ``experts x sources`` experts); the hub hears from every GPU (``sources`` = ``nodes x
    sources``), the model's experts are spread over them (``experts // GPUs`` per GPU, at
    least 1), and the multicast row carries every expert of a token on one GPU
    (``max_targets`` = min(experts, topk)). Named ``<cfg>_nodes-<nodes>``.

    ValueError: ``nodes`` not an integer >= 2, or ``cfg`` already more than one node or a
    relay config; ConfigError: the contract refuses the result. With one expert per GPU
    (``max_targets`` 1) the forward and local rows are plain rows."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise ValueError(f"nodes = {nodes!r}: a relay config needs an integer >= 2")
    if cfg.nodes != 1 or cfg.relay:
        raise ValueError(f"hub[{cfg.name}]: already {cfg.nodes} node(s) (relay = {cfg.relay}); "
                         "the nodes are made from a one-node config")
    gpn = cfg.node_gpus
    gpus, model_experts = nodes * gpn, cfg.experts * gpn
    experts = experts_per_gpu(model_experts, gpus)
    one = cfg.replace(sources=gpus, gpus_per_node=0, experts=experts,
                      max_targets=min(experts, cfg.topk), name=f"{cfg.name}_nodes-{nodes}")
    return relay_config(one, nodes, gpn)


# ------------------------------------------------------------------ BF16
def bf16_bits(x: float) -> int:
    """``x`` as BF16 bits (round to nearest, ties to even; NaN kept a NaN)."""
    u = int(np.float32(x).view(np.uint32))
    if (u & 0x7F800000) == 0x7F800000 and u & 0x7FFFFF:
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits: int) -> np.float32:
    """The FP32 value of BF16 ``bits`` (exact)."""
    return np.uint32((bits & 0xFFFF) << 16).view(np.float32)


def to_bf16(v: np.ndarray) -> np.ndarray:
    """A float32 array rounded to BF16 (round to nearest even), as float32."""
    u = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


# ------------------------------------------------------------------ verdicts
def _bad_targets(cfg: HubConfig, keys: list, width: int) -> bool:
    """Empty, more than ``width`` entries, an expert out of range or a key twice."""
    return not keys or len(keys) > width or len(set(keys)) < len(keys) \
        or any(not 0 <= k[-1] < cfg.experts for k in keys)


def forward_verdict(cfg: HubConfig, node: int, rank: int, row: ForwardRow) -> Optional[RelayReason]:
    """Why a forward row arriving at hub (``node``, ``rank``) is dropped (None: accepted),
    first reason first (see the module docstring)."""
    if not 0 <= row.fwd < cfg.node_gpus or row.fwd == rank \
            or not 0 <= row.ftag < cfg.forward_tags \
            or not 0 <= row.src_node < cfg.nodes or row.src_node == node \
            or row.src_rank != row.fwd:
        return RelayReason.FWD_BAD_SOURCE
    if _bad_targets(cfg, [(x,) for x, _ in row.targets], cfg.max_targets):
        return RelayReason.FWD_BAD_TARGETS
    return None


# ------------------------------------------------------------------ the input
@dataclass(frozen=True)
class Ingress:
    """What a relay hub's input does with one lane's word (:func:`ingress`).

    ``to`` is ``"hub"`` (``packet``, :class:`~moehub.spec.formats.HubFormats`' ``packet``
    fields, goes to the packet manager of protocol v1/v2), ``"relay"`` (a relay row's chunk,
    for the relay side's staging), ``"both"`` (a relay row's chunk with targets on this GPU:
    ``packet`` is its own targets' row) or ``"drop"`` (``reason``). A relay row dropped for
    a bad GPU or bad targets still goes to the relay side (``to`` ``"relay"`` with its
    ``reason``): its credit returns once its chunks are in. ``counted``: the packet counts
    in FWD_IN (a good forward row) or RELAY_DROPS (a dropped one) -- each row once, on its
    chunk 0. ``local``: a relay row's targets include this GPU. ``"partial"``: a partial
    row's chunk, for the partial staging (with ``reason``, a
    :class:`~moehub.spec.formats.ReduceReason`, when the row is dropped with its credit
    owed); a partial row's ``counted`` drop (``"drop"`` or ``"partial"``) counts in
    RED_DROPS, BAD_PARTIAL."""
    to: str
    packet: Optional[dict] = None
    reason: Optional[RelayReason] = None
    counted: bool = False
    local: bool = False


def ingress(cfg: HubConfig, node: int, rank: int, word: int) -> Ingress:
    """The input of the relay hub (``node``, ``rank``) on one lane's word
    (:class:`~moehub.spec.formats.RelayFormats` ``lane``), by its class:

    * DIRECT -- protocol v1/v2's packet, to the packet manager unchanged (its own checks
      apply there), except a data packet from a GPU of another node (``src`` < sources):
      remote GPUs reach this GPU through relays only, and the packet manager's row of
      (that source, tag) may be a forward row's (below), so it is dropped as
      FWD_BAD_SOURCE. End-of-stream and count packets come from every source directly.
    * FORWARD -- checked as :func:`forward_verdict`; a good chunk goes to the packet
      manager as protocol v2's multicast packet (a plain one with ``max_targets`` 1) of
      the original source (global id) with the forward tag as its tag: that (source, tag)
      row is this forward's alone, because a remote source sends this GPU no direct rows
      and its relay's forward tags towards this GPU are distinct among the rows in flight
      (``forward_tags`` <= ``tags_per_source``, a contract check). Its row's credit, when the
      packet manager returns (source, tag) for a remote source of another rank, is the
      forward credit (tag) of that rank's relay.
    * RELAY -- checked as :meth:`RelayHubModel.relay_verdict`. A good chunk goes to the
      relay side (which stages it for the forwards and passes the row on once it is
      whole) and, if the row names targets on this GPU, to the packet manager as protocol
      v2's multicast packet of the original source with the row's tag, its entries those
      of this GPU in the row's order. An unknown source is dropped (no window: no credit);
      a bad GPU or bad targets are dropped and counted, the chunk still to the relay side
      for the row's credit.
    * PARTIAL -- an expert's output row for the reduce (:func:`partial_verdict`): a sender
      that is no GPU of the node or a P tag out of range is dropped (no window: no credit);
      an owner that is no remote GPU of this hub's local rank is dropped with its credit
      still owed (``to`` ``"partial"`` with its reason); both are counted as the reduce's
      BAD_PARTIAL (``reason`` is then a :class:`~moehub.spec.formats.ReduceReason`), once
      per row, on its chunk 0. A good chunk goes to the partial staging, which hands the
      reduce each row whole.
    """
    fmts = RelayFormats(cfg)
    cls = word & 3
    if cls == RowClass.RELAY:
        return _relay_ingress(cfg, node, rank, fmts.relay_row.unpack(word))
    if cls == RowClass.DIRECT:
        d = fmts.direct.unpack(word)
        pkt = {k: v for k, v in d.items() if k != "cls"}
        remote = pkt["src"] < cfg.sources and pkt["src"] // cfg.node_gpus != node
        if pkt["kind"] == PacketKind.DATA and remote:
            return Ingress("drop", reason=RelayReason.FWD_BAD_SOURCE, counted=pkt["chunk"] == 0)
        return Ingress("hub", packet=pkt)
    if cls == RowClass.PARTIAL:
        p = fmts.partial_row.unpack(word)
        why = partial_verdict(cfg, node, rank, p)
        first = p["chunk"] == 0
        if why == "window":
            return Ingress("drop", reason=ReduceReason.BAD_PARTIAL, counted=first)
        if why is not None:
            return Ingress("partial", reason=ReduceReason.BAD_PARTIAL, counted=first)
        return Ingress("partial")
    f = fmts.forward_row.unpack(word)
    M = cfg.max_targets
    targets = tuple((f[f"expert{i}"], f[f"slot{i}"]) for i in range(M) if f[f"valid{i}"])
    row = ForwardRow(rank, f["fwd"], f["ftag"], f["src_node"], f["src_rank"], f["token"], targets)
    why = forward_verdict(cfg, node, rank, row)
    first = f["chunk"] == 0
    if why is not None:
        return Ingress("drop", reason=why, counted=first)
    pkt = {"kind": int(PacketKind.DATA), "src": global_gpu(cfg, f["src_node"], f["src_rank"]),
           "tag": f["ftag"], "token": f["token"], "chunk": f["chunk"], "count": 0, "data": f["data"]}
    if cfg.multicast:
        pkt.update({f"{k}{i}": f[f"{k}{i}"] for i in range(M) for k in ("valid", "expert", "slot")})
    else:
        pkt.update(expert=f["expert0"], slot=f["slot0"])
    return Ingress("hub", packet=pkt, counted=first)


def partial_verdict(cfg: HubConfig, node: int, rank: int, p: dict) -> Optional[str]:
    """Why the relay hub (``node``, ``rank``) drops a partial row's chunk (unpacked
    ``partial_row`` fields), or None: ``"window"`` -- its sender is no GPU of the node or
    its P tag is outside the window (no credit is owed: nothing can have sent it);
    ``"owner"`` -- its owner (``src_node``, ``src_rank``) is no remote GPU of this hub's
    local rank, so no sum here can be its (the credit is owed). A slot the sum does not
    expect is the reduce's to refuse."""
    if p["sender"] >= cfg.node_gpus or p["ptag"] >= cfg.partial_span:
        return "window"
    if p["src_node"] >= cfg.nodes or p["src_node"] == node or p["src_rank"] != rank:
        return "owner"
    return None


def relay_row_of(cfg: HubConfig, r: dict) -> RelayRow:
    """The :class:`RelayRow` of unpacked ``relay_row`` fields (its valid entries; weights as
    their BF16 bits)."""
    T = cfg.relay_targets
    return RelayRow(r["src_node"], r["src_rank"], r["tag"], r["token"],
                    tuple((r[f"gpu{i}"], r[f"expert{i}"], r[f"slot{i}"], r[f"weight{i}"])
                          for i in range(T) if r[f"valid{i}"]))


def _relay_ingress(cfg: HubConfig, node: int, rank: int, r: dict) -> Ingress:
    """:func:`ingress` of a relay row's chunk (unpacked)."""
    row = relay_row_of(cfg, r)
    why = RelayHubModel.verdict_of(cfg, node, rank, row)
    first = r["chunk"] == 0
    if why == RelayReason.FWD_BAD_SOURCE:
        return Ingress("drop", reason=why, counted=first)
    if why is not None:
        return Ingress("relay", reason=why, counted=first)
    own = [(x, sl) for g, x, sl, _w in row.targets if g == rank]
    if not own:
        return Ingress("relay")
    M = cfg.max_targets
    pkt = {"kind": int(PacketKind.DATA), "src": global_gpu(cfg, r["src_node"], r["src_rank"]),
           "tag": r["tag"], "token": r["token"], "chunk": r["chunk"], "count": 0, "data": r["data"]}
    if cfg.multicast:
        ent = own + [(0, 0)] * (M - len(own))
        pkt.update({f"{k}{i}": v for i in range(M)
                    for k, v in (("valid", int(i < len(own))), ("expert", ent[i][0]), ("slot", ent[i][1]))})
    else:
        pkt.update(expert=own[0][0], slot=own[0][1])
    return Ingress("both", packet=pkt, local=True)


# ------------------------------------------------------------------ the relay hub
@dataclass
class _Pending:
    """An accepted relay row in the forward unit's queue: the GPUs it still forwards to."""
    row: RelayRow
    left: list                                  # destination ranks not yet forwarded, ascending
    groups: dict                                # rank -> ((expert, slot), ...)


@dataclass
class RelayEffects:
    """What one row did at a hub."""
    drop: Optional[RelayReason] = None
    local: Optional[LocalRow] = None            #: targets written here
    credit: Optional[tuple] = None              #: a relay row's (src, tag) returned now
    fcredit: Optional[tuple] = None             #: a forward row's (fwd, ftag) returned to its relay


class RelayHubModel:
    """One hub of protocol v3 (see the module docstring): its relay side (relay rows in,
    forward rows out), its receiving side for forward rows, and its reduction.

    Parameters
    ----------
    cfg : HubConfig
        ``relay: true``.
    node, rank : int
        The hub's node and local rank (the NODE_ID and LOCAL_RANK registers).

    Attributes
    ----------
    local : list of LocalRow
        Rows handed to the multicast path, in order (relay rows' own targets, forward rows).
    forwards : list of ForwardRow
        Forward rows emitted, in order.
    credits : list of (src, tag)
        Relay rows' credits returned, in order (global source id, tag).
    fcredits : list of (fwd, ftag)
        Forward credits returned to the node's relays, in order.
    drops : list of (RelayReason, row)
    relay_drops : list of int
        The RELAY_DROPS registers.
    """

    def __init__(self, cfg: HubConfig, node: int = 0, rank: int = 0, out: str = "bf16"):
        if not cfg.relay:
            raise ValueError(f"hub[{cfg.name}]: a relay hub model needs relay: true")
        if not (0 <= node < cfg.nodes and 0 <= rank < cfg.node_gpus):
            raise ValueError(f"(node, rank) = ({node}, {rank}): outside {cfg.nodes} nodes x "
                             f"{cfg.node_gpus} GPUs")
        self.cfg, self.node, self.rank = cfg, node, rank
        self.queue: deque = deque()             # the forward unit's row queue (_Pending)
        self.free = [set(range(cfg.forward_tags)) for _ in range(cfg.node_gpus)]  # F tags per destination
        self.local, self.forwards, self.credits, self.fcredits, self.drops = [], [], [], [], []
        self.relay_drops = [0] * len(RelayReason)
        self.relay_rows = self.relay_local = self.fwd_in = 0
        self.fwd_rows = [0] * cfg.node_gpus
        self.peak_queue = 0
        self.reduce = ReduceModel(cfg, out=out, node=node)

    # ---------------------------------------------------------------- checks
    def _drop(self, fx: RelayEffects, reason: RelayReason, row) -> RelayEffects:
        self.relay_drops[reason] += 1
        self.drops.append((reason, row))
        fx.drop = reason
        return fx

    def _bad_targets(self, keys: list, width: int) -> bool:
        return _bad_targets(self.cfg, keys, width)

    def relay_verdict(self, row: RelayRow) -> Optional[RelayReason]:
        """Why a relay row is dropped (None: accepted), first reason first."""
        return self.verdict_of(self.cfg, self.node, self.rank, row)

    @staticmethod
    def verdict_of(cfg: HubConfig, node: int, rank: int, row: RelayRow) -> Optional[RelayReason]:
        """:meth:`relay_verdict` of hub (``node``, ``rank``)."""
        if not (0 <= row.src_node < cfg.nodes) or row.src_node == node \
                or row.src_rank != rank or not 0 <= row.tag < cfg.tags_per_source:
            return RelayReason.FWD_BAD_SOURCE
        if any(not 0 <= t[0] < cfg.node_gpus for t in row.targets):
            return RelayReason.FWD_BAD_GPU
        slots = [t[2] for t in row.targets]
        if _bad_targets(cfg, [(t[0], t[1]) for t in row.targets], cfg.relay_targets) \
                or len(set(slots)) < len(slots) or any(not 0 <= sl < cfg.topk for sl in slots):
            return RelayReason.FWD_BAD_TARGETS
        return None

    def forward_verdict(self, row: ForwardRow) -> Optional[RelayReason]:
        """Why a forward row arriving here is dropped (None: accepted)."""
        return forward_verdict(self.cfg, self.node, self.rank, row)

    # ---------------------------------------------------------------- rows in
    def relay_row(self, row: RelayRow) -> RelayEffects:
        """An accepted relay row: own targets to the multicast path, the others queued for
        forwarding (one forward row per destination GPU), an accumulator opened."""
        fx = RelayEffects()
        cfg = self.cfg
        why = self.relay_verdict(row)
        if why is not None:
            if why != RelayReason.FWD_BAD_SOURCE:   # (a known window: its credit goes back)
                fx.credit = (global_gpu(cfg, row.src_node, row.src_rank), row.tag)
                self.credits.append(fx.credit)
            return self._drop(fx, why, row)
        self.relay_rows += 1
        src = global_gpu(cfg, row.src_node, row.src_rank)
        groups: dict = {}
        for g, x, slot, _w in row.targets:
            groups.setdefault(g, []).append((x, slot))
        groups = {g: tuple(v) for g, v in groups.items()}
        if self.rank in groups:
            fx.local = LocalRow(src, row.token, groups[self.rank])
            self.local.append(fx.local)
            self.relay_local += 1
        self.reduce.open(src, row.token, tuple((slot, w) for _g, _x, slot, w in row.targets))
        left = sorted(g for g in groups if g != self.rank)
        if not left:
            fx.credit = (src, row.tag)
            self.credits.append(fx.credit)
            return fx
        self.queue.append(_Pending(row, left, groups))
        self.peak_queue = max(self.peak_queue, len(self.queue))
        if len(self.queue) > cfg.relay_window:
            raise AssertionError(f"relay queue holds {len(self.queue)} rows > relay_window "
                                 f"{cfg.relay_window}: a source sent without an R credit")
        return fx

    def forward_row(self, row: ForwardRow) -> RelayEffects:
        """A forward row from a relay of this node: its targets written here, its forward
        credit returned."""
        fx = RelayEffects()
        why = self.forward_verdict(row)
        if why is not None:
            return self._drop(fx, why, row)
        self.fwd_in += 1
        fx.local = LocalRow(global_gpu(self.cfg, row.src_node, row.src_rank), row.token, row.targets)
        self.local.append(fx.local)
        fx.fcredit = (row.fwd, row.ftag)
        self.fcredits.append(fx.fcredit)
        return fx

    # ---------------------------------------------------------------- forwards out
    def ready_dests(self) -> list:
        """Destinations the head row can forward to now (a free F tag there), ascending."""
        if not self.queue:
            return []
        return [g for g in self.queue[0].left if self.free[g]]

    def emit(self, dst: Optional[int] = None) -> Optional[ForwardRow]:
        """One forward row of the head relay row: to ``dst``, or to the lowest destination
        with a free F tag (None if none can go). Its F tag is the lowest free one there. The
        head row's credit returns with its last forward (``credits``)."""
        ready = self.ready_dests()
        if dst is None:
            if not ready:
                return None
            dst = ready[0]
        elif dst not in ready:
            return None
        p = self.queue[0]
        ftag = min(self.free[dst])
        self.free[dst].discard(ftag)
        r = p.row
        out = ForwardRow(dst, self.rank, ftag, r.src_node, r.src_rank, r.token, p.groups[dst])
        self.forwards.append(out)
        self.fwd_rows[dst] += 1
        p.left.remove(dst)
        if not p.left:
            self.queue.popleft()
            self.credits.append((global_gpu(self.cfg, r.src_node, r.src_rank), r.tag))
        return out

    def forward_credit(self, dst: int, ftag: int) -> None:
        """GPU ``dst`` returned F tag ``ftag`` (it wrote the forward row). A tag not out is a
        protocol error of the node's own hubs: ValueError."""
        if not 0 <= dst < self.cfg.node_gpus or not 0 <= ftag < self.cfg.forward_tags \
                or ftag in self.free[dst]:
            raise ValueError(f"forward credit ({dst}, {ftag}) was not handed out")
        self.free[dst].add(ftag)

    def fwd_wait(self) -> int:
        """The FWD_WAIT register: forward rows queued and not yet sent."""
        return sum(len(p.left) for p in self.queue)

    def registers(self) -> dict:
        """The relay registers' values as :class:`~moehub.spec.csr_map.CsrMap` names them,
        keyed (name, index) (NODE_ID and LOCAL_RANK are written by software)."""
        regs = {("NODE_ID", 0): self.node, ("LOCAL_RANK", 0): self.rank,
                ("RELAY_ROWS", 0): self.relay_rows, ("RELAY_LOCAL", 0): self.relay_local,
                ("FWD_WAIT", 0): self.fwd_wait(), ("FWD_IN", 0): self.fwd_in, ("RELAY_OVERFLOW", 0): 0,
                ("RED_ROWS", 0): len(self.reduce.out), ("RED_OPEN", 0): len(self.reduce.acc),
                ("RED_INCOMPLETE", 0): self.reduce.incomplete,
                ("RED_ACC_READS", 0): self.reduce.rows_read, ("RED_ACC_WRITES", 0): self.reduce.rows_written,
                ("RELAY_STAGE_DROPS", 0): 0}
        regs.update({("FWD_ROWS", g): n for g, n in enumerate(self.fwd_rows)})
        regs.update({("RELAY_DROPS", int(r)): n for r, n in zip(RelayReason, self.relay_drops)})
        regs.update({("RED_DROPS", int(r)): n for r, n in zip(ReduceReason, self.reduce.drops())})
        return regs


def audit(cfg: HubConfig, offered: list, hubs: dict) -> dict:
    """The accounting of one node's relay traffic, across its hubs ``{rank: RelayHubModel}``
    after every forward has been delivered: each target of each relay row ``offered`` to
    hub ``rank`` (``[(rank, RelayRow), ...]``) written exactly once in the node -- or the row
    counted as one drop -- and no forward row emitted twice. Returns the counts; raises
    AssertionError naming the first violation."""
    written: dict = {}
    for g, h in hubs.items():
        for lr in h.local:
            for x, slot in lr.targets:
                key = (lr.src, lr.token, g, x, slot)
                written[key] = written.get(key, 0) + 1
    seen = set()
    for h in hubs.values():
        for f in h.forwards:
            key = (f.fwd, f.dst, f.src_node, f.src_rank, f.token)
            assert key not in seen, f"forwarded twice: {f}"
            seen.add(key)
    want, dropped = {}, 0
    for g, row in offered:
        if hubs[g].relay_verdict(row) is not None and not any(r is row for _, r in hubs[g].drops):
            raise AssertionError(f"a bad relay row was not counted: {row}")
        if any(r is row for _, r in hubs[g].drops):
            dropped += 1
            continue
        src = global_gpu(cfg, row.src_node, row.src_rank)
        for tg, x, slot, _w in row.targets:
            key = (src, row.token, tg, x, slot)
            want[key] = want.get(key, 0) + 1
    for key, n in want.items():
        got = written.get(key, 0)
        assert got == n, f"target {key} written {got} times, expected {n}"
    extra = set(written) - set(want)
    assert not extra, f"written but never asked for: {sorted(extra)[:3]}"
    return {"targets": sum(want.values()), "dropped_rows": dropped, "forwards": len(seen)}


# ------------------------------------------------------------------ the reduction
def accumulator_bytes(cfg: HubConfig, tokens: int, hidden: int) -> int:
    """HBM for a relay's FP32 accumulators: one row per (remote source of its rank, token)
    -- at most ``(nodes - 1) x tokens`` sums open in one layer's combine."""
    return (cfg.nodes - 1) * tokens * hidden * 4


def reduce_hbm_bytes(parts: int, hidden: int, acc_bytes: int = 4) -> int:
    """HBM bytes the relay's reduction moves for one sum of ``parts`` partial rows
    (:class:`ReduceModel`'s accounting): the first part written, each middle one read and
    written, the last read (its sum leaves for the NIC, no write back); a single part passes
    straight through. ``acc_bytes``: 4 for FP32 accumulators, 2 for BF16."""
    return 0 if parts <= 1 else 2 * (parts - 1) * hidden * acc_bytes


def partial_stage_bytes(hidden: int, row_bytes: int = 2) -> int:
    """HBM bytes the relay's partial staging moves for one partial row: its chunks arrive
    on the input lanes interleaved with other rows' and the reduce takes a row whole, its
    chunks in order, so the row is written to the staging (``PARTIAL_STAGE_BASE``) as it
    arrives and read back once whole -- a write and a read of the BF16 row."""
    return 2 * hidden * row_bytes


def software_reduce_bytes(parts: int, hidden: int, row_bytes: int = 2) -> int:
    """HBM bytes of today's software relay for the same sum (the X-MoE study's reduce
    kernel, ``moehub.cosim.studies.xmoe_systems``): the ``parts`` BF16 partial rows land in
    the relay's memory, the kernel reads them and writes the one row the NIC sends (a
    single part needs no kernel)."""
    return 0 if parts <= 1 else (2 * parts + 1) * hidden * row_bytes


def record_bytes(cfg: HubConfig) -> int:
    """Record of one open sum: its expected slots and the slots in (a bit per top-k slot
    each: a byte each up to top-8), the open bit and the count of slots in (a byte beside
    them), and the BF16 weight of each of its ``relay_targets`` slots."""
    return 3 + 2 * cfg.relay_targets


def record_table_bits(cfg: HubConfig) -> int:
    """SRAM bits of the reduce's record table: ``reduce_records`` records of the open bit,
    the expected and the in slots (a bit per top-k slot each), the count of slots in and a
    BF16 weight per slot (:class:`~moehub.rtl.relay.reduce_unit.ReduceUnit`'s memory)."""
    return cfg.reduce_records * (1 + 2 * cfg.topk + field_bits(cfg.topk) + 16 * cfg.topk)


class ReduceModel:
    """The relay's reduce-on-combine (module docstring): FP32 accumulators keyed by
    (original source, token), final when every expected partial row is in.

    Attributes
    ----------
    acc : dict
        Open sums: (src, token) -> {"sum", "expect", "weights" (slot -> FP32), "seen"}.
    out : list of (src, token, parts, row)
        Reduced rows sent, in order (``row`` float32, BF16-rounded when ``out="bf16"``).
    incomplete, peak_open : int
    bad_partials, bad_opens, no_record : int
        Refusals per :class:`~moehub.spec.formats.ReduceReason` (:meth:`drops`).
    hbm_read_bytes, hbm_write_bytes : int
        The accumulators' HBM traffic (FP32 rows).
    rows_read, rows_written : int
        The same in accumulator rows (the RED_ACC_READS and RED_ACC_WRITES registers).
    ops : list of (kind, (src, token), slot, parts)
        What the accumulator datapath did, in order: ``write`` (a first part: acc = w y),
        ``add`` (acc += w y), ``last`` (the final part: send acc + w y), ``only`` (a single
        part: send w y), ``flush`` (send acc as it is, incomplete); ``parts`` the parts in
        after it. The RTL's :class:`~moehub.rtl.relay.reduce_unit.ReduceUnit` issues the same.
    """

    def __init__(self, cfg: HubConfig, out: str = "bf16", node: Optional[int] = None):
        """``node``: the relay's node -- opens the record table has no place for (a source
        of this node or of none, a token >= ``reduce_token_span``) are refused; None: a
        stand-alone accumulator that takes any (source, token)."""
        if out not in ("bf16", "fp32"):
            raise ValueError(f"out = {out!r}: must be 'bf16' or 'fp32'")
        self.cfg, self.dtype, self.node = cfg, out, node
        self.acc: dict = {}
        self.out: list = []
        self.incomplete = self.bad_partials = self.bad_opens = self.no_record = self.peak_open = 0
        self.hbm_read_bytes = self.hbm_write_bytes = self.rows_read = self.rows_written = 0
        self.ops: list = []

    def open(self, src: int, token: int, slots: tuple) -> None:
        """A relay row accepted: a sum expecting one partial row per ``(slot, weight)``. A
        second open of a sum still open (a source sends one relay row per (token, node)) is
        refused and counted in ``bad_opens``; the open sum is kept. One the record table
        has no place for is refused and counted in ``no_record``."""
        key = (src, token)
        if self.node is not None and not self.has_record(src, token):
            self.no_record += 1
            return
        if key in self.acc:
            self.bad_opens += 1
            return
        self.acc[key] = {"sum": None, "expect": len(slots), "seen": set(),
                         "weights": {s: bf16_value(bf16_bits(w)) for s, w in slots}}
        self.peak_open = max(self.peak_open, len(self.acc))

    def has_record(self, src: int, token: int) -> bool:
        """Whether the record table has a place for the sum of (global source ``src``,
        ``token``): a source in another node that exists, a token below the span."""
        cfg, node = self.cfg, src // self.cfg.node_gpus
        return 0 <= src < cfg.sources and node != self.node and 0 <= token < cfg.reduce_token_span

    def record_index(self, src: int, token: int) -> int:
        """The record (and accumulator row) of a sum: (the source's node among the other
        nodes, token) -- :class:`~moehub.rtl.relay.reduce_unit.ReduceUnit`'s ``index``."""
        node = src // self.cfg.node_gpus
        return (node - (node > self.node)) * self.cfg.reduce_token_span + token

    def drops(self) -> list:
        """Refusals per :class:`~moehub.spec.formats.ReduceReason` (the RED_DROPS registers)."""
        by = {ReduceReason.BAD_PARTIAL: self.bad_partials, ReduceReason.OPEN_TWICE: self.bad_opens,
              ReduceReason.NO_RECORD: self.no_record}
        return [by[r] for r in ReduceReason]

    def partial(self, src: int, token: int, slot: int, row: np.ndarray):
        """An expert's output row for (src, token, slot): weighted, added in FP32. Returns
        the reduced row ``(src, token, parts, row)`` when this made the sum final, else None;
        a partial row for no open sum, or a slot not expected or seen already, is counted
        in ``bad_partials`` and ignored."""
        a = self.acc.get((src, token))
        if a is None or slot not in a["weights"] or slot in a["seen"]:
            self.bad_partials += 1
            return None
        y = np.asarray(row, np.float32)
        term = (a["weights"][slot] * y).astype(np.float32)
        nbytes = 4 * y.size
        first = a["sum"] is None
        if first:
            a["sum"] = term
        else:
            self.hbm_read_bytes += nbytes
            self.rows_read += 1
            a["sum"] = (a["sum"] + term).astype(np.float32)
        a["seen"].add(slot)
        final = len(a["seen"]) == a["expect"]
        self.ops.append(({(True, True): "only", (True, False): "write", (False, True): "last",
                          (False, False): "add"}[first, final], (src, token), slot, len(a["seen"])))
        if final:
            return self._send((src, token), a)
        self.hbm_write_bytes += nbytes
        self.rows_written += 1
        return None

    def _send(self, key, a):
        del self.acc[key]
        s = a["sum"]
        if s is None:
            s = np.zeros(0, np.float32)
        r = (key[0], key[1], len(a["seen"]), to_bf16(s) if self.dtype == "bf16" else s)
        self.out.append(r)
        return r

    def flush(self) -> list:
        """The combine's end: every open sum sent as it is (read, unless no part came),
        counted incomplete, in the order of a sweep of the records ((source, token))."""
        sent = []
        for key in sorted(self.acc):
            a = self.acc[key]
            self.incomplete += 1
            if a["sum"] is not None:
                self.hbm_read_bytes += 4 * a["sum"].size
                self.rows_read += 1
            self.ops.append(("flush", key, None, len(a["seen"])))
            sent.append(self._send(key, a))
        return sent
