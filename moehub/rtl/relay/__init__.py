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
* :mod:`.stage` -- :class:`~.stage.RelayStage`: relay rows' chunks tracked (a bitmap per
  R-window slot) and staged in HBM for the forwards, whole rows to the forward unit.
* :mod:`.egress` -- :class:`~.egress.ForwardEgress`: forward rows read back from the
  staging and sent, a row's credit after its forwards.
* :mod:`.credit_join` -- :class:`~.credit_join.RelayCredits`: a relay row's R credit once
  its own targets are written and its forwards read.
* :mod:`.side` -- :func:`~.side.connect_relay_side` (the input's relay stream, the staging,
  the relay control, the egress and the join) and :func:`~.side.connect_combine_side` (the
  input's partial stream, the partial staging, its feed and the reduce) wired together: the hub's and the co-simulation's two sides.
* :mod:`.hub` -- :class:`~.hub.RelayControl` and :class:`~.hub.RelayHub`.

How they attach to the hub (:class:`~moehub.rtl.hub.MoEHub`, in :class:`~.hub.RelayHub`):
the input sorts each lane's row by its class -- a forward row is the packet manager's row
of (original source, forward tag), a relay row's own targets its row of (original source,
tag): no table of their own -- and hands relay chunks to the staging; the staging hands
whole rows to the relay control's ``relay_window``-deep FIFO in front of
``ForwardUnit.row`` (the FIFO never refuses: the R credits bound the rows outstanding);
``ForwardUnit.fwd`` and ``rcredit`` go to the egress, whose credits, with the packet
manager's, go to the credit join; ``ForwardUnit.local`` is unused there (the input wrote
the own targets); ``fcredit`` comes from the credit messages of the node's GPUs. The
counters read as the relay CSR registers (:func:`moehub.spec.csr_map.relay_registers`).
"""
