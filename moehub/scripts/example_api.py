"""The Python API in one script: a co-simulated layer, a small sweep, and (when the tools are
installed) the synthesis of the smallest hub. Run it with ``.venv/bin/python
scripts/example_api.py`` (about 10 s; add ``--synth`` for the ``tiny`` synthesis, a few
minutes). The tests run it (tests/test_api.py)."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import moehub.cosim as cosim
import moehub.synth as synth


def layer(out: Path) -> None:
    """One Mixtral-8x7B layer on 8x H100: the table, one number, the files."""
    r = cosim.run(model="mixtral-8x7b", system="h100x8", tokens=1024)
    print(r.table())
    print(f"hub vs DeepEP: {r.speedup('deepep'):.2f}x faster; "
          f"hub layer {r.to_dict()['systems']['hub']['layer_us']:.0f} us")
    paths = r.write(run="example", out=out, figure=False)
    print("files:", ", ".join(p.name for p in paths.values()))


def sweep() -> None:
    """The hub's speedup over the best baseline as tokens per GPU grow."""
    print(f"{'tokens/GPU':>10} {'hub us':>9} {'best baseline':>22} {'speedup':>8}")
    for tokens in (256, 1024, 4096):
        r = cosim.run(tokens=tokens)
        best = min((s for s in r.systems if s not in ("hub", "ideal")), key=r.latency_us)
        print(f"{tokens:>10} {r.latency_us('hub'):>9.1f} {best:>22} {r.speedup(best):>7.2f}x")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--synth", action="store_true", help="also synthesize the tiny hub")
    p.add_argument("--out", default=None, help="folder for the files (default: a temporary one)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        layer(out)
        sweep()
        if args.synth:
            print(synth.run("tiny", out=out / "synth-tiny").table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
