"""The relay hub's two sides behind its input, wired (protocol v3): the relay side -- the
input's relay chunks into the relay staging, the staging's whole rows into the relay control, its forwards and rows' credits into
the forward egress, the egress's and the staging's credits into the credit join -- and
the combine side -- the input's partial chunks into the partial staging, its whole rows
read back by the feed into the reduce.

::

    ingress.relay --> staging.row --> relay control --fwd, rcredit--> egress --credit--> join.fu
    staging.done, staging.mark_* ------------------------------------> join

    ingress.part --> partial staging.row --> feed --out--> reduce.partial

One function a side, used by :class:`~.hub.RelayHub` and by the co-simulation's loop
(:func:`moehub.cosim.relay_rtl.relay_side`, :func:`~moehub.cosim.relay_rtl.combine_side`),
so the loop runs the hub's own wiring. What is left to the caller: the input's lanes and
its other stream, the stagings' memories, the egress's and the feed's reads, the egress's words, the join's
packet-manager credits and its credits out, the feed's P credits, the relay control's and
the reduce's other ports.
"""
from amaranth.lib import wiring


def connect_relay_side(m, ingress, stage, relay, egress, join, *, node, rank, base):
    """Wire ``ingress``'s relay chunks (:class:`~.ingress.RelayIngress`) into ``stage``
    (:class:`~.stage.RelayStage`), and ``stage``, ``egress``
    (:class:`~.egress.ForwardEgress`) and ``join`` (:class:`~.credit_join.RelayCredits`) to
    ``relay`` (:class:`~.hub.RelayControl`) in ``m`` (the caller adds the five as its
    submodules, and drives the input's ``node`` and ``rank``): the staging's rows into its row
    FIFO (which never refuses: the R credits bound the rows outstanding), its forwards and
    credits into the egress (each forward with its row's R tag), the egress's credits and
    the staging's (dropped rows', rows with no forwards) into the join with the staging's
    marks. ``node``, ``rank`` (this GPU's) and ``base`` (RELAY_STAGE_BASE) drive the three
    parts. ``relay``'s own-target port is left always ready: the input wrote those rows."""
    wiring.connect(m, ingress.relay, stage.i)
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


def connect_combine_side(m, ingress, pstage, feed, reduce, *, base):
    """Wire ``ingress``'s partial chunks (:class:`~.ingress.RelayIngress`; or None: the
    staging's input left to the caller) into ``pstage`` (:class:`~.stage.PartialStage`),
    and ``pstage`` and ``feed`` (:class:`~.partial_feed.PartialFeed`) to ``reduce``
    (:class:`~.reduce_path.ReducePath`; or None: the feed's rows left to the caller), in
    ``m`` (the caller adds them as its submodules): the staging's whole rows into the feed,
    the feed's rows, whole and in chunk order, into the reduce's ``partial``. ``base``
    (PARTIAL_STAGE_BASE) drives the staging and the feed."""
    if ingress is not None:
        wiring.connect(m, ingress.part, pstage.i)
    wiring.connect(m, pstage.row, feed.row)
    if reduce is not None:
        wiring.connect(m, feed.out, reduce.partial)
    m.d.comb += [pstage.base.eq(base), feed.base.eq(base)]
