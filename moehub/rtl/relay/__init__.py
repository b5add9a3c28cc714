"""Relay hubs (protocol v3, ``relay: true``): a row for a remote node crosses the NIC once
and the relay hub of the source's local rank there writes its own targets and forwards the
rest in its node (reference model: :mod:`moehub.spec.relay`).

* :mod:`.layouts` -- the payloads of the relay's streams (a relay row's target set, a
  forward row, a local row for the multicast path, a credit).
* :mod:`.forward_unit` -- :class:`~.forward_unit.ForwardUnit`: takes an accepted relay
  row's target set, checks it (RelayReason), reports its own targets to the multicast
  path and emits one forward row per other destination GPU under the forward credit
  class, then returns the row's credit.
* :mod:`.forward_check` -- :class:`~.forward_check.ForwardCheck`: a received forward
  row's verdict (an unknown source, bad targets), for the receiving hub's input.
* :mod:`.reduce_unit` -- :class:`~.reduce_unit.ReduceUnit`: the reduce-on-combine's
  accumulate / finalise control (weights, expected parts, when a sum is final).
* :mod:`.accumulate` -- :class:`~.accumulate.ReduceDatapath`: the FP32 weighted
  accumulate and BF16 rounding, a chunk a beat.
* :mod:`.reduce_engine` -- :class:`~.reduce_engine.ReduceEngine`: the unit's operations
  carried out on the rows' data, the accumulators read and written in HBM in order.
* :mod:`.reduce_path` -- :class:`~.reduce_path.ReducePath`: the reduce whole (unit,
  engine, the partial rows' intake).
* :mod:`.ingress` -- :class:`~.ingress.RelayIngress`: the relay hub's input lanes, each
  packet sorted by its class; a received forward row becomes protocol v2's multicast
  packet of its original source for the unchanged packet manager.
* :mod:`.hub` -- :class:`~.hub.RelayControl` and :class:`~.hub.RelayHub`.

How they attach to the hub (:class:`~moehub.rtl.hub.MoEHub`). Wired: the input (a
forward row is the packet manager's row of (original source, forward tag): no table of
its own). Not wired yet: the packet
manager opens a relay row's data into the pool (its own targets) or a staging area of
``relay_window`` rows (forward-only rows) and pushes the row's target set, once its first
chunk is accepted, into a ``relay_window``-deep FIFO in front of ``ForwardUnit.row`` (the
FIFO never refuses: the R credits bound the rows outstanding). ``ForwardUnit.local`` feeds
the multicast allocator's request of a lane reserved for it (the target set as a v2
multicast row, the original source and token in the metadata); ``fwd`` goes to the NVLink
egress (a DMA reading the staged row); ``fcredit`` comes from the credit messages of the
node's GPUs; ``rcredit`` merges into the hub's credit queue after the row's data left.
A received forward row takes ``ForwardCheck`` in the input, per lane. The counters
read as the relay CSR registers (:func:`moehub.spec.csr_map.relay_registers`).
"""
