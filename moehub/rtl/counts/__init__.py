"""Count packets (protocol v2, ``count_packets``): a source announces per expert how many
rows it sends, and the hub refuses rows past the announced total and finalises an expert
as soon as its announced rows are complete.

* :mod:`.gate` -- :class:`~.gate.CountGate`, beside the packet manager's A stage: which
  count packets add (a repeat is COUNT_DUPLICATE), whether an expert has every count in,
  the group's count per expert.
* :mod:`.limit` -- :class:`~.limit.CountLimit`, in the unicast allocator: refuses the rows
  of an expert whose counts are met (COUNT_MISMATCH).
* :mod:`.multicast_limit` -- :class:`~.multicast_limit.MulticastCountLimit`, the same for
  multicast rows (a row is refused when any of its targets is met).
* :mod:`.final` -- :class:`~.final.FinalCounts`, in the tracker: when an expert becomes
  final, in the order of the tracker's event stream.
* :mod:`.expert_totals` -- :class:`~.expert_totals.ExpertCounts`, the stand-alone unit
  (announced totals, completion, early final) verified against the model and synthesised
  on its own (``moehub synth-unit expert_counts``).
"""
