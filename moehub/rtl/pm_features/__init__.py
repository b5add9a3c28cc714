"""The packet manager's protocol-v2 variations, one strategy object per feature, chosen
once when :class:`~moehub.rtl.packet_manager.PacketManager` is built -- its stages call
the strategy's hooks instead of testing configuration flags:

* :mod:`.rows` -- how a row names its experts and where its data lands:
  :class:`~.rows.RegionRows` (one expert, static regions), :class:`~.rows.PagedRows`
  (one expert, pages of the pool), :class:`~.rows.MulticastRows` (up to ``max_targets``
  experts, data once in the arena);
* :mod:`.counts` -- count packets: :class:`~.counts.NoCounts` or
  :class:`~.counts.CountPackets`.

A hook of a feature a config does not have adds nothing (no field, no port, no logic),
so such a hub's netlist is the one it had before the feature existed.
"""
