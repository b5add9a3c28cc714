"""The local part of an eager PyTorch MoE layer on one GPU, stage by stage.

The papers that report large MoE speedups (Comet over Megatron, FlashDMoE, the MoE-Hub
seed) compare against eager PyTorch dispatchers: a per-expert Python loop (Hugging Face
``MixtralSparseMoeBlock``) or a permute / grouped-GEMM / unpermute pipeline with a host
sync on the split sizes (Megatron-Core's all-to-all dispatcher). This times what such a
layer does on one GPU -- everything but the all-to-all itself -- so the co-simulation's
eager baselines can be calibrated on components measured on the target GPU:

* ``hf_loop``: router GEMM + softmax + top-k, one-hot mask, then for every expert
  ``torch.where`` on its mask, gather, SwiGLU MLP (3 GEMMs), weight, ``index_add_``;
  experts with no tokens are skipped after a ``.tolist()`` of the hit experts (a host sync),
  as current ``transformers`` does.
* ``megatron_local``: router; ``bincount`` of expert ids and ``.tolist()`` of the split
  sizes (the host sync before ``all_to_all_single``); ``argsort`` + ``index_select``
  permute; per-expert GEMMs over the contiguous slices (``loop``) or one
  ``torch._grouped_mm`` call (``grouped``); unpermute by ``index_copy_``; the weighted sum
  of the k outputs per token.

Each stage is timed on the host with ``torch.cuda.synchronize()`` around it (the eager
layer's host and GPU time together, as a serving step sees it), median of REPS runs.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

CASES = (  # model, hidden, expert FFN, experts on this GPU, top-k, tokens on this GPU
    [("mixtral-8x7b", 4096, 14336, 8, 2, t) for t in (16, 128, 1024, 4096)]
    + [("deepseek-v3-ep8", 7168, 2048, 32, 8, t) for t in (16, 128, 1024, 4096)]
    + [("deepseek-v3-ep32", 7168, 2048, 8, 8, t) for t in (16, 128, 1024)]
)
REPS, WARM = 10, 2
DT = torch.bfloat16


def sync_time(fn) -> tuple[float, object]:
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e6, out


class Experts:
    def __init__(self, e, h, i):
        self.w1 = torch.randn(e, h, i, device="cuda", dtype=DT) * 0.02
        self.w3 = torch.randn(e, h, i, device="cuda", dtype=DT) * 0.02
        self.w2 = torch.randn(e, i, h, device="cuda", dtype=DT) * 0.02
        self.wg = torch.randn(h, e, device="cuda", dtype=DT) * 0.02
        # the grouped kernel wants column-major B: (E, N, K) transposed
        self.w13_g = torch.cat([self.w1, self.w3], dim=2).transpose(1, 2).contiguous().transpose(1, 2)
        self.w2_g = self.w2.transpose(1, 2).contiguous().transpose(1, 2)

    def mlp(self, e, x):
        return (F.silu(x @ self.w1[e]) * (x @ self.w3[e])) @ self.w2[e]


def router(ex, x, k):
    logits = x @ ex.wg
    probs = F.softmax(logits, dim=-1, dtype=torch.float)
    w, sel = torch.topk(probs, k, dim=-1)
    w = (w / w.sum(dim=-1, keepdim=True)).to(DT)
    return w, sel


def hf_loop(ex, x, k, n_exp):
    w, sel = router(ex, x, k)
    out = torch.zeros_like(x)
    mask = F.one_hot(sel, num_classes=n_exp).permute(2, 1, 0)
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().flatten().tolist()
    for e in hit:
        idx, top_x = torch.where(mask[e])
        cur = x[top_x]
        y = ex.mlp(e, cur) * w[top_x, idx, None]
        out.index_add_(0, top_x, y)
    return out


def permute(x, flat, k):
    """Rows grouped by expert: the sort of the (token, slot) expert ids and the gather."""
    order = torch.argsort(flat, stable=True)
    return order, x.index_select(0, order // k)


def megatron_local(ex, x, k, n_exp, grouped: bool, stages: dict):
    t_all = time.perf_counter()

    def stage(name, fn):
        us, out = sync_time(fn)
        stages.setdefault(name, []).append(us)
        return out

    w, sel = stage("router", lambda: router(ex, x, k))
    flat = sel.flatten()
    splits = stage("count_and_sync", lambda: torch.bincount(flat, minlength=n_exp).tolist())
    order, xp = stage("permute", lambda: permute(x, flat, k))

    def gemms():
        if grouped:
            offs = torch.tensor(splits, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
            h = torch._grouped_mm(xp, ex.w13_g, offs=offs)
            i = h.shape[1] // 2
            a = F.silu(h[:, :i]) * h[:, i:]
            return torch._grouped_mm(a.contiguous(), ex.w2_g, offs=offs)
        outs, start = [], 0
        for e, n in enumerate(splits):
            if n:
                outs.append(ex.mlp(e, xp[start:start + n]))
            start += n
        return torch.cat(outs)
    y = stage("gemms", gemms)

    def unpermute():
        back = torch.empty_like(y)
        back.index_copy_(0, order, y)
        return (back.view(-1, k, y.shape[1]) * w.unsqueeze(-1)).sum(dim=1)
    stage("unpermute_reduce", unpermute)
    stages.setdefault("total", []).append((time.perf_counter() - t_all) * 1e6)


def run_case(model, h, i, n_exp, k, t) -> dict:
    ex = Experts(n_exp, h, i)
    x = torch.randn(t, h, device="cuda", dtype=DT)
    res = {"model": model, "hidden": h, "ffn": i, "experts": n_exp, "topk": k, "tokens": t}
    for _ in range(WARM):
        hf_loop(ex, x, k, n_exp)
    res["hf_loop_us"] = round(statistics.median(sync_time(lambda: hf_loop(ex, x, k, n_exp))[0]
                                                for _ in range(REPS)), 1)
    for grouped in (False, True):
        key = "megatron_grouped" if grouped else "megatron_loop"
        stages: dict = {}
        try:
            for r in range(WARM + REPS):
                megatron_local(ex, x, k, n_exp, grouped, stages if r >= WARM else {})
        except Exception as e:                          # noqa: BLE001 -- record, go on
            res[key] = {"error": repr(e)[:300]}
            continue
        res[key] = {s: round(statistics.median(v), 1) for s, v in stages.items()}
    del ex
    torch.cuda.empty_cache()
    return res


def main(out_path: str) -> None:
    t0 = time.time()
    rec = {"what": "eager MoE layer stages on one GPU (scripts/gpu/eager_moe.py)",
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "reps": REPS, "cases": [], "errors": []}
    for case in CASES:
        try:
            rec["cases"].append(run_case(*case))
        except Exception as e:                          # noqa: BLE001 -- record, go on
            rec["errors"].append(f"{case}: {e!r}"[:400])
        print(f"{case} done at {time.time() - t0:.0f} s", flush=True)
    rec["wall_s"] = round(time.time() - t0, 1)
    with open(out_path, "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "eager_moe.json")
