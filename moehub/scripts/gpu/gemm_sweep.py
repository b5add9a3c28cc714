"""Grouped and dense expert-GEMM efficiency of one GPU, and PyTorch's per-op host costs.

Runs on a GPU machine with PyTorch (not part of the package: the co-simulation reads only
the JSON record this writes, ``cosim/data/gpu_measured/*.json``). For every configured
expert shape (``config/model/*.yaml``: hidden H, expert FFN I) it times the two GEMMs of a
SwiGLU expert -- GEMM1 M x H @ H x 2I, GEMM2 M x I @ I x H -- at M = 16 ... 8192 rows:

* dense BF16 (cuBLAS through ``torch.mm``), one expert;
* grouped BF16 (``torch._grouped_mm``: one launch over G experts of M rows each), the
  kernel an expert-parallel layer runs when each GPU holds G experts;
* FP8 e4m3 with row-wise scales, dense (``torch._scaled_mm``) and grouped
  (``torch._scaled_grouped_mm``), where the GPU has FP8.

Weights are cycled through enough copies to exceed the L2 cache, so a small-M GEMM reads
its weights from HBM as a layer does (the regime decode lives in). Each figure is the
median of ``REPS`` timed calls (CUDA events) after warm-ups. Reported: microseconds per
call, TFLOP/s, and the HBM bytes per second the weights + activations imply.
"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time

import torch

SHAPES = {  # model: (hidden, expert_ffn), from config/model/*.yaml
    "mixtral-8x7b": (4096, 14336), "phi-3.5-moe": (4096, 6400),
    "deepseek-v3": (7168, 2048), "deepseek-v4-flash": (4096, 2048),
    "deepseek-v4-pro": (7168, 3072), "qwen2-57b-a14b": (3584, 2560),
    "x-moe-medium": (5120, 1536), "x-moe-small": (2048, 1408),
}
MS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
GROUPS = (4, 8, 32)                      # experts per GPU at EP64 / EP32 / EP8 (256 experts)
GROUPED_SHAPES = ("deepseek-v3", "deepseek-v4-flash", "qwen2-57b-a14b")
REPS, WARM, BURST = 15, 3, 4
L2_BYTES = 60e6 * 4                      # cycle weights over >= 4x a 60 MB L2


def timed(fn, n_inputs: int) -> float:
    """Median GPU microseconds of one call ``fn(i)`` (i cycles over the input copies).

    Each repetition first queues a ~0.5 ms sleep kernel, so the host has enqueued the
    ``BURST`` timed calls before the GPU reaches them: the events then time the GPU's
    back-to-back work, not the host's launch overhead."""
    for i in range(WARM):
        fn(i % n_inputs)
    torch.cuda.synchronize()
    times, j = [], 0
    for r in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)
        a.record()
        for _ in range(BURST):
            fn(j % n_inputs)
            j += 1
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / BURST)
    return statistics.median(times)


def copies(nbytes: float) -> int:
    return max(1, min(16, int(L2_BYTES // max(nbytes, 1)) + 1))


def record(kind, model, gemm, m, g, n, k, us, wbytes, abytes):
    flops = 2.0 * g * m * n * k
    nbytes = g * (n * k * wbytes + m * k * abytes + m * n * 2)
    return dict(kind=kind, model=model, gemm=gemm, m=m, groups=g, n=n, k=k, us=round(us, 3),
                tflops=round(flops / us / 1e6, 2), hbm_GBps=round(nbytes / us / 1e3, 1))


def dense_bf16(model, gemm, n, k):
    out = []
    nw = copies(n * k * 2)
    ws = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(nw)]
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        us = timed(lambda i: torch.mm(x, ws[i]), nw)
        out.append(record("dense_bf16", model, gemm, m, 1, n, k, us, 2, 2))
    return out


def grouped_bf16(model, gemm, n, k, g):
    out = []
    nw = copies(g * n * k * 2)
    # B as (G, N, K) transposed to (G, K, N): the column-major layout the kernel wants
    ws = [torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
          for _ in range(nw)]
    for m in MS:
        if g * m > 65536:
            break
        x = torch.randn(g * m, k, device="cuda", dtype=torch.bfloat16)
        offs = torch.arange(m, g * m + 1, m, device="cuda", dtype=torch.int32)
        us = timed(lambda i: torch._grouped_mm(x, ws[i], offs=offs), nw)
        out.append(record("grouped_bf16", model, gemm, m, g, n, k, us, 2, 2))
    return out


def dense_fp8(model, gemm, n, k):
    out = []
    f8 = torch.float8_e4m3fn
    nw = copies(n * k)
    ws = [torch.randn(n, k, device="cuda").to(f8).t() for _ in range(nw)]   # K x N col-major
    sb = torch.ones(1, n, device="cuda", dtype=torch.float32)
    for m in MS:
        x = torch.randn(m, k, device="cuda").to(f8)
        sa = torch.ones(m, 1, device="cuda", dtype=torch.float32)
        us = timed(lambda i: torch._scaled_mm(x, ws[i], scale_a=sa, scale_b=sb,
                                              out_dtype=torch.bfloat16), nw)
        out.append(record("dense_fp8_rowwise", model, gemm, m, 1, n, k, us, 1, 1))
    return out


def grouped_fp8(model, gemm, n, k, g):
    out = []
    f8 = torch.float8_e4m3fn
    nw = copies(g * n * k)
    ws = [torch.randn(g, n, k, device="cuda").to(f8).transpose(-2, -1) for _ in range(nw)]
    sb = torch.ones(g, n, device="cuda", dtype=torch.float32)
    for m in MS:
        if g * m > 65536:
            break
        x = torch.randn(g * m, k, device="cuda").to(f8)
        sa = torch.ones(g * m, device="cuda", dtype=torch.float32)
        offs = torch.arange(m, g * m + 1, m, device="cuda", dtype=torch.int32)
        us = timed(lambda i: torch._scaled_grouped_mm(x, ws[i], sa, sb, offs=offs,
                                                      out_dtype=torch.bfloat16), nw)
        out.append(record("grouped_fp8_rowwise", model, gemm, m, g, n, k, us, 1, 1))
    return out


def expert_gemms(model):
    h, ffn = SHAPES[model]
    return (("gemm1", 2 * ffn, h), ("gemm2", h, ffn))


def host_costs() -> dict:
    """PyTorch-level costs an eager dispatcher pays: one op's host time, .item() and
    .tolist() of split sizes (a D2H copy + sync), torch.cuda.synchronize()."""
    x = torch.zeros(1, device="cuda")
    splits = torch.zeros(64, device="cuda", dtype=torch.int64)
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    res = {}
    t = time.perf_counter()
    for _ in range(1000):
        x.add_(1)
    res["torch_op_host_us"] = (time.perf_counter() - t) / 1000 * 1e6
    torch.cuda.synchronize()

    def med(fn, n=1000):
        v = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            v.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(v)
    res["torch_sync_idle_us"] = med(torch.cuda.synchronize)
    res["torch_op_then_sync_us"] = med(lambda: (x.add_(1), torch.cuda.synchronize()))
    res["torch_item_us"] = med(lambda: x.item())
    res["torch_op_then_item_us"] = med(lambda: x.add_(1).item())
    res["torch_tolist64_us"] = med(lambda: splits.tolist())
    return {k: round(v, 3) for k, v in res.items()}


def hbm_copy() -> dict:
    a = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = timed(lambda i: b.copy_(a), 1)
    return {"copy_bytes": 2 ** 30, "copy_us": round(us, 1),
            "copy_GBps_read_plus_write": round(2 * 2 ** 30 / us / 1e3, 1)}


def main(out_path: str) -> None:
    t_start = time.time()
    rec = {"what": "expert GEMM sweep and PyTorch host costs (scripts/gpu/gemm_sweep.py)",
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(),
           "sms": torch.cuda.get_device_properties(0).multi_processor_count,
           "reps": REPS, "warmups": WARM, "burst": BURST, "errors": [], "rows": []}
    torch.backends.cuda.matmul.allow_tf32 = False
    for section, fn in (("host", host_costs), ("hbm", hbm_copy)):
        try:
            rec[section] = fn()
        except Exception as e:                          # noqa: BLE001 -- record, go on
            rec["errors"].append(f"{section}: {e!r}")
    jobs = []
    for model in SHAPES:
        for gemm, n, k in expert_gemms(model):
            jobs.append((dense_bf16, (model, gemm, n, k)))
            if model in GROUPED_SHAPES:
                jobs += [(grouped_bf16, (model, gemm, n, k, g)) for g in GROUPS]
                jobs.append((dense_fp8, (model, gemm, n, k)))
                jobs += [(grouped_fp8, (model, gemm, n, k, g)) for g in GROUPS]
    for fn, args in jobs:
        try:
            rec["rows"] += fn(*args)
        except Exception as e:                          # noqa: BLE001 -- record, go on
            rec["errors"].append(f"{fn.__name__}{args}: {e!r}"[:400])
        torch.cuda.empty_cache()
        print(f"{fn.__name__}{args} done at {time.time() - t_start:.0f} s", flush=True)
    rec["wall_s"] = round(time.time() - t_start, 1)
    with open(out_path, "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps({k: v for k, v in rec.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gemm_sweep.json")
