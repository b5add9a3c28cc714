"""The register program that configures the hub for one layer, in the hub's own terms.

One list of ``(register, value, index)`` writes -- region bases and capacities, the
metadata, flag and count arrays, the epoch, the tile size, the timeout and protocol v2's
pool -- ending with CTRL.START. The RTL testbenches, the Verilog player, the reference
model and the co-simulation's vectorised hub all program a layer from it, so they agree on
where every row, flag and count lands.
"""
from __future__ import annotations

from .config import HubConfig
from .csr_map import CTRL_START, CsrMap


def default_layout(cfg: HubConfig) -> dict:
    """Region bases and array bases used by player runs (same as the co-simulation's)."""
    base = 0
    bases = []
    for _ in range(cfg.experts):
        bases.append(base)
        base += cfg.max_rows_per_expert * cfg.stride_bytes
    flag_base = base
    meta_base = flag_base + 4 * cfg.experts * cfg.tiles_per_expert
    count_base = meta_base + cfg.experts * cfg.max_rows_per_expert * cfg.meta_word_bytes
    return dict(region_base=bases, flag_base=flag_base, meta_base=meta_base,
                count_base=count_base)


def layer_program(cfg: HubConfig, *, caps=None, tile_rows_log2=None, epoch=1, timeout=0,
                  layout=None) -> list:
    """The register writes ``(name, value, index)`` that configure a layer, ending with
    CTRL.START: region bases and capacities (default ``max_rows_per_expert``), the array
    bases of ``layout`` (default :func:`default_layout`), EPOCH, TILE_ROWS_LOG2 (default the
    configuration's tile size), TIMEOUT and (protocol v2's pool) POOL_BASE and POOL_CAP. The
    co-simulation's model hub is programmed with the same list (:meth:`~moehub.spec.model.HubModel.write`)."""
    lay = layout or default_layout(cfg)
    caps = caps if caps is not None else [cfg.max_rows_per_expert] * cfg.experts
    prog = []
    for e in range(cfg.experts):
        prog += [("REGION_BASE", lay["region_base"][e], e), ("REGION_CAP", int(caps[e]), e)]
    prog += [("FLAG_BASE", lay["flag_base"], 0), ("META_BASE", lay["meta_base"], 0),
             ("COUNT_BASE", lay["count_base"], 0), ("EPOCH", epoch, 0),
             ("TILE_ROWS_LOG2", tile_rows_log2 if tile_rows_log2 is not None
              else cfg.tile_rows.bit_length() - 1, 0),
             ("TIMEOUT", timeout, 0)]
    if cfg.multicast or cfg.paged:
        # protocol v2's pool at 0: the arena (multicast) holds every row the layer can
        # bring, one per (source, token): sources x 2^token_bits, at most pool_rows
        prog += [("POOL_BASE", 0, 0), ("POOL_CAP", min(cfg.pool_rows, cfg.sources << cfg.token_bits), 0)]
    return prog + [("CTRL", CTRL_START, 0)]


def csr_program(cfg: HubConfig, **kw) -> list:
    """:func:`layer_program` as register-bus writes ``(word address, data)``, in order."""
    cmap = CsrMap(cfg)
    return [w for name, value, index in layer_program(cfg, **kw)
            for w in cmap.word_writes(name, value, index)]
