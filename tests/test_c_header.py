"""The C header ``moehub_csr.h`` (``moehub rtl``) against the Python register map, through
a C compiler.

For every hub config a small C program includes the header twice (the include guard)
and prints every symbol a driver uses -- offsets, masks, shifts, reset values, clamps,
configuration, reasons, output-array offsets -- evaluated by the compiler; the test parses
the output and compares each value with what the Python side says: the CSR map, the
reference model (reset values and clamps, proven equal to the CSR bank by
tests/test_register_model.py), the CTRL/STATUS constants and the output formats. The
values expected here are computed from those sources, not from the header generator.
"""
import re
import shutil
import subprocess

import pytest

from moehub.spec.config import available, load_hub_config
from moehub.spec import csr_map as cm
from moehub.spec.csr_map import CsrMap
from moehub.spec.formats import HubFormats, Reason, config_reasons, count_addr, flag_addr, meta_addr
from moehub.spec.model import HubModel

CC = shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (gcc or cc) on PATH: "
                                                   "the generated header cannot be compiled")
CONFIGS = available("hub")
#: a variant whose metadata word and addresses are wider than 32 bits (64-bit fields)
WIDE = "tiny-wide"


def _config(name):
    if name == WIDE:
        return load_hub_config("tiny").replace(name=WIDE, token_bits=32, addr_bits=48)
    return load_hub_config(name)
P = "MOEHUB_"


def _bit(name: str, mask: int) -> dict[str, int]:
    return {f"{name}_SHIFT": mask.bit_length() - 1, f"{name}_MASK": mask, f"{name}_WIDTH": 1}


def _clamped(cfg, name: str, value: int) -> int:
    """What the reference model reads back after ``value`` is written to ``name``."""
    m = HubModel(cfg)
    m.write(name, value)
    return m.read(name)


def expected_registers(cfg) -> dict[str, int]:
    """Per register: offsets, size, access, reset value; arrays: count, stride, offsets."""
    cmap, model = CsrMap(cfg), HubModel(cfg)
    access = {"ro": f"{P}ACCESS_RO", "wo": f"{P}ACCESS_WO", "rw": f"{P}ACCESS_RW"}
    exp = {"REG_COUNT": len(cmap.registers), "SIZE_WORDS": cmap.size_words,
           "SIZE_BYTES": 4 * cmap.size_words, "ADDR_BITS": cmap.addr_bits, "ID_VALUE": cm.HUB_ID,
           "ACCESS_RO": 1, "ACCESS_WO": 2, "ACCESS_RW": 3}
    for r in cmap.registers.values():
        n = r.name
        exp.update({f"{n}_INDEX": r.offset, f"{n}_OFFSET": 4 * r.offset, f"{n}_WORDS": r.words,
                    f"{n}_WIDTH": r.width, **({f"{n}_MASK": (1 << r.width) - 1} if r.width <= 64 else {}),
                    f"{n}_RESET": 0 if r.access == "wo" else model.read(n)})
        exp[f"{n}_ACCESS == {access[r.access]}"] = 1
        if r.array:
            exp.update({f"{n}_COUNT": r.count, f"{n}_STRIDE": 4 * r.words})
            exp.update({f"{n}_OFFSET_AT({i})": 4 * r.addr(i) for i in range(r.count)})
    return exp


def expected_fields(cfg) -> dict[str, int]:
    """CTRL and STATUS bits from their constants, ERRORS bits from the reasons, PARAMS
    decoded from its reset value, clamps as the model applies them."""
    exp = {}
    for name in ("START", "FLUSH", "CLEAR_ERRORS"):
        exp.update(_bit(f"CTRL_{name}", getattr(cm, f"CTRL_{name}")))
    for name in ("ARMED", "CLEARING", "SWEEPING", "DONE", "ERROR"):
        exp.update(_bit(f"STATUS_{name}", getattr(cm, f"STATUS_{name}")))
    for r in config_reasons(cfg):
        exp.update(_bit(f"ERRORS_{r.name}", 1 << int(r)))
        exp[f"REASON_{r.name}"] = int(r)
    exp["REASON_COUNT"] = len(config_reasons(cfg))
    params = {"LANES": cfg.lanes, "EXPERTS": cfg.experts, "SOURCES": cfg.sources,
              "TAGS": cfg.tags_per_source}
    for name, value in params.items():
        exp[f"FIELD_GET({P}PARAMS_{name}, {P}PARAMS_RESET)"] = value
        exp[f"PARAMS_{name}_WIDTH"] = 8
    width = CsrMap(cfg)["TILE_ROWS_LOG2"].width
    exp["TILE_ROWS_LOG2_MIN"] = _clamped(cfg, "TILE_ROWS_LOG2", 0)
    exp["TILE_ROWS_LOG2_MAX"] = _clamped(cfg, "TILE_ROWS_LOG2", (1 << width) - 1)
    exp["REGION_CAP_MIN"] = _clamped(cfg, "REGION_CAP", 0)
    exp["REGION_CAP_MAX"] = _clamped(cfg, "REGION_CAP", (1 << CsrMap(cfg)["REGION_CAP"].width) - 1)
    return exp


def expected_config_and_outputs(cfg) -> dict[str, int]:
    """Configuration parameters; output-array offsets and metadata word fields as
    :mod:`moehub.spec.formats` forms them."""
    exp = {f"CFG_{k.upper()}": getattr(cfg, k) for k in
           ("sources", "experts", "lanes", "chunk_bytes", "row_bytes", "tags_per_source",
            "max_rows_per_expert", "tile_rows", "min_tile_rows", "max_tile_rows", "token_bits",
            "topk", "addr_bits", "data_bits", "timeout_cycles", "chunks_per_row",
            "stride_bytes", "tiles_per_expert", "meta_word_bytes")}
    last = cfg.experts - 1
    for e, t in [(0, 0), (0, 1), (last, cfg.tiles_per_expert - 1)]:
        exp[f"FLAG_ENTRY_OFFSET({e}, {t})"] = flag_addr(cfg, 0, e, t)
    for e, row in [(0, 0), (0, 1), (last, cfg.max_rows_per_expert - 1)]:
        exp[f"META_ENTRY_OFFSET({e}, {row})"] = meta_addr(cfg, 0, e, row)
    exp.update({f"COUNT_ENTRY_OFFSET({e})": count_addr(cfg, 0, e) for e in range(cfg.experts)})
    exp["DONE_ENTRY_OFFSET"] = count_addr(cfg, 0, cfg.experts)
    meta = HubFormats(cfg).meta_word
    probe = {"src": cfg.sources - 1, "token": (1 << cfg.token_bits) - 2, "slot": cfg.topk - 1}
    for f in meta.fields:
        n = f.name.upper()
        exp[f"FIELD_SET({P}META_WORD_{n}, {probe[f.name]})"] = meta.pack(**{f.name: probe[f.name]})
        exp[f"META_WORD_{n}_WIDTH"] = f.width
    return exp


def c_program(exprs: list[str]) -> str:
    """Includes the header twice; checks each field's mask against its shift and width
    at compile time; prints ``expression value`` per line."""
    lines = ['#include "moehub_csr.h"', '#include "moehub_csr.h"  /* the guard */',
             "#include <stdio.h>", "int main(void) {",
             '    printf("CONFIG_NAME %s\\n", MOEHUB_CONFIG_NAME);',
             '    printf("VERSION %s\\n", MOEHUB_VERSION);',
             '    printf("CFG_HUB_CLOCK_GHZ %.17g\\n", (double)MOEHUB_CFG_HUB_CLOCK_GHZ);']
    for e in exprs:
        lines.append(f'    printf("%s %llu\\n", "{e}", (unsigned long long)({P}{e}));')
    return "\n".join(lines + ["    return 0;", "}", ""])


def static_asserts(header: str) -> str:
    """``_Static_assert`` for every field (MASK == ones(WIDTH) << SHIFT) and register
    (OFFSET == 4 x INDEX) the header defines."""
    out = []
    for f in re.findall(r"^#define (MOEHUB_\w+)_SHIFT ", header, re.M):
        out.append(f"_Static_assert({f}_MASK == (((UINT64_C(1) << {f}_WIDTH) - 1) << {f}_SHIFT), "
                   f'"{f}");')
    for r in re.findall(r"^#define (MOEHUB_\w+)_INDEX ", header, re.M):
        out.append(f'_Static_assert({r}_OFFSET == 4 * {r}_INDEX, "{r}");')
    return "\n".join(out) + "\n"


def compile_and_run(tmp_path, header: str, exprs: list[str]) -> str:
    (tmp_path / "moehub_csr.h").write_text(header)
    src = c_program(exprs).replace("int main(void) {", static_asserts(header) + "int main(void) {")
    (tmp_path / "t.c").write_text(src)
    cc = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-o", "t", "t.c"],
                        cwd=tmp_path, capture_output=True, text=True)
    assert cc.returncode == 0, f"{CC} failed:\n{cc.stderr[-4000:]}"
    return subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout


@needs_cc
@pytest.mark.parametrize("name", CONFIGS + [WIDE])
def test_c_header_values_match_the_python_map(name, tmp_path):
    cfg = _config(name)
    exp = {**expected_registers(cfg), **expected_fields(cfg), **expected_config_and_outputs(cfg)}
    out = compile_and_run(tmp_path, CsrMap(cfg).to_c_header(), sorted(exp))
    got = dict(line.rsplit(" ", 1) for line in out.splitlines() if " " in line)
    from moehub import __version__
    assert got.pop("CONFIG_NAME") == cfg.name and got.pop("VERSION") == __version__
    assert float(got.pop("CFG_HUB_CLOCK_GHZ")) == pytest.approx(cfg.hub_clock_GHz)
    wrong = {k: (int(got[k]), v) for k, v in exp.items() if int(got[k]) != v}
    assert not wrong, f"header value != Python value (got, expected): {wrong}"


@needs_cc
@pytest.mark.parametrize("name", CONFIGS + [WIDE])
def test_c_header_is_strict_c99_and_names_its_source(name, tmp_path):
    """The header alone compiles as pedantic C99 (it includes what it uses), is read
    once however often it is included, and its opening comment names the generator, the
    version and the config."""
    from moehub import __version__
    header = CsrMap(_config(name)).to_c_header()
    (tmp_path / "moehub_csr.h").write_text(header)
    (tmp_path / "u.c").write_text(
        '#include "moehub_csr.h"\n#undef MOEHUB_REG_COUNT\n#include "moehub_csr.h"\n'
        '#ifdef MOEHUB_REG_COUNT\n#error "read twice: no include guard"\n#endif\n'
        "uint32_t ctrl_start(void) { return MOEHUB_CTRL_START_MASK; }\n")
    cc = subprocess.run([CC, "-std=c99", "-pedantic-errors", "-Wall", "-Wextra", "-Werror",
                         "-fsyntax-only", "u.c"], cwd=tmp_path, capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr[-4000:]
    head = header.split("*/", 1)[0]
    assert "Generated by moehub" in head and __version__ in head and f"'{name}'" in head
    assert re.search(r"^#ifndef MOEHUB_CSR_H\n#define MOEHUB_CSR_H$", header, re.M)
    assert header.rstrip().endswith("#endif /* MOEHUB_CSR_H */")


def test_c_header_rejects_a_symbol_defined_twice():
    """A register named like another's field (STATUS_ARMED beside STATUS.ARMED) would give
    one macro twice: an identical redefinition compiles silently, so the generator refuses
    it (the map itself accepts the two names)."""
    cmap = CsrMap(load_hub_config("tiny"))
    clash = cm.Register("STATUS_ARMED", 1, "ro", "a register named like STATUS's field ARMED",
                        offset=cmap.size_words)
    cmap.registers[clash.name] = clash
    with pytest.raises(ValueError, match="MOEHUB_STATUS_ARMED_MASK"):
        cmap.to_c_header()
