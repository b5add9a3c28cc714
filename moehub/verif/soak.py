"""Soak: a million random rows and more, with error injection, through the hub's RTL.

Why: the cocotb regression touches the hub from Python every cycle, so its random tests
see thousands of rows; a hardware team signs off after millions. The soak plays whole
layers with the Verilog player (:mod:`.player`; on Verilator about 10^5 cycles/s) and
checks every layer against the reference model fed the RTL's accept order
(:func:`~.player.replay_into_model`'s check): every control write (row metadata, tile
flags, counts, done word) in order, every credit in order, the number and an
order-independent hash of the data writes, and the status registers read at the end
(DROPS per reason, ROWS per expert, STATUS, INFLIGHT).

Traffic is drawn with numpy a batch of rows at a time (the regression's per-packet
feeders cost about 30 µs a packet; a million Mixtral rows are 64 million packets). One
seed draws every layer's knobs (:class:`LayerKnobs`): tile size; expert mix (uniform, one
hot expert: same-expert contention on every lane, or one expert only); region capacities
(whole region, short by a few rows, a part, almost none: OVERFLOW at every point of the
layer), and -- on layers that fill a region -- one expert's whole ``max_rows_per_expert``
region plus two rows; chunk orders per row (in order, reversed, first and last index
first, random) and how a batch interleaves its rows (shuffled, row after row, chunk-major:
every row opened at once); bad input (rows to experts that do not exist, duplicate
chunks and wrong-expert chunks inside open rows, bad chunk indices, bad sources and tags
on data and end-of-stream packets, a second end-of-stream); each source's end-of-stream
(after its rows with the right count or a short one: EOS_MISMATCH; before its last rows:
POST_EOS); how the layer ends (the last source's end-of-stream, or the watchdog with a
missing end-of-stream or a count never reached, some rows left incomplete); arrival gaps
and write-port back-pressure.

Tags are reused safely without the hub's credits (the player is open loop): a batch uses
one half of every source's tags, the next batch the other half, so between two rows on
one tag lies a whole batch (at least ``lanes`` packets: never the same cycle).

Each layer is a fresh player run (reset, CSR program, play, read status): the RTL is
built once per configuration and simulator (cached by content, :mod:`.sim`). A mismatch
raises :class:`SoakMismatch` naming the configuration, seed and layer, and keeps that
layer's files (``packets.hex``, ``csr.hex``, ``player.log``) for the replay.

``moehub soak --config tiny --rows 1000000 --seed 1`` (or the slow test
``tests/test_soak.py``) runs it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import progress, runinfo
from ..spec.config import HUB_CONFIGS, HubConfig, load_hub_config
from ..paths import output_dir
from ..argcheck import int_at_least, load_config_flag
from ..spec.formats import HubFormats, PacketKind, Reason
from . import sim as simulators
from ..spec.model import HubModel, Packet
from ..spec.program import csr_program
from .player import CYCLE_BITS, _plain, _verilog, model_write_hash, parse_log, plusargs

#: packet columns, in :class:`~.model.Packet`'s field order
COLUMNS = ("kind", "src", "tag", "expert", "token", "slot", "chunk", "count", "data")
#: packets of one layer at most (memory and one player run), except region-filling layers
LAYER_PACKETS = 1 << 19
#: watchdog timeouts drawn for layers that end by the watchdog (far above arrival gaps)
TIMEOUTS = (64, 200, 512)


class SoakMismatch(AssertionError):
    """The RTL and the reference model disagree on a soak layer."""


@dataclass
class LayerKnobs:
    """One layer's shape, drawn from the soak's seed; logged with a mismatch."""
    index: int
    rows: int
    tile_rows_log2: int
    mix: str                          # uniform | hot | one
    caps: list
    fill: bool                        # one expert's whole region and two rows more
    p_bad_expert: float
    p_dup: float
    p_protocol: float
    p_bad_chunk: float
    p_bad_source: float
    eos: dict = field(default_factory=dict)    # source -> end | short | early | dup
    anchor: int = 0
    ending: str = "eos"               # eos | watchdog_missing | watchdog_count
    timeout: int = 0
    incomplete: int = 0               # rows left without their last chunk (watchdog)
    gappy: bool = False
    bp: float = 0.0


@dataclass
class LayerPlan:
    """A layer's packets in play order (columns, arrival cycles) and its CSR program."""
    knobs: LayerKnobs
    cols: dict
    arrivals: np.ndarray
    program: list

    @property
    def packets(self) -> int:
        return len(self.arrivals)


# --------------------------------------------------------------------------- knobs
def tile_sizes_log2(cfg: HubConfig) -> list:
    return list(range(cfg.min_tile_rows.bit_length() - 1, cfg.max_tile_rows.bit_length()))


def layer_row_limit(cfg: HubConfig) -> int:
    """Rows of an ordinary layer at most: every expert's region and every source's token
    ids hold them on average, and the layer stays within :data:`LAYER_PACKETS`."""
    return max(1, min(cfg.experts * cfg.max_rows_per_expert * 3 // 4,
                      cfg.sources * (1 << cfg.token_bits) * 3 // 4,
                      LAYER_PACKETS // cfg.chunks_per_row))


def draw_knobs(cfg: HubConfig, rng: np.random.Generator, index: int, rows_left: int) -> LayerKnobs:
    limit = layer_row_limit(cfg)
    # a region-filling layer only while the rows left cover it (short soaks stay short)
    fill = rng.random() < 0.1 and rows_left >= cfg.max_rows_per_expert + 2
    rows = cfg.max_rows_per_expert + 2 if fill else int(rng.integers(limit // 4, limit + 1))
    k = LayerKnobs(
        index=index, rows=max(1, min(rows, rows_left) if not fill else rows),
        tile_rows_log2=int(rng.choice(tile_sizes_log2(cfg))),
        mix="one" if fill else str(rng.choice(["uniform", "uniform", "hot", "one"])),
        caps=[], fill=fill,
        p_bad_expert=float(rng.choice([0.0, 0.002, 0.02])),
        p_dup=float(rng.choice([0.0, 0.005, 0.05])),
        p_protocol=float(rng.choice([0.0, 0.005, 0.05])),
        p_bad_chunk=float(rng.choice([0.0, 0.002, 0.02])),
        p_bad_source=float(rng.choice([0.0, 0.002, 0.02])),
        anchor=int(rng.integers(cfg.sources)),
        ending=str(rng.choice(["eos"] * 6 + ["watchdog_missing", "watchdog_count"])),
        gappy=bool(rng.random() < 0.3), bp=float(rng.choice([0.0, 0.0, 0.1, 0.5])))
    for s in range(cfg.sources):
        if s != k.anchor:
            k.eos[s] = str(rng.choice(["end"] * 5 + ["short", "early", "dup"]))
    if k.ending != "eos":
        k.timeout = int(rng.choice(TIMEOUTS))
        k.incomplete = int(rng.choice([0, 1, 3]))
    return k


def draw_caps(cfg: HubConfig, rng: np.random.Generator, per_expert: np.ndarray, fill: bool) -> list:
    """Programmed REGION_CAP per expert: mostly the whole region, else short by one to
    three rows, a part of the expert's rows, or almost nothing (OVERFLOW from the start)."""
    caps = []
    for x, n in enumerate(per_expert.tolist()):
        kind = "max" if fill and x == 0 else str(rng.choice(["max"] * 8 + ["short", "part", "tiny"]))
        cap = {"max": cfg.max_rows_per_expert, "short": n - int(rng.integers(1, 4)),
               "part": int(n * rng.uniform(0.3, 0.9)), "tiny": int(rng.integers(0, 3))}[kind]
        caps.append(int(min(max(cap, 0), cfg.max_rows_per_expert)))
    return caps


# --------------------------------------------------------------------------- rows
def draw_rows(cfg: HubConfig, rng: np.random.Generator, k: LayerKnobs) -> dict:
    """Row-level columns: source, expert (some out of range), token, slot."""
    n, E = k.rows, cfg.experts
    if k.mix == "one":
        expert = np.zeros(n, np.int64) if k.fill else np.full(n, rng.integers(E), np.int64)
    elif k.mix == "hot":
        hot = rng.integers(E)
        expert = np.where(rng.random(n) < rng.uniform(0.5, 0.95), hot, rng.integers(0, E, n))
    else:
        expert = rng.integers(0, E, n)
    bad_range = (1 << cfg.expert_bits) - E
    if bad_range > 0:
        bad = rng.random(n) < k.p_bad_expert
        expert = np.where(bad, E + rng.integers(0, bad_range, n), expert)
    src = rng.integers(0, cfg.sources, n)
    token = np.zeros(n, np.int64)
    for s in range(cfg.sources):          # a source numbers its tokens 0, 1, 2, ...
        sel = np.flatnonzero(src == s)
        token[sel] = np.arange(len(sel)) % (1 << cfg.token_bits)
    return dict(src=src, expert=expert.astype(np.int64), token=token,
                slot=rng.integers(0, cfg.topk, n))


def tag_groups(cfg: HubConfig) -> tuple:
    """Each source's tags in two halves, used by alternate batches."""
    T = cfg.tags_per_source
    if T < 2:
        raise ValueError(f"the soak needs at least 2 tags per source ({cfg.name} has {T})")
    return list(range((T + 1) // 2)), list(range((T + 1) // 2, T))


def batches(cfg: HubConfig, src: np.ndarray) -> list:
    """Rows (indices) in batches with their tags: batch b takes, per source, its next rows
    up to the size of tag half b % 2."""
    groups = tag_groups(cfg)
    queues = [np.flatnonzero(src == s) for s in range(cfg.sources)]
    heads = [0] * cfg.sources
    out, b = [], 0
    while any(h < len(q) for h, q in zip(heads, queues)):
        g = groups[b % 2]
        rows, tags = [], []
        for s in range(cfg.sources):
            take = queues[s][heads[s]:heads[s] + len(g)]
            heads[s] += len(take)
            rows += take.tolist()
            tags += g[:len(take)]
        out.append((np.array(rows, np.int64), np.array(tags, np.int64)))
        b += 1
    return out


# --------------------------------------------------------------------------- packets
def chunk_orders(cfg: HubConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """Per row the order of its chunk indices: in order, reversed, first and last index
    first, or random."""
    C = cfg.chunks_per_row
    fixed = np.stack([np.arange(C), np.arange(C)[::-1],
                      np.concatenate([[0, C - 1], np.arange(1, C - 1)])[:C]])
    mode = rng.integers(0, 4, n)
    orders = fixed[np.minimum(mode, 2)]
    rand = np.argsort(rng.random((n, C)), axis=1)
    return np.where((mode == 3)[:, None], rand, orders)


def batch_keys(rng: np.random.Generator, n: int, C: int) -> np.ndarray:
    """Sort keys of a batch's packets (row r, position p in the row's order), increasing
    along each row: shuffled, row after row, or chunk-major (every row opened at once)."""
    mode = rng.integers(0, 3)
    if mode == 0:
        return np.sort(rng.random((n, C)), axis=1)
    perm = rng.permutation(n)[:, None].astype(float)
    pos = np.arange(C)[None, :].astype(float)
    return perm + (pos + 0.5) / C if mode == 1 else pos * n + perm


def _extra_inside(rng, keys, orders, p: float) -> tuple:
    """Rows that get an extra packet strictly inside their stream (after their first
    packet, before their last): (row, key, a chunk already sent)."""
    n, C = keys.shape
    rows = np.flatnonzero(rng.random(n) < p)
    pos = rng.integers(0, C - 1, len(rows))
    key = (keys[rows, pos] + keys[rows, pos + 1]) / 2
    sent = orders[rows, (rng.random(len(rows)) * (pos + 1)).astype(np.int64)]
    return rows, key, sent


def batch_packets(cfg: HubConfig, rng: np.random.Generator, k: LayerKnobs, r: dict,
                  rows: np.ndarray, tags: np.ndarray, cut_last: np.ndarray) -> tuple:
    """The packets of one batch: (columns, keys). ``cut_last``: rows whose last packet is
    never sent (left incomplete for the watchdog)."""
    C, n = cfg.chunks_per_row, len(rows)
    orders = chunk_orders(cfg, rng, n)
    keys = batch_keys(rng, n, C)
    keep = np.ones((n, C), bool)
    keep[cut_last, C - 1] = False
    ri = np.repeat(np.arange(n), C).reshape(n, C)
    parts = [_row_columns(r, rows[ri[keep]], tags[ri[keep]], orders[keep], rng)]
    key_parts = [keys[keep]]
    for p, wrong in ((k.p_dup, False), (k.p_protocol, True)):
        i, key, chunk = _extra_inside(rng, keys, orders, p)
        i, key, chunk = _not_cut(i, key, chunk, cut_last)
        cols = _row_columns(r, rows[i], tags[i], chunk, rng)
        if wrong:
            span = 1 << cfg.expert_bits
            cols["expert"] = (cols["expert"] + rng.integers(1, span, len(i))) % span
            cols["chunk"] = rng.integers(0, C, len(i))
        parts.append(cols)
        key_parts.append(key)
    lo, hi = float(keys.min()), float(keys.max())
    for cols in _bad_packets(cfg, rng, k, n):
        parts.append(cols)
        key_parts.append(rng.uniform(lo, hi, len(cols["kind"])))
    cols = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    return cols, np.concatenate(key_parts)


def _not_cut(i, key, chunk, cut_last):
    """No extra packet for a row left incomplete (it might come after the row's last one)."""
    ok = ~np.isin(i, cut_last)
    return i[ok], key[ok], chunk[ok]


def _row_columns(r: dict, rows: np.ndarray, tags: np.ndarray, chunk: np.ndarray, rng) -> dict:
    m = len(rows)
    return dict(kind=np.full(m, int(PacketKind.DATA), np.int64), src=r["src"][rows],
                tag=tags.astype(np.int64), expert=r["expert"][rows], token=r["token"][rows],
                slot=r["slot"][rows], chunk=np.asarray(chunk, np.int64),
                count=np.zeros(m, np.int64), data=rng.integers(0, 1 << r["data_bits"], m))


def _bad_packets(cfg: HubConfig, rng, k: LayerKnobs, n_rows: int):
    """Packet-level bad input: chunk index out of range (BAD_CHUNK), source or tag out of
    range on a data packet, source out of range on an end-of-stream (BAD_SOURCE)."""
    fmts = HubFormats(cfg).packet.widths
    top = {f: 1 << w for f, w in fmts.items()}
    for p, what in ((k.p_bad_chunk, "chunk"), (k.p_bad_source, "src"), (k.p_bad_source, "tag"),
                    (k.p_bad_source / 4, "eos_src")):
        limit = {"chunk": cfg.chunks_per_row, "src": cfg.sources, "tag": cfg.tags_per_source,
                 "eos_src": cfg.sources}[what]
        f = "src" if what == "eos_src" else what
        m = int(rng.binomial(n_rows, p)) if top[f] > limit else 0
        if not m:
            continue
        cols = dict(kind=np.full(m, int(PacketKind.DATA), np.int64),
                    src=rng.integers(0, cfg.sources, m), tag=rng.integers(0, cfg.tags_per_source, m),
                    expert=rng.integers(0, cfg.experts, m), token=rng.integers(0, top["token"], m),
                    slot=rng.integers(0, cfg.topk, m), chunk=rng.integers(0, cfg.chunks_per_row, m),
                    count=np.zeros(m, np.int64), data=rng.integers(0, top["data"], m))
        cols[f] = rng.integers(limit, top[f], m)
        if what == "eos_src":
            cols["kind"][:] = int(PacketKind.EOS)
            cols["count"] = rng.integers(0, top["count"], m)
            for c in ("tag", "expert", "token", "slot", "chunk", "data"):
                cols[c] = np.zeros(m, np.int64)
        yield cols


# --------------------------------------------------------------------------- end of stream
def eos_packets(cfg: HubConfig, rng, k: LayerKnobs, src: np.ndarray, row_batch: np.ndarray,
                n_batches: int) -> dict:
    """Per batch boundary b (0 .. n_batches; b = before batch b), the end-of-stream
    packets ``(src, count)`` placed there; the anchor's is last of all (or missing)."""
    at = {b: [] for b in range(n_batches + 1)}
    for s, mode in k.eos.items():
        mine = row_batch[src == s]
        n = len(mine)
        last = int(mine.max()) + 1 if n else 0
        if mode == "early" and n:
            b = int(rng.integers(int(mine.min()) + 1, last + 1))
            count = int((mine < b).sum())
        else:
            b = int(rng.integers(last, n_batches + 1))
            count = n - int(rng.integers(1, 3)) if mode == "short" and n else n
        at[b].append((s, max(count, 0)))
        if mode == "dup":
            at[int(rng.integers(b, n_batches + 1))].append((s, int(rng.integers(0, n + 2))))
    n_anchor = int((src == k.anchor).sum())
    if k.ending == "eos":
        at[n_batches].append((k.anchor, n_anchor))
    elif k.ending == "watchdog_count":
        at[n_batches].append((k.anchor, n_anchor + int(rng.integers(1, 4))))
    return at


def _eos_columns(pairs: list) -> dict:
    m = len(pairs)
    cols = {c: np.zeros(m, np.int64) for c in COLUMNS}
    cols["kind"][:] = int(PacketKind.EOS)
    cols["src"] = np.array([s for s, _ in pairs], np.int64)
    cols["count"] = np.array([c for _, c in pairs], np.int64)
    return cols


# --------------------------------------------------------------------------- a layer
def plan_layer(cfg: HubConfig, rng: np.random.Generator, index: int, rows_left: int) -> LayerPlan:
    """Draw one layer: knobs, rows, batches, packets in play order, arrival cycles and the
    CSR program."""
    k = draw_knobs(cfg, rng, index, rows_left)
    r = draw_rows(cfg, rng, k)
    r["data_bits"] = cfg.data_bits
    valid = r["expert"] < cfg.experts
    k.caps = draw_caps(cfg, rng, np.bincount(r["expert"][valid], minlength=cfg.experts), k.fill)
    bs = batches(cfg, r["src"])
    row_batch = np.empty(k.rows, np.int64)
    for b, (rows, _) in enumerate(bs):
        row_batch[rows] = b
    eos = eos_packets(cfg, rng, k, r["src"], row_batch, len(bs))
    parts = []
    for b, (rows, tags) in enumerate(bs):
        if eos[b]:
            parts.append(_eos_columns(eos[b]))
        cut = np.flatnonzero(rng.random(len(rows)) < 0.5)[:k.incomplete] \
            if k.incomplete and b >= len(bs) - 2 else np.array([], np.int64)
        cols, keys = batch_packets(cfg, rng, k, r, rows, tags, cut)
        order = np.argsort(keys, kind="stable")
        parts.append({c: v[order] for c, v in cols.items()})
    if eos[len(bs)]:
        parts.append(_eos_columns(eos[len(bs)]))
    cols = {c: np.concatenate([p[c] for p in parts]) for c in COLUMNS}
    n = len(cols["kind"])
    step = rng.integers(0, 9, n) * (rng.random(n) < 0.05) if k.gappy else np.zeros(n, np.int64)
    arrivals = np.arange(n) // cfg.lanes + np.cumsum(step)
    program = csr_program(cfg, caps=k.caps, tile_rows_log2=k.tile_rows_log2, epoch=index + 1,
                          timeout=k.timeout)
    return LayerPlan(knobs=k, cols=cols, arrivals=arrivals.astype(np.int64), program=program)


# --------------------------------------------------------------------------- files
_HEX = np.frombuffer(b"".join(f"{i:02x}".encode() for i in range(256)), np.uint8).reshape(256, 2)


def packed_words(cfg: HubConfig, plan: LayerPlan) -> tuple:
    """Each packet with its arrival cycle above it, ``{cycle, packet}`` (the player's
    ring entry), as (high, low) 64-bit halves."""
    fmt = HubFormats(cfg).packet
    width = CYCLE_BITS + fmt.width
    if width > 128:
        raise ValueError(f"{cfg.name}: {width}-bit player entries (the soak packs 128)")
    hi = np.zeros(plan.packets, np.uint64)
    lo = np.zeros(plan.packets, np.uint64)
    fields = [(fmt.offsets[c], fmt.widths[c], plan.cols[c]) for c in COLUMNS]
    fields.append((fmt.width, CYCLE_BITS, plan.arrivals))
    for off, w, v in fields:
        v = v.astype(np.uint64)
        if off >= 64:
            hi |= v << np.uint64(off - 64)
            continue
        lo |= v << np.uint64(off)
        if off + w > 64:
            hi |= v >> np.uint64(64 - off)
    return hi, lo


def write_packets_hex(cfg: HubConfig, plan: LayerPlan, path: Path) -> None:
    """``packets.hex`` as :func:`~.player.prepare` writes it, vectorised."""
    hi, lo = packed_words(cfg, plan)
    digits = (CYCLE_BITS + HubFormats(cfg).packet.width + 3) // 4
    words = np.empty((plan.packets, 2), ">u8")
    words[:, 0], words[:, 1] = hi, lo
    chars = _HEX[words.view(np.uint8).reshape(plan.packets, 16)].reshape(plan.packets, 32)
    text = np.empty((plan.packets, digits + 1), np.uint8)
    text[:, :digits] = chars[:, 32 - digits:]
    text[:, digits] = ord("\n")
    text.tofile(path)


def write_inputs(cfg: HubConfig, plan: LayerPlan, out: Path) -> list:
    """packets.hex and csr.hex; returns the player's plusargs for this layer."""
    write_packets_hex(cfg, plan, out / "packets.hex")
    with open(out / "csr.hex", "w") as f:
        for a, v in plan.program:
            f.write(f"{a:08x}\n{v:08x}\n")
    last = int(plan.arrivals[-1]) if plan.packets else 0
    max_cycles = last + 64 * plan.packets // cfg.lanes + 100_000 + plan.knobs.timeout
    return plusargs(packets=plan.packets, csr_words=len(plan.program), max_cycles=max_cycles,
                    bp_permille=int(plan.knobs.bp * 1000), log_accepts=0)


# --------------------------------------------------------------------------- check
def model_of(cfg: HubConfig, plan: LayerPlan, accepted) -> HubModel:
    """The reference model programmed like the layer and fed its packets in the RTL's
    accept order ``(cycle, lane, packet index)``; a watchdog layer ends with the flush."""
    model = HubModel(cfg)
    for a, d in plan.program:
        model.write_addr(a, d)
    cols = [plan.cols[c].tolist() for c in COLUMNS]
    for c, j, i in accepted:
        model.packet(Packet(*(col[i] for col in cols)), j, c)
    model.end()
    if plan.knobs.ending != "eos":
        model.flush(timeout=True)
    return model


def compare(cfg: HubConfig, res, model: HubModel) -> list:
    """What differs between the player's result and the model (empty: equivalent)."""
    diffs = []
    got_ctl = [w for _, w in res.ctl]
    if got_ctl != model.ctl:
        k = next((i for i, (a, b) in enumerate(zip(got_ctl, model.ctl)) if a != b),
                 min(len(got_ctl), len(model.ctl)))
        diffs.append(f"control writes differ from #{k} (RTL {len(got_ctl)}, model "
                     f"{len(model.ctl)}): RTL {got_ctl[k:k + 2]} model {model.ctl[k:k + 2]}")
    got_cr = [(s, t) for _, s, t in res.credits]
    if got_cr != model.credits:
        diffs.append(f"credits differ (RTL {len(got_cr)}, model {len(model.credits)})")
    if (res.writes, res.write_hash) != model_write_hash(cfg, model):
        diffs.append(f"data writes differ: RTL {res.writes} writes, model "
                     f"{model_write_hash(cfg, model)[0]} (or their hash)")
    for (name, index), v in sorted(res.csr.items()):
        want = model.read(name, index)
        if v != want:
            diffs.append(f"CSR {name}[{index}]: RTL {v}, model {want}")
    return diffs


# --------------------------------------------------------------------------- the soak
@dataclass
class SoakReport:
    config: str
    seed: int
    sim: str
    layers: int = 0
    rows: int = 0                     # data rows sent (incl. rows dropped by the hub)
    packets: int = 0
    cycles: int = 0
    rows_written: int = 0             # rows the hub placed (sum of ROWS)
    drops: dict = field(default_factory=dict)
    endings: dict = field(default_factory=dict)
    wall_s: float = 0.0
    sim_s: float = 0.0

    def table(self) -> str:
        d = ", ".join(f"{k} {v}" for k, v in sorted(self.drops.items(), key=lambda x: -x[1]))
        return (f"soak {self.config} seed {self.seed} on {self.sim}: {self.layers} layers, "
                f"{self.rows:,} rows ({self.rows_written:,} placed), {self.packets:,} packets, "
                f"{self.cycles:,} cycles; every layer equal to the model\n"
                f"  drops: {d or 'none'}\n  layer endings: {self.endings}\n"
                f"  wall {self.wall_s:.0f} s (simulator {self.sim_s:.0f} s, "
                f"{self.cycles / max(self.sim_s, 1e-9):,.0f} cycles/s)")


def run_soak(config: str | HubConfig, rows: int, seed: int, *, sim: str | None = None,
             mode: str = "verilog", out: Path | None = None) -> SoakReport:
    """Play layers until ``rows`` data rows have gone through the RTL; raises
    :class:`SoakMismatch` at the first layer that differs from the model."""
    from ..rtl.gen import convert
    cfg = config if isinstance(config, HubConfig) else load_hub_config(config)
    sim = simulators.choose(sim, prefer="verilator")
    out = Path(out) if out else output_dir("soak", f"{cfg.name}-seed{seed}")
    out.mkdir(parents=True, exist_ok=True)
    player = out / "player.v"
    player.write_text(_verilog(cfg)[0])
    reads = _verilog(cfg)[1]
    rng = np.random.default_rng(seed)
    rep = SoakReport(config=cfg.name, seed=seed, sim=sim)
    load0 = [round(x, 2) for x in os.getloadavg()]     # (the machine's load, for the record)
    t0 = time.time()
    with progress.stage(f"soak {cfg.name} (seed {seed}, {simulators.NAMES[sim]})", total=rows,
                        unit="rows", heartbeat=True) as st:
        sources = [convert(cfg), player]
        while rep.rows < rows:
            plan = plan_layer(cfg, rng, rep.layers, rows - rep.rows)
            res, dt = _play(cfg, plan, out, sources, sim, mode, reads)
            model = model_of(cfg, plan, res.accepted)
            diffs = compare(cfg, res, model)
            if diffs:
                raise SoakMismatch(f"soak {cfg.name} seed {seed} layer {rep.layers} ({sim}; its "
                                   f"files are in {out}): " + "; ".join(diffs[:6]) +
                                   f"\n  knobs: {plan.knobs}")
            _tally(rep, cfg, plan, res, model, dt)
            st.update(rep.rows, cycles=rep.cycles)
    rep.wall_s = time.time() - t0
    from ..synth.digest import hardware_of
    (out / "summary.json").write_text(json.dumps(
        {**asdict(rep), "load": load0, **hardware_of(cfg),
         "record": runinfo.record(rows_asked=rows)}, indent=1) + "\n")
    return rep


def _play(cfg, plan: LayerPlan, out: Path, sources: list, sim: str, mode: str, reads):
    plus = write_inputs(cfg, plan, out)
    (out / "player.log").unlink(missing_ok=True)
    if mode == "verilog":
        run = _plain(sim, out, sources, plus)
    else:
        from .player import _cocotb
        run = _cocotb(sim, out, sources, plus, False)
    t = time.time()
    run()
    dt = time.time() - t
    schedule = (plan.arrivals.tolist(), list(range(plan.packets)))
    return parse_log(cfg, out / "player.log", reads, schedule, False), dt


def _tally(rep: SoakReport, cfg, plan: LayerPlan, res, model: HubModel, dt: float) -> None:
    k = plan.knobs
    rep.layers += 1
    rep.rows += k.rows
    rep.packets += plan.packets
    rep.cycles += res.cycles or 0
    rep.sim_s += dt
    rep.rows_written += sum(model.rows)
    for reason in Reason:
        n = model.drop_counts[reason]
        if n:
            rep.drops[reason.name] = rep.drops.get(reason.name, 0) + n
    rep.endings[k.ending] = rep.endings.get(k.ending, 0) + 1


def add_arguments(ap) -> None:
    ap.add_argument("--config", action="append", help=f"hub config (repeatable; default all of "
                    f"{', '.join(HUB_CONFIGS)})")
    ap.add_argument("--rows", type=int_at_least(1), default=1_000_000,
                    help="data rows per config, >= 1 (default 10^6)")
    ap.add_argument("--seed", type=int_at_least(0), default=1, help="the soak's seed (default 1)")
    simulators.add_argument(ap, "verilator", "the soak")


def run_command(a) -> int:
    """Every config is loaded before the first layer, so a typo fails at once; exit 1 at
    the first layer that differs from the model."""
    cfgs = [load_config_flag("--config", load_hub_config, n) for n in a.config or HUB_CONFIGS]
    for cfg in cfgs:
        try:
            rep = run_soak(cfg, a.rows, a.seed, sim=a.sim)
        except SoakMismatch as e:
            print(f"moehub soak: FAILED: {e}", file=sys.stderr)
            return 1
        print(rep.table())
    return 0


def add_parser(subparsers) -> None:
    """``moehub soak`` (registered by scripts/cli.py)."""
    p = subparsers.add_parser("soak", help="random layers with error injection through the RTL "
                              "(Verilator), each checked against the reference model",
                              description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=run_command)
