#!/usr/bin/env python3
"""Relative error of one HSTU layer (forward and backward, `hstu layer`) against float64.

For each sequence length N: one sequence of N tokens (N/32 of them targets), d = --d, --heads heads
of --dim, random inputs and weights; `hstu layer --device DEVICE` runs it, and two float64
references in PyTorch (autograd) give the errors beside it:
  - fp64:        every operation in float64 (the truth);
  - bf16 model:  float64 that rounds only the forward's activations to bf16 where a bf16 layer
                 stores them (z, the SiLU outputs, P = SiLU(alpha q k) / N, O, u * LN(O)); its
                 gradients pass the roundings unchanged;
  - bf16 model+io: the same from the layer's input x and output gradient rounded to bf16 as well
                 (`hstu layer` converts both on the GPU).
With --meta PEER (a checkout of Meta's generative-recommenders, with shared/baselines'
meta_hstu_layer_bench.py beside it), Meta's fused Triton layer (triton_hstu_preprocess_and_attention
and triton_hstu_compute_output, bf16) runs on the same inputs in the same process: its math is
SiLU on u only and no output bias, so the run uses --silu u and an output bias of zero for all.
Meta's attention configs are fixed (the ones its autotuner chose on an H100, as
meta_hstu_verify.py fixes them) instead of autotuned.
The error of a tensor is ||ours - fp64||_2 / ||fp64||_2. Prints a table per N and writes JSON:
{"commit", "gpu", "date", "command", "rows": [{"seqlen", "attention", "tensor", "ours", "model",
"model_io", "meta"}]}.

    python3 scripts/layer_precision.py --hstu build/hstu --seqlens 256 1024 2000 8192 --json precision.json

--check R exits 1 when, at some N, the output weight's gradient is more than R times the bf16
model's error, or (with --meta) some tensor of ours is further from float64 than Meta's.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

LN_EPS = 1e-6
PARAMS = ["ln_in.weight", "ln_in.bias", "uvqk.weight", "uvqk.bias", "ln_attn.weight", "ln_attn.bias",
          "out.weight", "out.bias"]


class RoundBf16(torch.autograd.Function):
    """Rounds to bf16 in the forward; the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def mask(n, targets, device):
    """Causal over the history; each target sees the history and itself."""
    pos = torch.arange(n, device=device)
    sp = torch.clamp(pos, max=n - targets)
    return ((sp.unsqueeze(1) > sp.unsqueeze(0)) | torch.eye(n, dtype=torch.bool, device=device)).double()


def forward(x, p, n, targets, heads, dim, rounding, silu):
    r = RoundBf16.apply if rounding else (lambda t: t)
    d = x.shape[1]
    xn = F.layer_norm(x, (d,), p["ln_in.weight"], p["ln_in.bias"], LN_EPS)
    z = r(xn @ p["uvqk.weight"].t() + p["uvqk.bias"])
    hd = heads * dim
    a = r(F.silu(z) if silu == "all" else torch.cat([F.silu(z[:, :hd]), z[:, hd:]], dim=1))
    u, v, q, k = a[:, :hd], a[:, hd:2 * hd], a[:, 2 * hd:3 * hd], a[:, 3 * hd:]
    v, q, k = (t.reshape(n, heads, dim) for t in (v, q, k))
    s = torch.einsum("ihe,jhe->hij", q, k) / math.sqrt(dim)
    att = r(F.silu(s) * mask(n, targets, x.device).unsqueeze(0) / n)
    o = r(torch.einsum("hij,jhe->ihe", att, v).reshape(n, hd))
    on = F.layer_norm(o, (hd,), p["ln_attn.weight"], p["ln_attn.bias"], LN_EPS)
    y = r(u * on)
    return y @ p["out.weight"].t() + p["out.bias"] + x


def gradients(x, params, grad_out, n, targets, heads, dim, rounding, silu, device):
    xr = x.to(device=device, dtype=torch.float64).requires_grad_(True)
    pr = {k: v.to(device=device, dtype=torch.float64).requires_grad_(True) for k, v in params.items()}
    out = forward(xr, pr, n, targets, heads, dim, rounding, silu)
    (out * grad_out.to(device=device, dtype=torch.float64)).sum().backward()
    res = {"out": out.detach(), "grad.x": xr.grad.detach()}
    res.update({"grad." + k: v.grad.detach() for k, v in pr.items()})
    return res


def rel(a, ref):
    a, ref = a.double().to(ref.device), ref
    return ((a - ref).norm() / ref.norm()).item()


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


# The configs Meta's autotuner chose on an H100 (shared/baselines/meta_hstu_layer_results.md):
# forward (BLOCK_M, BLOCK_N, warps, stages) by the nearest N at or above, and one backward.
META_FWD = {128: (64, 32, 4, 2), 1024: (128, 32, 8, 4), 2048: (128, 32, 8, 4), 4096: (128, 64, 8, 2),
            8192: (128, 64, 8, 2)}
META_BWD = (32, 64, False, 1, 8, 2)


class Meta:
    def __init__(self, peer_dir):
        sys.path.insert(0, os.path.dirname(os.path.abspath(peer_dir)))
        import meta_hstu_layer_bench as bm
        self.peer = bm.import_peer(peer_dir)
        tha = self.peer.tha
        self.fwd_all, self.bwd_all = list(tha._hstu_attn_fwd.configs), list(tha._hstu_attn_bwd.configs)

    def fix_configs(self, n):
        key = min((k for k in META_FWD if k >= n), default=max(META_FWD))
        bm_, bn, w, st = META_FWD[key]
        tha = self.peer.tha
        tha._hstu_attn_fwd.configs = [c for c in self.fwd_all if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"],
                                                                  c.num_warps, c.num_stages) == (bm_, bn, w, st)][:1]
        tha._hstu_attn_bwd.configs = [c for c in self.bwd_all if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"],
                                                                  c.kwargs["SEQUENCE_PARALLEL"], c.kwargs["UNROLL"],
                                                                  c.num_warps, c.num_stages) == META_BWD][:1]
        assert tha._hstu_attn_fwd.configs and tha._hstu_attn_bwd.configs, "Meta's configs were not found"

    def run(self, x, params, grad_out, n, targets, heads, dim):
        self.fix_configs(n)
        dev, dt = "cuda", torch.bfloat16
        leaf = lambda t: t.detach().to(device=dev, dtype=dt).clone().requires_grad_(True)  # noqa: E731
        w = {"ln_in.weight": leaf(params["ln_in.weight"]), "ln_in.bias": leaf(params["ln_in.bias"]),
             "uvqk.weight": leaf(params["uvqk.weight"].t()), "uvqk.bias": leaf(params["uvqk.bias"]),
             "ln_attn.weight": leaf(params["ln_attn.weight"]), "ln_attn.bias": leaf(params["ln_attn.bias"]),
             "out.weight": leaf(params["out.weight"].t())}
        xb = leaf(x)
        offsets = torch.tensor([0, n], device=dev, dtype=torch.int64)
        u, attn = self.peer.preprocess_and_attention(
            x=xb, norm_weight=w["ln_in.weight"], norm_bias=w["ln_in.bias"], norm_eps=LN_EPS, num_heads=heads,
            attn_dim=dim, hidden_dim=dim, uvqk_weight=w["uvqk.weight"], uvqk_bias=w["uvqk.bias"], max_seq_len=n,
            seq_offsets=offsets, alpha=1.0 / math.sqrt(dim), invalid_attn_mask_type="lower_triangular",
            num_targets=torch.tensor([targets], device=dev, dtype=torch.int64))
        out = self.peer.compute_output(
            attn=attn.reshape(-1, heads * dim), u=u, x=xb, norm_weight=w["ln_attn.weight"],
            norm_bias=w["ln_attn.bias"], output_weight=w["out.weight"], eps=LN_EPS, dropout_ratio=0.0, training=True)
        out.backward(grad_out.to(device=dev, dtype=dt))
        res = {"out": out.detach(), "grad.x": xb.grad}
        for name, t in w.items():
            res["grad." + name] = t.grad.t() if name in ("uvqk.weight", "out.weight") else t.grad
        return res


def run(hstu, device, n, d, heads, dim, workdir, torch_device, env, silu, meta):
    g = torch.Generator().manual_seed(1000 + n)
    targets = max(1, n // 32)
    nproj = heads * 4 * dim
    x = torch.randn(n, d, generator=g)
    params = {
        "ln_in.weight": 1 + 0.1 * torch.randn(d, generator=g), "ln_in.bias": 0.1 * torch.randn(d, generator=g),
        "uvqk.weight": torch.randn(nproj, d, generator=g) / math.sqrt(d),
        "uvqk.bias": 0.1 * torch.randn(nproj, generator=g),
        "ln_attn.weight": 1 + 0.1 * torch.randn(heads * dim, generator=g),
        "ln_attn.bias": 0.1 * torch.randn(heads * dim, generator=g),
        "out.weight": torch.randn(d, heads * dim, generator=g) / math.sqrt(heads * dim),
        "out.bias": 0.1 * torch.randn(d, generator=g),
    }
    if meta:  # Meta's layer has no output bias
        params["out.bias"] = torch.zeros(d)
    grad_out = torch.randn(n, d, generator=g)
    tensors = {"x": x, "seq_offsets": torch.tensor([0, n], dtype=torch.int64),
               "num_targets": torch.tensor([targets], dtype=torch.int64), "grad_out": grad_out, **params}
    md = {"num_heads": str(heads), "dqk": str(dim), "dv": str(dim), "max_seq_len": str(n), "silu": silu}
    src, dst = os.path.join(workdir, f"in{n}.safetensors"), os.path.join(workdir, f"out{n}.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, src, metadata=md)
    proc = subprocess.run([hstu, "layer", "--in", src, "--out", dst, "--device", device], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"layer_precision: hstu layer failed at N = {n}: {proc.stderr.strip()}")
    ours = load_file(dst)
    truth = gradients(x, params, grad_out, n, targets, heads, dim, False, silu, torch_device)
    model = gradients(x, params, grad_out, n, targets, heads, dim, True, silu, torch_device)
    model_io = gradients(bf16(x), params, bf16(grad_out), n, targets, heads, dim, True, silu, torch_device)
    theirs = meta.run(x, params, grad_out, n, targets, heads, dim) if meta else {}
    return [{"tensor": name, "ours": rel(ours[name], ref), "model": rel(model[name], ref),
             "model_io": rel(model_io[name], ref),
             "meta": rel(theirs[name], ref) if name in theirs else None} for name, ref in truth.items()
            if not (meta and name == "grad.out.bias")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hstu", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seqlens", type=int, nargs="+", default=[256, 512, 1024, 2000, 4096, 8192])
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--attention", nargs="+", default=["auto"],
                    help="HSTU_ATTENTION settings to run (auto, recompute-dq, mma, simple)")
    ap.add_argument("--silu", choices=["all", "u"], default="all")
    ap.add_argument("--meta", default="", help="Meta's generative-recommenders checkout, to run its layer beside")
    ap.add_argument("--check", type=float, default=0.0, metavar="R",
                    help="fail when grad.out.weight's error exceeds R x the bf16 model's, or ours exceeds Meta's")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.meta and a.silu != "u":
        sys.exit("layer_precision: Meta's fused layer applies SiLU to u only; pass --silu u with --meta")
    meta = Meta(a.meta) if a.meta else None
    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for n in a.seqlens:
            for kernel in a.attention:
                env = dict(os.environ, HSTU_ATTENTION=kernel)
                for r in run(a.hstu, a.device, n, a.d, a.heads, a.dim, workdir, torch_device, env, a.silu, meta):
                    rows.append({"seqlen": n, "attention": kernel, **r})
                    theirs = f"  meta {r['meta']:.3e}" if r["meta"] is not None else ""
                    print(f"N {n:5d} {kernel:12s} {r['tensor']:22s} ours {r['ours']:.3e}  bf16 model "
                          f"{r['model']:.3e}  model+io {r['model_io']:.3e}{theirs}  "
                          f"ours/model {r['ours'] / max(r['model'], 1e-30):.2f}", flush=True)
    if a.check > 0:
        bad = [f"N {r['seqlen']} {r['attention']} grad.out.weight: {r['ours'] / r['model']:.2f} x the bf16 model"
               for r in rows if r["tensor"] == "grad.out.weight" and r["ours"] > a.check * r["model"]]
        bad += [f"N {r['seqlen']} {r['attention']} {r['tensor']}: {r['ours']:.3e} against Meta's {r['meta']:.3e}"
                for r in rows if r["meta"] is not None and r["ours"] > r["meta"]]
        for b in bad:
            print(f"layer_precision: FAIL {b}")
        print(f"layer_precision: {'FAIL' if bad else 'ok'} (--check {a.check})")
    if a.json:
        commit = subprocess.run([a.hstu, "--version"], capture_output=True, text=True).stdout.split()[-1]
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        with open(a.json, "w") as f:
            json.dump({"commit": commit, "gpu": gpu, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                       "command": " ".join(sys.argv), "rows": rows}, f, indent=2)
            f.write("\n")
    if a.check > 0 and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
