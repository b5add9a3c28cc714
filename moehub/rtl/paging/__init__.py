"""Paged receive memory (protocol v2, ``pool_pages`` > 0): the pool's pages are handed to
experts (unicast) or to the multicast arena one tile of rows at a time, and software
returns them between layers (PAGE_FREE).

* :mod:`.pool` -- :class:`~.pool.PagePool`, which pages are free (the FIFO of free pages
  and the return check), verified against the model as a unit.
* :mod:`.ring` -- the ring of returned pages (registers below 32 pages, banked memories
  above).
* :mod:`.regions` -- unicast paged regions in the pipeline: :class:`~.regions.PageSupply`
  (the pool with the ring, up to ``lanes`` takes a cycle) and :class:`~.regions.PageGate`
  (between the packet manager's T stage and the allocator: each granted row's page, or a
  refusal), and :func:`~.regions.tile_sizes`.
* :mod:`.arena` -- :class:`~.arena.PagedArena`, the multicast arena's rows in pages.
"""
