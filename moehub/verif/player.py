"""Fast RTL-in-the-loop runs: a Verilog "player" replays an arrival schedule into the hub.

Touching signals from Python every cycle limits cocotb to tens of thousands of cycles per
second (TOOLCHAIN.md pitfall 4). For long co-simulated layers the schedule is therefore
written to hex files and played by a small generated Verilog module that sits around the
hub: it programs the CSRs, waits until the hub accepts packets (cycle 0 of the schedule),
offers each lane's packets in order once their arrival cycle has come and holds them while
the hub back-pressures (a stalled hub delays later arrivals), and logs every control
write, credit and stall with its cycle. Python is woken once, when the player is done.
Every :data:`PROGRESS_CYCLES` cycles the player also appends ``<cycle> <packets accepted>``
to ``progress.txt`` (flushed), which :func:`run_player` follows to report simulated
cycles per second and an ETA (:mod:`moehub.progress`) while the simulator runs.

The player's Verilog depends on the hub configuration only: it reads the packets from
``packets.hex`` as it plays them and the CSR writes from ``csr.hex``, and takes their
counts, the cycle limit, back-pressure and accept logging as plusargs, so one simulator
build (cached by content, :mod:`moehub.verif.sim`) serves every schedule. It runs on
Icarus or Verilator (``sim``; default Verilator when installed) in two ways:

* ``mode="cocotb"``: under cocotb with the clock in C (``Clock(impl="gpi")``);
* ``mode="verilog"``: a plain testbench with its own clock -- the simulator's ceiling.

:func:`replay_into_model` feeds the packets into the reference model in the order and at
the cycles the RTL accepted them, which is the equivalence check of RTL and model.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .. import progress
from ..spec.config import HubConfig
from ..spec.csr_map import CsrMap
from ..paths import output_dir
from ..spec.formats import CtlKind, HubFormats
from . import sim as simulators
from ..spec.model import CtlWrite, HubModel
from ..spec.program import csr_program

CYCLE_BITS = 32
PLAYER_TOP = "moehub_player"
#: cycles between two progress lines (a power of two; about a second of simulation)
PROGRESS_CYCLES = 1024


@dataclass
class PlayerResult:
    cycles: int                       #: cycle (after cycle 0) at which the layer-done pulse came
    accepted: list                    #: (cycle, lane, Packet) of every packet, in accept order
    ctl: list                         #: (cycle, CtlWrite) in order
    credits: list                     #: (cycle, src, tag) in order
    writes: int                       #: data writes
    write_hash: int                   #: order-independent hash of (addr, data) of all writes
    stalls: list                      #: (first, last) cycles with a packet waiting and ready low
    csr: dict = field(default_factory=dict)   #: (name, index) -> value read at the end
    wall_s: float = 0.0               #: simulator wall time
    build_s: float = 0.0
    sim: str = ""                     #: the simulator that ran it ("icarus", "verilator")
    waves: Path | None = None         #: the waveform (FST; VCD from Verilator) when asked for

    def tile_ready(self, cfg: HubConfig, flag_base: int) -> dict:
        """(expert, tile) -> cycle of its flag write."""
        out = {}
        for cyc, w in self.ctl:
            if w.kind == CtlKind.FLAG:
                e, t = divmod((w.addr - flag_base) // 4, cfg.tiles_per_expert)
                out[(e, t)] = cyc
        return out


def write_hash(cfg: HubConfig, addr: int, data: int) -> int:
    """Per-write hash summed (mod 2^64) over all writes; the player computes the same."""
    return (addr ^ (data << 20) ^ (addr << 37)) & ((1 << 64) - 1)


#: packets the player holds ahead of the one it offers next (read from packets.hex as the
#: hub takes them: a schedule of any length needs no memory of its size)
RING_LANES = 4
#: seeds of the per-lane back-pressure generators (xorshift32: the same on every simulator)
BP_SEED = 0x2545F491


def _verilog(cfg: HubConfig) -> tuple:
    """The player module (and, under PLAYER_PLAIN, a plain testbench with its own clock).

    It depends on the hub configuration only: the schedule's length, the CSR program's
    length, the cycle limit, back-pressure and accept logging are plusargs
    (:func:`plusargs`), so one simulator build serves every schedule."""
    fmts = HubFormats(cfg)
    L = cfg.lanes
    PW, EW = fmts.packet.width, CYCLE_BITS + fmts.packet.width
    ring = 1 << max(1, (RING_LANES * L - 1).bit_length())
    cmap = CsrMap(cfg)
    reads = [(r.name, i, r.addr(i, 0)) for r in cmap.registers.values()
             if r.name in ("DROPS", "ROWS", "STATUS", "INFLIGHT") for i in range(r.count)]
    v = _decls(cfg, cmap.addr_bits, EW, ring)
    v += _lanes(cfg, PW, EW, ring)
    v += _hub_instance(cfg)
    v += _initial()
    v += _clocked(cfg, ring, len(reads))
    v += _rd_addr(cmap.addr_bits, reads) + _plain_tb()
    return "\n".join(v) + "\n", reads


def _decls(cfg: HubConfig, AB: int, EW: int, ring: int) -> list:
    return [f"// Generated by moehub.verif.player for hub config '{cfg.name}'. Do not edit.",
            "`timescale 1ns/1ps",
            f"module {PLAYER_TOP}(input clk, output reg done);",
            "  // state: 0 reset, 1 program CSRs, 2 wait until the hub accepts, 3 play,",
            "  //        4/6/8/7 read status CSRs, 5 done",
            "  reg rst = 1;",
            "  reg [3:0] state = 0;",
            f"  reg [{CYCLE_BITS - 1}:0] t = 0;   // schedule cycle: 0 = first cycle the hub accepts",
            "  integer f, pf, sf, cf, got, k, wait_cnt = 0, rd_i = 0;",
            "  // run-time settings (plusargs), so that one build serves every schedule",
            "  reg [31:0] n_pkts = 0, n_csr = 0, max_cycles = 0, bp = 0, log_acc = 0;",
            "  reg [31:0] csr_i = 0, ca = 0, cd = 0;",
            "  reg [63:0] hash = 0, writes = 0;",
            "  reg stalled = 0; reg [31:0] stall_from = 0;",
            f"  reg [{AB - 1}:0] csr_addr = 0; reg csr_w = 0, csr_r = 0; reg [31:0] csr_wdata = 0;",
            "  wire [31:0] csr_rdata;",
            f"  // the next {ring} packets of the ordered schedule, {{arrival cycle, packet}}",
            f"  reg [{EW - 1}:0] ring [0:{ring - 1}];",
            f"  reg [{EW - 1}:0] entry;",
            "  reg [31:0] head = 0;        // next packet of the ordered schedule",
            "  reg [31:0] fill = 0;        // packets read from packets.hex so far"]


def _lanes(cfg: HubConfig, PW: int, EW: int, ring: int) -> list:
    """Per lane: the packet offered (the ring's next entries, once arrived), the write
    port's ready (a xorshift draw per cycle when back-pressure is on: $urandom differs
    between simulators) and the write hash."""
    fmts = HubFormats(cfg)
    WW, CW, RW, AW, DB = (fmts.write.width, fmts.ctl.width, fmts.credit.width,
                          cfg.addr_bits, cfg.data_bits)
    v = []
    for j in range(cfg.lanes):
        v += [f"  wire [{EW - 1}:0] e{j} = ring[(head + {j}) & {ring - 1}];",
              f"  wire v{j} = (state == 3) && (head + {j} < fill) && (e{j}[{EW - 1}:{PW}] <= t);",
              f"  wire [{PW - 1}:0] p{j} = e{j}[{PW - 1}:0];",
              f"  wire r{j}, wv{j}; wire [{WW - 1}:0] wp{j}; reg wr_rdy{j} = 1;",
              f"  reg [31:0] rng{j} = 32'h{(BP_SEED * (j + 1)) & 0xFFFFFFFF:08x};",
              f"  wire wf{j} = wv{j} & wr_rdy{j};",
              f"  wire [63:0] wa{j} = {{{{{64 - AW}{{1'b0}}}}, wp{j}[{AW - 1}:0]}};",
              f"  wire [63:0] wd{j} = {{{{{64 - DB}{{1'b0}}}}, wp{j}[{WW - 1}:{AW}]}};",
              f"  wire [63:0] h{j} = wa{j} ^ (wd{j} << 20) ^ (wa{j} << 37);"]
    taken = " + ".join(f"(v{j} && r{j})" for j in range(cfg.lanes))
    v += [f"  wire cv, rv, ldone; wire [{CW - 1}:0] cp; wire [{RW - 1}:0] rp;",
          f"  wire [31:0] taken = {taken};"]
    return v


def _hub_instance(cfg: HubConfig) -> list:
    ports = [".clk(clk)", ".rst(rst)"]
    for j in range(cfg.lanes):
        ports += [f".i__{j}__valid(v{j})", f".i__{j}__payload(p{j})", f".i__{j}__ready(r{j})",
                  f".wr__{j}__valid(wv{j})", f".wr__{j}__payload(wp{j})",
                  f".wr__{j}__ready(wr_rdy{j})"]
    ports += [".ctl__valid(cv)", ".ctl__payload(cp)", ".ctl__ready(1'b1)",
              ".credit__valid(rv)", ".credit__payload(rp)", ".credit__ready(1'b1)",
              ".csr__addr(csr_addr)", ".csr__r_stb(csr_r)", ".csr__w_stb(csr_w)",
              ".csr__w_data(csr_wdata)", ".csr__r_data(csr_rdata)", ".layer_done(ldone)"]
    return ["  moehub hub(" + ", ".join(ports) + ");"]


def _initial() -> list:
    v = ["  initial begin", "    done = 0;"]
    v += [f'    if (!$value$plusargs("{name}=%d", {var})) {var} = 0;'
          for name, var in PLUSARGS.items()]
    return v + ['    f = $fopen("player.log", "w");',
                '    pf = $fopen("progress.txt", "w");',
                '    sf = $fopen("packets.hex", "r");',
                '    cf = $fopen("csr.hex", "r");',
                "  end",
                "  function [31:0] xorshift(input [31:0] x);   // back-pressure draws",
                "    reg [31:0] y;",
                "    begin y = x ^ (x << 13); y = y ^ (y >> 17); xorshift = y ^ (y << 5); end",
                "  endfunction"]


#: plusarg name -> player register
PLUSARGS = {"packets": "n_pkts", "csr_words": "n_csr", "max_cycles": "max_cycles",
            "bp_permille": "bp", "log_accepts": "log_acc"}


def _clocked(cfg: HubConfig, ring: int, n_reads: int) -> list:
    """The player's state machine and its log; the ring is refilled from packets.hex
    behind the packets the hub took (file reads instead of a memory sized by the
    schedule, so the build does not depend on it)."""
    L = cfg.lanes
    any_v = " | ".join(f"v{j}" for j in range(L))
    hsum = " + ".join(f"(wf{j} ? h{j} : 64'd0)" for j in range(L))
    wsum = " + ".join(f"wf{j}" for j in range(L))
    v = ["  always @(posedge clk) begin",
         "    csr_w <= 0; csr_r <= 0;",
         f"    hash <= hash + {hsum};",
         f"    writes <= writes + {wsum};",
         "    case (state)",
         "      0: begin wait_cnt <= wait_cnt + 1; if (wait_cnt == 2) begin rst <= 0; state <= 1; end end",
         "      1: if (csr_i < n_csr) begin got = $fscanf(cf, \"%h\\n%h\\n\", ca, cd);"
         " csr_addr <= ca; csr_wdata <= cd; csr_w <= 1; csr_i <= csr_i + 1;"
         " end else begin state <= 2; wait_cnt <= 0; end",
         "      2: begin wait_cnt <= wait_cnt + 1; if (wait_cnt >= 3 && r0) begin state <= 3; t <= 0; end end",
         "      3: begin",
         "        t <= t + 1;",
         f"        if (t[{PROGRESS_CYCLES.bit_length() - 2}:0] == 0) begin"
         ' $fwrite(pf, "%0d %0d\\n", t, head); $fflush(pf); end',
         f"        if (!r0 && ({any_v})) begin if (!stalled) begin stalled <= 1; stall_from <= t; end end",
         '        else if (stalled) begin stalled <= 0; $fwrite(f, "S %0d %0d\\n", stall_from, t - 1); end',
         '        if (ldone) begin $fwrite(f, "L %0d\\n", t); state <= 4; end',
         '        else if (t >= max_cycles) begin $fwrite(f, "X %0d\\n", t); state <= 4; end',
         "      end",
         f"      4: if (rd_i < {n_reads}) begin csr_addr <= rd_addr(rd_i); csr_r <= 1; state <= 6; end",
         '         else begin $fwrite(f, "H %0d %0d\\n", writes, hash); $fclose(f); done <= 1; state <= 5; end',
         "      6: state <= 8;",
         "      8: state <= 7;                                  // r_data: 2 cycles after r_stb",
         '      7: begin $fwrite(f, "Q %0d %0d\\n", rd_i, csr_rdata); rd_i <= rd_i + 1; state <= 4; end',
         "      default: ;",
         "    endcase",
         "    head <= head + taken;",
         f"    // refill the ring behind the packets taken (at most {L} a cycle, as many as the",
         "    // hub can take), never over one still to be offered",
         f"    for (k = 0; k < {L}; k = k + 1)",
         f"      if (fill < n_pkts && fill < head + taken + {ring}) begin",
         '        got = $fscanf(sf, "%h\\n", entry);',
         f"        ring[fill & {ring - 1}] <= entry;",
         "        fill = fill + 1;",
         "      end"]
    for j in range(L):
        v += [f'    if (log_acc != 0 && v{j} && r{j}) $fwrite(f, "A %0d %0d\\n", {j}, t);',
              f"    if (bp != 0) begin rng{j} <= xorshift(rng{j});"
              f" wr_rdy{j} <= (xorshift(rng{j}) % 1000) >= bp; end"]
    a0, a1 = 2, 2 + cfg.addr_bits
    fm = HubFormats(cfg)
    CW, RW = fm.ctl.width, fm.credit.width
    v += [f'    if (cv) $fwrite(f, "C %0d %0d %0d %0d\\n", t, cp[1:0], cp[{a1 - 1}:{a0}], cp[{CW - 1}:{a1}]);',
          f'    if (rv) $fwrite(f, "R %0d %0d %0d\\n", t, rp[{cfg.src_bits - 1}:0], rp[{RW - 1}:{cfg.src_bits}]);',
          "  end"]
    return v


def _rd_addr(AB: int, reads: list) -> list:
    v = [f"  function [{AB - 1}:0] rd_addr(input integer i);", "    case (i)"]
    v += [f"      {k}: rd_addr = {a};" for k, (_, _, a) in enumerate(reads)]
    return v + ["      default: rd_addr = 0;", "    endcase", "  endfunction", "endmodule"]


def _plain_tb() -> list:
    return ["`ifdef PLAYER_PLAIN",
            "module player_tb;",
            "  reg clk = 0; wire done;",
            f"  {PLAYER_TOP} p(.clk(clk), .done(done));",
            "  always #5 clk = ~clk;",
            "  always @(posedge done) #20 $finish;",
            "endmodule",
            "`endif"]


def prepare(cfg: HubConfig, packets: Sequence[tuple], out_dir: Path, *, csr_writes=None,
            bp: float = 0.0, log_accepts: bool = False) -> tuple:
    """Write the player Verilog and the packet and CSR hex files; returns (player.v, the CSR
    reads it makes at the end, (arrival cycles, packets) in play order, the plusargs that
    give the player this schedule)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fmt = HubFormats(cfg).packet
    ordered = sorted(((c, lane, k, p) for k, (c, lane, p) in enumerate(packets)),
                     key=lambda x: (x[0], x[1], x[2]))
    digits = (CYCLE_BITS + fmt.width + 3) // 4
    with open(out_dir / "packets.hex", "w") as f:
        for cyc, _, _, pkt in ordered:
            f.write(f"{(cyc << fmt.width) | fmt.pack(**pkt.fields()):0{digits}x}\n")
    arrivals = [c for c, _, _, _ in ordered]
    pkts = [p for _, _, _, p in ordered]
    csr_writes = csr_writes if csr_writes is not None else csr_program(cfg)
    with open(out_dir / "csr.hex", "w") as f:
        for a, v in csr_writes:
            f.write(f"{a:08x}\n{v:08x}\n")
    last = arrivals[-1] if arrivals else 0
    max_cycles = last + 64 * len(packets) // max(1, cfg.lanes) + 100_000
    text, reads = _verilog(cfg)
    path = out_dir / "player.v"
    path.write_text(text)
    plus = plusargs(packets=len(pkts), csr_words=len(csr_writes), max_cycles=max_cycles,
                    bp_permille=int(bp * 1000), log_accepts=int(log_accepts))
    return path, reads, (arrivals, pkts), plus


def plusargs(**values) -> list:
    """``+name=value`` for each of :data:`PLUSARGS` (all must be given)."""
    assert set(values) == set(PLUSARGS), sorted(values)
    return [f"+{k}={int(v)}" for k, v in values.items()]


def parse_log(cfg: HubConfig, path: Path, reads: list, schedule: tuple,
              log_accepts: bool) -> PlayerResult:
    ctl, credits, stalls, csr, acc_log = [], [], [], {}, []
    done, writes, h = None, 0, 0
    for line in path.read_text().splitlines():
        tag, *v = line.split()
        if tag == "C":
            ctl.append((int(v[0]), CtlWrite(CtlKind(int(v[1])), int(v[2]), int(v[3]))))
        elif tag == "R":
            credits.append((int(v[0]), int(v[1]), int(v[2])))
        elif tag == "S":
            stalls.append((int(v[0]), int(v[1])))
        elif tag == "L":
            done = int(v[0])
        elif tag == "X":
            raise RuntimeError(f"the layer did not finish within {v[0]} cycles (see {path})")
        elif tag == "Q":
            name, index, _ = reads[int(v[0])]
            csr[(name, index)] = int(v[1])
        elif tag == "H":
            writes, h = int(v[0]), int(v[1])
        elif tag == "A":
            acc_log.append((int(v[1]), int(v[0])))
    arrivals, pkts = schedule
    if log_accepts:
        acc_log.sort()
        accepted = [(c, j, p) for (c, j), p in zip(acc_log, pkts)]
    else:
        accepted = accept_schedule(arrivals, pkts, stalls, cfg.lanes)
    return PlayerResult(cycles=done, accepted=accepted, ctl=ctl, credits=credits,
                        writes=writes, write_hash=h, stalls=stalls, csr=csr)


def accept_schedule(arrivals: list, pkts: list, stalls: list, lanes: int) -> list:
    """When and on which lane the player's hub accepted each packet: every cycle the next
    packets of the ordered schedule that have arrived go out on lanes 0, 1, ..., at most
    one per lane, unless the hub is stalling (its ready is common to all lanes)."""
    stalls = sorted(stalls)
    out, t, used, si = [], -1, 0, 0
    for a, p in zip(arrivals, pkts):
        c = max(a, t)
        if c == t and used == lanes:
            c = t + 1
        while True:
            while si < len(stalls) and stalls[si][1] < c:
                si += 1
            if si < len(stalls) and stalls[si][0] <= c:
                c = stalls[si][1] + 1
            else:
                break
        if c != t:
            t, used = c, 0
        out.append((t, used, p))
        used += 1
    return out


def run_player(cfg: HubConfig, packets: Sequence[tuple], *, mode: str = "cocotb",
               csr_writes=None, bp: float = 0.0, tag: str = "player", waves: bool = False,
               log_accepts: bool = False, label: str | None = None,
               sim: str | None = None) -> PlayerResult:
    """Play ``packets`` ((arrival cycle, lane, Packet)) into the hub's RTL and return what
    it did. The player keeps the schedule's order (cycle, lane, then list order) and puts
    the packets that have arrived on lanes 0, 1, ... each cycle, at most one per lane; a
    stalled hub delays later arrivals. ``mode``: "cocotb" or "verilog" (plain testbench).
    ``sim``: "icarus" or "verilator" (default ``$MOEHUB_SIM``, else Verilator when
    installed: :func:`moehub.verif.sim.choose`). ``label`` names the run in progress lines
    (default ``RTL hub <config> [<tag>]``)."""
    from ..rtl.gen import convert   # (Amaranth: imported only to build the hub)
    if mode not in ("cocotb", "verilog"):
        raise ValueError(f"mode = {mode!r}: must be 'cocotb' or 'verilog'")
    sim = simulators.choose(sim, prefer="verilator")
    label = label or f"RTL hub {cfg.name} [{tag}]"
    out = output_dir("player", f"{cfg.name}-{tag}")
    player, reads, schedule, plus = prepare(cfg, packets, out, csr_writes=csr_writes, bp=bp,
                                            log_accepts=log_accepts)
    log = out / "player.log"
    log.unlink(missing_ok=True)
    (out / "progress.txt").unlink(missing_ok=True)
    t0 = time.time()
    with progress.stage(f"{label}: build (Amaranth -> Verilog, {simulators.NAMES[sim]})",
                        heartbeat=True):
        sources = [convert(cfg), player]
        run = _plain(sim, out, sources, plus) if mode == "verilog" else \
            _cocotb(sim, out, sources, plus, waves)
    t1 = time.time()
    with progress.stage(f"{label}: simulate", total=len(packets), unit="packets",
                        heartbeat=True) as st:
        with progress.Follower(out / "progress.txt", lambda lines: _show(st, lines)):
            wave = run()
        t2 = time.time()     # (the follower's last read is done: the final count is last)
        if not log.exists():
            raise RuntimeError(f"the player wrote no log ({log})")
        res = parse_log(cfg, log, reads, schedule, log_accepts)
        st.update(len(res.accepted), cycles=res.cycles or 0)      # the final count
    res.wall_s, res.build_s, res.sim, res.waves = t2 - t1, t1 - t0, sim, wave
    return res


def _show(stage, lines: list) -> None:
    """The player's last ``<cycle> <packets accepted>`` line."""
    cycle, head = (int(x) for x in lines[-1].split()[:2])
    stage.update(head, cycles=cycle)


def _plain(sim: str, out: Path, sources: list, plus: list):
    """Build (or reuse) the plain testbench; returns the function that runs it."""
    build = simulators.build(sim, sources, "player_tb", plain=True,
                             build_args=["-DPLAYER_PLAIN"])
    cmd = simulators.plain_command(sim, build, "player_tb") + plus

    def run():
        with open(out / "plain.log", "w") as f:
            r = subprocess.run(cmd, cwd=out, stdout=f, stderr=subprocess.STDOUT)
        if r.returncode:
            raise RuntimeError(f"player run failed; see {out / 'plain.log'}")
    return run


def _cocotb(sim: str, out: Path, sources: list, plus: list, waves: bool):
    """Build (or reuse) the cocotb simulation (clock in C); returns the function that
    runs it and returns the waveform path (or None)."""
    build = simulators.build(sim, sources, PLAYER_TOP, waves=waves)
    logs = out / "cocotb"
    logs.mkdir(exist_ok=True)
    progress.debug(f"RTL player simulation log: {logs / 'sim.log'}")

    def run():
        results = logs / "results.xml"
        results.unlink(missing_ok=True)
        wave = simulators.test(sim, build, PLAYER_TOP, "moehub.verif.tb_player", out,
                              plusargs=plus, waves=waves, results=results,
                              log=logs / "sim.log")
        if not results.exists() or simulators.parse_results(results)["failed"]:
            raise RuntimeError(f"player run failed; see {logs / 'sim.log'}")
        return wave
    return run


def replay_into_model(cfg: HubConfig, res: PlayerResult, csr_writes=None) -> HubModel:
    """The reference model given the player's CSR writes (default :func:`csr_program`),
    then fed with the RTL's acceptance order and cycles."""
    model = HubModel(cfg)
    for addr, data in (csr_writes if csr_writes is not None else csr_program(cfg)):
        model.write_addr(addr, data)
    for c, j, pkt in res.accepted:
        model.packet(pkt, j, c)
    model.end()
    return model


def model_write_hash(cfg: HubConfig, model: HubModel) -> tuple:
    n, h = 0, 0
    for lane in model.writes:
        for a, d in lane:
            n += 1
            h = (h + write_hash(cfg, a, d)) & ((1 << 64) - 1)
    return n, h
