"""The relay side's wiring (protocol v3): the relay staging's whole rows into the relay
control, its forwards and rows' credits into the forward egress, the egress's and the
staging's credits into the credit join.

::

    staging.row --> relay control --fwd, rcredit--> egress --credit--> join.fu
    staging.done, staging.mark_* ------------------------------------> join

One function, used by :class:`~.hub.RelayHub` and by the co-simulation's relay side
(:func:`moehub.cosim.relay_rtl.relay_side`), so the loop runs the hub's own wiring. What
is left to the caller: the staging's input and memory, the egress's reads and words, the
join's packet-manager credits and its credits out, the relay control's other ports.
"""
from amaranth.lib import wiring


def connect_relay_side(m, stage, relay, egress, join, *, node, rank, base):
    """Add ``stage`` (:class:`~.stage.RelayStage`), ``egress``
    (:class:`~.egress.ForwardEgress`) and ``join`` (:class:`~.credit_join.RelayCredits`) to
    ``m`` as ``stage``, ``egress`` and ``join``, and wire them to ``relay``
    (:class:`~.hub.RelayControl`, added by the caller): the staging's rows into its row
    FIFO (which never refuses: the R credits bound the rows outstanding), its forwards and
    credits into the egress (each forward with its row's R tag), the egress's credits and
    the staging's (dropped rows', rows with no forwards) into the join with the staging's
    marks. ``node``, ``rank`` (this GPU's) and ``base`` (RELAY_STAGE_BASE) drive the three
    parts. ``relay``'s own-target port is left always ready: the input wrote those rows."""
    m.submodules.stage, m.submodules.egress, m.submodules.join = stage, egress, join
    wiring.connect(m, stage.row, relay.row)
    wiring.connect(m, relay.fwd, egress.fwd)
    wiring.connect(m, relay.rcredit, egress.rcredit)
    wiring.connect(m, egress.credit, join.fu)
    wiring.connect(m, stage.done, join.done)
    m.d.comb += [relay.local.ready.eq(1), egress.fwd_tag.eq(relay.fu.held_row.tag),
                 join.mark_valid.eq(stage.mark_valid), join.mark_node.eq(stage.mark_node),
                 join.mark_tag.eq(stage.mark_tag), join.mark_local.eq(stage.mark_local),
                 stage.base.eq(base), egress.base.eq(base), stage.rank.eq(rank), join.rank.eq(rank)]
    m.d.comb += [part.node.eq(node) for part in (stage, egress, join)]
