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
cycles per second and an ETA (:mod:`moehub.progress`) while Icarus runs.

The same player runs in two ways:

* ``mode="cocotb"``: under cocotb with the clock in C (``Clock(impl="gpi")``);
* ``mode="verilog"``: a plain Icarus testbench with its own clock -- the speed ceiling.

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
from ..config.schema import HubConfig
from ..rtl.csr_map import CTRL_START, CsrMap
from ..paths import output_dir
from ..rtl.formats import CtlKind, HubFormats
from .model import CtlWrite, HubModel

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
    configuration's tile size) and TIMEOUT. The co-simulation's model hub is programmed
    with the same list (:meth:`~moehub.verif.model.HubModel.write`)."""
    lay = layout or default_layout(cfg)
    caps = caps if caps is not None else [cfg.max_rows_per_expert] * cfg.experts
    prog = []
    for e in range(cfg.experts):
        prog += [("REGION_BASE", lay["region_base"][e], e), ("REGION_CAP", int(caps[e]), e)]
    prog += [("FLAG_BASE", lay["flag_base"], 0), ("META_BASE", lay["meta_base"], 0),
             ("COUNT_BASE", lay["count_base"], 0), ("EPOCH", epoch, 0),
             ("TILE_ROWS_LOG2", tile_rows_log2 if tile_rows_log2 is not None
              else cfg.tile_rows.bit_length() - 1, 0),
             ("TIMEOUT", timeout, 0), ("CTRL", CTRL_START, 0)]
    return prog


def csr_program(cfg: HubConfig, **kw) -> list:
    """:func:`layer_program` as register-bus writes ``(word address, data)``, in order."""
    cmap = CsrMap(cfg)
    return [w for name, value, index in layer_program(cfg, **kw)
            for w in cmap.word_writes(name, value, index)]


def _verilog(cfg: HubConfig, n_packets: int, n_csr: int, bp_permille: int,
             log_accepts: bool, max_cycles: int) -> tuple:
    """The player module (and, under PLAYER_PLAIN, a plain testbench with its own clock)."""
    fmts = HubFormats(cfg)
    L = cfg.lanes
    PW, WW, CW, RW = fmts.packet.width, fmts.write.width, fmts.ctl.width, fmts.credit.width
    AW, DB = cfg.addr_bits, cfg.data_bits
    cmap = CsrMap(cfg)
    AB = cmap.addr_bits
    reads = [(r.name, i, r.addr(i, 0)) for r in cmap.registers.values()
             if r.name in ("DROPS", "ROWS", "STATUS", "INFLIGHT") for i in range(r.count)]
    v = [f"// Generated by moehub.verif.player for hub config '{cfg.name}'. Do not edit.",
         "`timescale 1ns/1ps",
         f"module {PLAYER_TOP}(input clk, output reg done);",
         "  // state: 0 reset, 1 program CSRs, 2 wait until the hub accepts, 3 play,",
         "  //        4/6/7 read status CSRs, 5 done",
         "  reg rst = 1;",
         "  reg [3:0] state = 0;",
         f"  reg [{CYCLE_BITS - 1}:0] t = 0;   // schedule cycle: 0 = first cycle the hub accepts",
         "  integer f, pf, wait_cnt = 0, csr_i = 0, rd_i = 0;",
         "  reg [63:0] hash = 0, writes = 0;",
         "  reg stalled = 0; reg [31:0] stall_from = 0;",
         f"  reg [31:0] csr_mem [0:{max(1, 2 * n_csr) - 1}];",
         f"  reg [{AB - 1}:0] csr_addr = 0; reg csr_w = 0, csr_r = 0; reg [31:0] csr_wdata = 0;",
         "  wire [31:0] csr_rdata;"]
    n = n_packets
    v += [f"  reg [{CYCLE_BITS + PW - 1}:0] mem [0:{max(1, n) - 1}];",
          "  reg [31:0] head = 0;        // next packet of the ordered schedule"]
    for j in range(L):
        v += [f"  wire [{CYCLE_BITS + PW - 1}:0] e{j} = mem[head + {j}];",
              f"  wire v{j} = (state == 3) && (head + {j} < {n}) && (e{j}[{CYCLE_BITS + PW - 1}:{PW}] <= t);",
              f"  wire [{PW - 1}:0] p{j} = e{j}[{PW - 1}:0];",
              f"  wire r{j}, wv{j}; wire [{WW - 1}:0] wp{j}; reg wr_rdy{j} = 1;",
              f"  wire wf{j} = wv{j} & wr_rdy{j};",
              f"  wire [63:0] wa{j} = {{{{{64 - AW}{{1'b0}}}}, wp{j}[{AW - 1}:0]}};",
              f"  wire [63:0] wd{j} = {{{{{64 - DB}{{1'b0}}}}, wp{j}[{WW - 1}:{AW}]}};",
              f"  wire [63:0] h{j} = wa{j} ^ (wd{j} << 20) ^ (wa{j} << 37);"]
    v += [f"  wire cv, rv, ldone; wire [{CW - 1}:0] cp; wire [{RW - 1}:0] rp;"]
    ports = [".clk(clk)", ".rst(rst)"]
    for j in range(L):
        ports += [f".i__{j}__valid(v{j})", f".i__{j}__payload(p{j})", f".i__{j}__ready(r{j})",
                  f".wr__{j}__valid(wv{j})", f".wr__{j}__payload(wp{j})",
                  f".wr__{j}__ready(wr_rdy{j})"]
    ports += [".ctl__valid(cv)", ".ctl__payload(cp)", ".ctl__ready(1'b1)",
              ".credit__valid(rv)", ".credit__payload(rp)", ".credit__ready(1'b1)",
              ".csr__addr(csr_addr)", ".csr__r_stb(csr_r)", ".csr__w_stb(csr_w)",
              ".csr__w_data(csr_wdata)", ".csr__r_data(csr_rdata)", ".layer_done(ldone)"]
    v.append("  moehub hub(" + ", ".join(ports) + ");")
    any_v = " | ".join(f"v{j}" for j in range(L))
    hsum = " + ".join(f"(wf{j} ? h{j} : 64'd0)" for j in range(L))
    wsum = " + ".join(f"wf{j}" for j in range(L))
    v += ["  initial begin",
          "    done = 0;",
          '    f = $fopen("player.log", "w");',
          '    pf = $fopen("progress.txt", "w");',
          '    $readmemh("csr.hex", csr_mem);']
    if n_packets:
        v.append('    $readmemh("packets.hex", mem);')
    v += ["  end",
          "  always @(posedge clk) begin",
          "    csr_w <= 0; csr_r <= 0;",
          f"    hash <= hash + {hsum};",
          f"    writes <= writes + {wsum};",
          "    case (state)",
          "      0: begin wait_cnt <= wait_cnt + 1; if (wait_cnt == 2) begin rst <= 0; state <= 1; end end",
          f"      1: if (csr_i < {n_csr}) begin csr_addr <= csr_mem[2 * csr_i];"
          " csr_wdata <= csr_mem[2 * csr_i + 1]; csr_w <= 1; csr_i <= csr_i + 1;"
          " end else begin state <= 2; wait_cnt <= 0; end",
          "      2: begin wait_cnt <= wait_cnt + 1; if (wait_cnt >= 3 && r0) begin state <= 3; t <= 0; end end",
          "      3: begin",
          "        t <= t + 1;",
          f"        if (t[{PROGRESS_CYCLES.bit_length() - 2}:0] == 0) begin"
          ' $fwrite(pf, "%0d %0d\\n", t, head); $fflush(pf); end',
          f"        if (!r0 && ({any_v})) begin if (!stalled) begin stalled <= 1; stall_from <= t; end end",
          '        else if (stalled) begin stalled <= 0; $fwrite(f, "S %0d %0d\\n", stall_from, t - 1); end',
          '        if (ldone) begin $fwrite(f, "L %0d\\n", t); state <= 4; end',
          f'        else if (t >= {max_cycles}) begin $fwrite(f, "X %0d\\n", t); state <= 4; end',
          "      end",
          f"      4: if (rd_i < {len(reads)}) begin csr_addr <= rd_addr(rd_i); csr_r <= 1; state <= 6; end",
          '         else begin $fwrite(f, "H %0d %0d\\n", writes, hash); $fclose(f); done <= 1; state <= 5; end',
          "      6: state <= 7;",
          '      7: begin $fwrite(f, "Q %0d %0d\\n", rd_i, csr_rdata); rd_i <= rd_i + 1; state <= 4; end',
          "      default: ;",
          "    endcase"]
    taken = " + ".join(f"(v{j} && r{j})" for j in range(L))
    v.append(f"    head <= head + {taken};")
    for j in range(L):
        if log_accepts:
            v.append(f'    if (v{j} && r{j}) $fwrite(f, "A %0d %0d\\n", {j}, t);')
        if bp_permille:
            v.append(f"    wr_rdy{j} <= ($urandom % 1000) >= {bp_permille};")
    a0, a1 = 2, 2 + AW
    v += [f'    if (cv) $fwrite(f, "C %0d %0d %0d %0d\\n", t, cp[1:0], cp[{a1 - 1}:{a0}], cp[{CW - 1}:{a1}]);',
          f'    if (rv) $fwrite(f, "R %0d %0d %0d\\n", t, rp[{cfg.src_bits - 1}:0], rp[{RW - 1}:{cfg.src_bits}]);',
          "  end",
          f"  function [{AB - 1}:0] rd_addr(input integer i);",
          "    case (i)"]
    v += [f"      {k}: rd_addr = {a};" for k, (_, _, a) in enumerate(reads)]
    v += ["      default: rd_addr = 0;", "    endcase", "  endfunction",
          "endmodule",
          "`ifdef PLAYER_PLAIN",
          "module player_tb;",
          "  reg clk = 0; wire done;",
          f"  {PLAYER_TOP} p(.clk(clk), .done(done));",
          "  always #5 clk = ~clk;",
          "  always @(posedge done) #20 $finish;",
          "endmodule",
          "`endif"]
    return "\n".join(v) + "\n", reads


def prepare(cfg: HubConfig, packets: Sequence[tuple], out_dir: Path, *, csr_writes=None,
            bp: float = 0.0, log_accepts: bool = False) -> tuple:
    """Write the player Verilog and the packet and CSR hex files; returns (player.v, the CSR
    reads it makes at the end, (arrival cycles, packets) in play order)."""
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
    text, reads = _verilog(cfg, len(pkts), len(csr_writes), int(bp * 1000), log_accepts,
                           max_cycles)
    path = out_dir / "player.v"
    path.write_text(text)
    return path, reads, (arrivals, pkts)


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
               log_accepts: bool = False, label: str | None = None) -> PlayerResult:
    """Play ``packets`` ((arrival cycle, lane, Packet)) into the hub's RTL and return what
    it did. The player keeps the schedule's order (cycle, lane, then list order) and puts
    the packets that have arrived on lanes 0, 1, ... each cycle, at most one per lane; a
    stalled hub delays later arrivals. ``mode``: "cocotb" or "verilog" (plain testbench).
    ``label`` names the run in progress lines (default ``RTL hub <config> [<tag>]``)."""
    from ..rtl.gen import convert   # (Amaranth: imported only to build the hub)
    if mode not in ("cocotb", "verilog"):
        raise ValueError(f"mode = {mode!r}: must be 'cocotb' or 'verilog'")
    label = label or f"RTL hub {cfg.name} [{tag}]"
    out = output_dir("player", f"{cfg.name}-{tag}")
    player, reads, schedule = prepare(cfg, packets, out, csr_writes=csr_writes, bp=bp,
                                      log_accepts=log_accepts)
    log = out / "player.log"
    log.unlink(missing_ok=True)
    (out / "progress.txt").unlink(missing_ok=True)
    t0 = time.time()
    with progress.stage(f"{label}: build (Amaranth -> Verilog, Icarus)", heartbeat=True):
        hub_v = convert(cfg)
        run = _build_verilog(out, hub_v, player) if mode == "verilog" else \
            _build_cocotb(out, hub_v, player, waves)
    t1 = time.time()
    with progress.stage(f"{label}: simulate", total=len(packets), unit="packets",
                        heartbeat=True) as st:
        with progress.Follower(out / "progress.txt", lambda lines: _show(st, lines)):
            run()
        t2 = time.time()          # the follower has read its last line: the final count wins
        if not log.exists():
            raise RuntimeError(f"the player wrote no log ({log})")
        res = parse_log(cfg, log, reads, schedule, log_accepts)
        st.update(len(res.accepted), cycles=res.cycles or 0)      # the final count
    res.wall_s, res.build_s = t2 - t1, t1 - t0
    return res


def _show(stage, lines: list) -> None:
    """The player's last ``<cycle> <packets accepted>`` line."""
    cycle, head = (int(x) for x in lines[-1].split()[:2])
    stage.update(head, cycles=cycle)


def _build_verilog(out: Path, hub_v: Path, player: Path):
    """Compile the plain testbench; returns the function that runs it."""
    vvp = out / "plain.vvp"
    subprocess.run(["iverilog", "-g2012", "-DPLAYER_PLAIN", "-s", "player_tb", "-o", str(vvp),
                    str(hub_v), str(player)], check=True)
    return lambda: subprocess.run(["vvp", "-n", str(vvp)], cwd=out, check=True,
                                  stdout=subprocess.DEVNULL)


def _build_cocotb(out: Path, hub_v: Path, player: Path, waves: bool):
    """Build the cocotb simulation (clock in C); returns the function that runs it."""
    from cocotb_tools.runner import get_runner
    runner = get_runner("icarus")
    build = out / "cocotb"
    runner.build(sources=[str(hub_v), str(player)], hdl_toplevel=PLAYER_TOP, build_dir=build,
                 timescale=("1ns", "1ps"), always=True, waves=waves,
                 log_file=build / "build.log")
    progress.debug(f"RTL player simulation log: {build / 'sim.log'}")

    def run():
        try:
            runner.test(test_module="moehub.verif.tb_player", hdl_toplevel=PLAYER_TOP,
                        build_dir=build, test_dir=out, timescale=("1ns", "1ps"), waves=waves,
                        results_xml=str(build / "results.xml"), log_file=build / "sim.log")
        except (SystemExit, RuntimeError):
            raise RuntimeError(f"player run failed; see {build / 'sim.log'}") from None
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
