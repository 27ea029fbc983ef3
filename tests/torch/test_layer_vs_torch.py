#!/usr/bin/env python3
"""Compare `hstu layer` (one HSTU layer, forward and backward) against PyTorch.

Usage:
    python3 tests/torch/test_layer_vs_torch.py --hstu build/hstu [--keep DIR]
    python3 tests/torch/test_layer_vs_torch.py --selftest      # no binary needed

For every case the script writes random inputs to a safetensors file, runs
`hstu layer --in IN --out OUT --device cpu`, and compares every output tensor
with a float32 PyTorch autograd reference using the relative error
||ours - ref||_2 / ||ref||_2 <= 1e-5.  The last line is `N passed, M failed`
(counted per case); the exit code is 0 iff every case passed.
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

_missing = None
for _mod in ("numpy", "torch", "safetensors"):
    try:
        __import__(_mod)
    except ImportError:
        _missing = _mod
        break
if _missing is not None:
    print(f"error: Python module '{_missing}' is missing; "
          f"scripts/setup.sh --test installs it (then activate the project venv)")
    sys.exit(1)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

LN_EPS = 1e-6
PARAM_NAMES = [
    "ln_in.weight", "ln_in.bias",
    "uvqk.weight", "uvqk.bias",
    "ln_attn.weight", "ln_attn.bias",
    "out.weight", "out.bias",
]

# --------------------------------------------------------------------------
# Philox4x32-10 (Random123), vectorised over numpy uint64 arrays.
# --------------------------------------------------------------------------
_U32 = np.uint64(0xFFFFFFFF)
_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_S32 = np.uint64(32)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """All arguments: uint64 arrays (or scalars) holding 32-bit values.
    Returns four uint64 arrays holding the 32-bit output words."""
    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) & _U32 for v in (c0, c1, c2, c3))
    k0 = np.asarray(k0, dtype=np.uint64) & _U32
    k1 = np.asarray(k1, dtype=np.uint64) & _U32
    for rnd in range(10):
        p0 = _M0 * c0  # < 2^64, exact in uint64
        p1 = _M1 * c2
        hi0, lo0 = p0 >> _S32, p0 & _U32
        hi1, lo1 = p1 >> _S32, p1 & _U32
        c0, c1, c2, c3 = (hi1 ^ c1 ^ k0) & _U32, lo1, (hi0 ^ c3 ^ k1) & _U32, lo0
        if rnd < 9:
            k0 = (k0 + _W0) & _U32
            k1 = (k1 + _W1) & _U32
    return c0, c1, c2, c3


def check_philox_known_answers():
    kats = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF),
         (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ]
    for ctr, key, want in kats:
        got = tuple(int(w) for w in philox4x32_10(*ctr, *key))
        if got != want:
            raise SystemExit(
                "FATAL: Philox4x32-10 known-answer test failed: counter %s key %s -> %s, want %s"
                % ([hex(v) for v in ctr], [hex(v) for v in key],
                   [hex(v) for v in got], [hex(v) for v in want]))
    print("philox4x32-10 known answers: ok")


def dropout_keep_mask(rows, cols, p, seed, step, layer_index):
    """Boolean numpy array [rows, cols]: True where the element is kept."""
    # Element e takes the 16-bit half e % 2 (low first) of word (e / 2) % 4 of the Philox block
    # with counter e / 8, and is kept when that draw is at least ceil(p 2^16).
    n = rows * cols
    e = np.arange(n, dtype=np.uint64)
    g = e >> np.uint64(3)
    word = ((e >> np.uint64(1)) & np.uint64(3)).astype(np.int64)
    half = (e & np.uint64(1)) * np.uint64(16)
    seed = int(seed)
    words = philox4x32_10(
        g & _U32, g >> _S32,
        np.full(n, layer_index & 0xFFFFFFFF, dtype=np.uint64),
        np.full(n, step & 0xFFFFFFFF, dtype=np.uint64),
        np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32))
    r = np.stack(words, axis=0)[word, np.arange(n)]
    draw = (r >> half) & np.uint64(0xFFFF)
    return (draw >= np.uint64(math.ceil(float(np.float32(p)) * 65536.0))).reshape(rows, cols)


# --------------------------------------------------------------------------
# Attention mask, written plainly from the definition.
# --------------------------------------------------------------------------
def attn_mask(n, nt, c, w):
    t0 = n - nt

    def s(pos):
        return max(0, pos - c + 1) if c > 0 else pos

    s_t0 = s(t0)

    def sp(pos):
        return min(s(pos), s_t0)

    m = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            if i == j:
                keep = True
            elif sp(i) > sp(j) and (w == 0 or sp(i) - sp(j) <= w):
                keep = True
            elif c > 0 and sp(i) == 0 and sp(j) < s_t0:
                keep = True
            else:
                keep = False
            m[i, j] = 1.0 if keep else 0.0
    return m


# --------------------------------------------------------------------------
# Meta's relative attention bias, as generative-recommenders computes it
# (RelativeBucketedTimeAndPositionBasedBias.forward), for one sequence of n tokens:
# the position weights read through its pad-repeat-reshape trick with N = the
# model's max_seq_len, the time weights through its log buckets. Meta extends the
# padded timestamps with the last padded one; a jagged sequence extends with its
# own last token's time (the same thing at full length).
# --------------------------------------------------------------------------
def meta_relative_bias(pos_w, ts_w, ts, N, n, num_buckets):
    bias = 0.0
    if pos_w is not None:
        t = F.pad(pos_w[: 2 * N - 1], [0, N]).repeat(N)
        t = t[..., :-N].reshape(1, N, 3 * N - 2)
        r = (2 * N - 1) // 2
        bias = bias + t[:, :, r:-r][0, :n, :n]
    if ts_w is not None:
        ext = torch.cat([ts, ts[n - 1:n]])
        diff = ext[1:].unsqueeze(1) - ext[:-1].unsqueeze(0)
        # torch.log of Meta's int64 tensor computes in the default dtype, float32.
        buckets = torch.clamp(
            (torch.log(torch.abs(diff).clamp(min=1).to(torch.float32)) / 0.301).long(),
            min=0, max=num_buckets).detach()
        bias = bias + torch.index_select(ts_w, dim=0, index=buckets.view(-1)).view(n, n)
    return bias


# --------------------------------------------------------------------------
# Reference forward (differentiable; dtype follows the inputs).
# --------------------------------------------------------------------------
def reference_forward(x, params, cfg, offsets, num_targets, keep_mask):
    H, dqk, dv, L = cfg["num_heads"], cfg["dqk"], cfg["dv"], cfg["max_seq_len"]
    alpha, c, w = cfg["alpha"], cfg["num_contextual"], cfg["max_attn_len"]
    p, silu_mode = cfg["dropout"], cfg["silu"]
    d = x.shape[1]
    T = x.shape[0]

    xn = F.layer_norm(x, (d,), params["ln_in.weight"], params["ln_in.bias"], LN_EPS)
    z = xn @ params["uvqk.weight"].t() + params["uvqk.bias"]
    if silu_mode == "all":
        a = F.silu(z)
    elif silu_mode == "u":
        a = torch.cat([F.silu(z[:, :H * dv]), z[:, H * dv:]], dim=1)
    else:
        raise ValueError(silu_mode)
    o0 = 0
    u = a[:, o0:o0 + H * dv]; o0 += H * dv
    v = a[:, o0:o0 + H * dv].reshape(T, H, dv); o0 += H * dv
    q = a[:, o0:o0 + H * dqk].reshape(T, H, dqk); o0 += H * dqk
    k = a[:, o0:o0 + H * dqk].reshape(T, H, dqk); o0 += H * dqk
    assert o0 == a.shape[1]

    pieces = []
    for b in range(len(offsets) - 1):
        lo, hi = offsets[b], offsets[b + 1]
        n = hi - lo
        if n == 0:
            continue
        nt = num_targets[b] if num_targets is not None else 0
        m = attn_mask(n, nt, c, w).to(x.dtype)
        qb, kb, vb = q[lo:hi], k[lo:hi], v[lo:hi]
        s = alpha * torch.einsum("ihe,jhe->hij", qb, kb)
        pos_w, ts_w = params.get("rel_attn_bias.pos_w"), params.get("rel_attn_bias.ts_w")
        if pos_w is not None or ts_w is not None:
            ts = cfg["timestamps"][lo:hi] if ts_w is not None else None
            s = s + meta_relative_bias(pos_w, ts_w, ts, L, n, cfg["time_buckets"]).unsqueeze(0)
        att = F.silu(s) * m.unsqueeze(0) / L
        ob = torch.einsum("hij,jhe->ihe", att, vb)
        pieces.append(ob.reshape(n, H * dv))
    if pieces:
        O = torch.cat(pieces, dim=0)
    else:
        O = x.new_zeros(0, H * dv)
    assert O.shape[0] == T

    On = F.layer_norm(O, (H * dv,), params["ln_attn.weight"], params["ln_attn.bias"], LN_EPS)
    y = u * On
    if p > 0:
        y = y * keep_mask.to(x.dtype) / (1.0 - p)
    return y @ params["out.weight"].t() + params["out.bias"] + x


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------
CASES = [
    dict(name="plain", seed=101, d=16, H=2, dqk=4, dv=4, L=16,
         lengths=[3, 7, 5], grad=True),
    dict(name="empty_and_len1", seed=202, d=16, H=1, dqk=8, dv=8, L=7,
         lengths=[0, 5, 1, 0, 7], grad=True),
    dict(name="targets", seed=303, d=24, H=2, dqk=4, dv=4, L=16,
         lengths=[6, 4, 8], num_targets=[2, 0, 3], grad=True),
    dict(name="contextual_targets", seed=404, d=16, H=2, dqk=4, dv=4, L=12,
         lengths=[5, 7, 3, 6], num_targets=[1, 2, 0, 1], num_contextual=2, grad=True),
    dict(name="window_ctx_targets", seed=505, d=16, H=2, dqk=4, dv=4, L=12,
         lengths=[9, 6, 4], num_targets=[2, 1, 0], num_contextual=2, max_attn_len=2,
         grad=True),
    dict(name="silu_u_alpha", seed=606, d=32, H=2, dqk=8, dv=4, L=10,
         lengths=[4, 6, 2], silu="u", alpha=0.37, grad=True),
    dict(name="dropout", seed=707, d=16, H=1, dqk=4, dv=5, L=16,
         lengths=[5, 2, 6], num_targets=[1, 0, 2], dropout=0.3,
         rng_seed=0x1234ABCD5678EF01, step=7, layer_index=3, grad=True),
    dict(name="forward_only", seed=808, d=16, H=2, dqk=6, dv=4, L=16,
         lengths=[4, 0, 6], num_targets=[1, 0, 2], num_contextual=1, grad=False),
    dict(name="relative_bias", seed=909, d=16, H=2, dqk=4, dv=4, L=12,
         lengths=[5, 7, 3, 12], num_targets=[1, 2, 0, 1], num_contextual=2,
         position_bias=True, time_bias=True, time_buckets=40, grad=True),
    dict(name="position_bias_only", seed=910, d=16, H=1, dqk=8, dv=8, L=9,
         lengths=[9, 1, 4], position_bias=True, grad=True),
]


def case_cfg(case):
    dqk = case["dqk"]
    return dict(
        num_heads=case["H"], dqk=dqk, dv=case["dv"], max_seq_len=case["L"],
        alpha=case.get("alpha", 1.0 / math.sqrt(dqk)),
        num_contextual=case.get("num_contextual", 0),
        max_attn_len=case.get("max_attn_len", 0),
        dropout=case.get("dropout", 0.0),
        silu=case.get("silu", "all"),
        seed=case.get("rng_seed", 0),
        step=case.get("step", 0),
        layer_index=case.get("layer_index", 0),
        time_buckets=case.get("time_buckets", 128),
        timestamps=case_timestamps(case) if case.get("time_bias") else None,
    )


def case_timestamps(case):
    """Every token's time: increasing within a sequence, gaps from a second to
    about a month, so the buckets run from 0 past the clamp."""
    g = torch.Generator().manual_seed(case["seed"] + 1)
    out = []
    for n in case["lengths"]:
        gaps = torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * 15.0).long()
        out.append(1_600_000_000 + torch.cumsum(gaps, 0))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


def case_metadata(case):
    """Required keys always; optional keys only when the case sets them, so
    the binary's defaults are exercised too."""
    md = {
        "num_heads": str(case["H"]), "dqk": str(case["dqk"]),
        "dv": str(case["dv"]), "max_seq_len": str(case["L"]),
    }
    if "alpha" in case:
        md["alpha"] = repr(float(case["alpha"]))
    for key, mkey in (("num_contextual", "num_contextual"), ("max_attn_len", "max_attn_len"),
                      ("rng_seed", "seed"), ("step", "step"), ("layer_index", "layer_index")):
        if key in case:
            md[mkey] = str(int(case[key]))
    if "dropout" in case:
        md["dropout"] = repr(float(case["dropout"]))
    if "silu" in case:
        md["silu"] = case["silu"]
    for key in ("position_bias", "time_bias"):
        if key in case:
            md[key] = "true" if case[key] else "false"
    if "time_buckets" in case:
        md["time_buckets"] = str(int(case["time_buckets"]))
    return md


def make_inputs(case, dtype=torch.float32):
    torch.manual_seed(case["seed"])
    d, H, dqk, dv = case["d"], case["H"], case["dqk"], case["dv"]
    lengths = case["lengths"]
    T = sum(lengths)
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    nproj = H * (2 * dv + 2 * dqk)

    def w(out_f, in_f):
        return torch.randn(out_f, in_f, dtype=dtype) / math.sqrt(in_f)

    def lnw(n):
        return 1.0 + 0.1 * torch.randn(n, dtype=dtype)

    def bias(n):
        return 0.1 * torch.randn(n, dtype=dtype)

    x = torch.randn(T, d, dtype=dtype)
    params = {
        "ln_in.weight": lnw(d), "ln_in.bias": bias(d),
        "uvqk.weight": w(nproj, d), "uvqk.bias": bias(nproj),
        "ln_attn.weight": lnw(H * dv), "ln_attn.bias": bias(H * dv),
        "out.weight": w(d, H * dv), "out.bias": bias(d),
    }
    # Meta initialises the bias's weights N(0, 0.02); larger here so that they matter.
    if case.get("position_bias"):
        params["rel_attn_bias.pos_w"] = 0.3 * torch.randn(2 * case["L"] - 1, dtype=dtype)
    if case.get("time_bias"):
        params["rel_attn_bias.ts_w"] = 0.3 * torch.randn(case.get("time_buckets", 128) + 1, dtype=dtype)
    grad_out = torch.randn(T, d, dtype=dtype) if case.get("grad") else None
    nt = case.get("num_targets")
    if nt is not None:
        assert len(nt) == len(lengths)
        assert all(0 <= t <= n for t, n in zip(nt, lengths))
    return x, params, offsets, nt, grad_out


def compute_reference(case, x, params, offsets, num_targets, grad_out):
    cfg = case_cfg(case)
    keep = None
    if cfg["dropout"] > 0:
        keep = torch.from_numpy(dropout_keep_mask(
            x.shape[0], cfg["num_heads"] * cfg["dv"], cfg["dropout"],
            cfg["seed"], cfg["step"], cfg["layer_index"]))
    xr = x.clone().requires_grad_(grad_out is not None)
    pr = {k: v.clone().requires_grad_(grad_out is not None) for k, v in params.items()}
    out = reference_forward(xr, pr, cfg, offsets, num_targets, keep)
    ref = {"out": out.detach()}
    if grad_out is not None:
        (out * grad_out).sum().backward()
        ref["grad.x"] = xr.grad.detach()
        for name in pr:
            ref["grad." + name] = pr[name].grad.detach()
    return ref, keep


def rel_err(ours, ref):
    ours = ours.double()
    ref = ref.double()
    rn = ref.norm().item()
    if rn == 0.0:
        return ours.norm().item(), True
    return (ours - ref).norm().item() / rn, False


# --------------------------------------------------------------------------
# Running against the binary
# --------------------------------------------------------------------------
def run_case(case, hstu, workdir, device, tol):
    name = case["name"]
    x, params, offsets, nt, grad_out = make_inputs(case)
    ref, _ = compute_reference(case, x, params, offsets, nt, grad_out)

    tensors = {"x": x.contiguous(),
               "seq_offsets": torch.tensor(offsets, dtype=torch.int64)}
    if nt is not None:
        tensors["num_targets"] = torch.tensor(nt, dtype=torch.int64)
    if case.get("time_bias"):
        tensors["timestamps"] = case_cfg(case)["timestamps"].contiguous()
    if grad_out is not None:
        tensors["grad_out"] = grad_out.contiguous()
    for k, v in params.items():
        tensors[k] = v.contiguous()
    in_path = os.path.join(workdir, f"{name}.in.safetensors")
    out_path = os.path.join(workdir, f"{name}.out.safetensors")
    if os.path.exists(out_path):
        os.remove(out_path)
    save_file(tensors, in_path, metadata=case_metadata(case))

    cmd = [hstu, "layer", "--in", in_path, "--out", out_path, "--device", device]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"[{name}] FAIL: could not run {' '.join(cmd)}: {exc}")
        return False
    if proc.returncode != 0:
        print(f"[{name}] FAIL: hstu exited with status {proc.returncode}")
        if proc.stderr.strip():
            print(f"[{name}] stderr:\n{proc.stderr.rstrip()}")
        return False
    try:
        got = load_file(out_path)
    except Exception as exc:  # noqa: BLE001
        print(f"[{name}] FAIL: cannot read {out_path}: {exc}")
        return False

    ok = True
    for tname, rt in ref.items():
        if tname not in got:
            print(f"[{name}] {tname:<22} FAIL: missing from output")
            ok = False
            continue
        gt = got[tname]
        if gt.dtype != torch.float32:
            print(f"[{name}] {tname:<22} FAIL: dtype {gt.dtype}, want float32")
            ok = False
            continue
        if tuple(gt.shape) != tuple(rt.shape):
            print(f"[{name}] {tname:<22} FAIL: shape {tuple(gt.shape)}, want {tuple(rt.shape)}")
            ok = False
            continue
        err, ref_zero = rel_err(gt, rt)
        if ref_zero:
            good = math.isfinite(err) and err <= 1e-12
            print(f"[{name}] {tname:<22} ref is zero, ||ours|| = {err:.3e}  {'ok' if good else 'FAIL'}")
        else:
            good = math.isfinite(err) and err <= tol
            print(f"[{name}] {tname:<22} rel_err = {err:.3e}  {'ok' if good else 'FAIL'}")
        ok = ok and good
    if grad_out is None:
        extra = sorted(k for k in got if k.startswith("grad."))
        if extra:
            print(f"[{name}] FAIL: forward-only run wrote gradient tensors: {', '.join(extra)}")
            ok = False
        else:
            print(f"[{name}] no grad.* tensors in output: ok")
    print(f"[{name}] {'PASS' if ok else 'FAIL'}")
    return ok


# --------------------------------------------------------------------------
# Self test (no binary)
# --------------------------------------------------------------------------
def selftest():
    ok = True

    # Hand-derived masks (n=6, 2 targets, 2 contextual tokens).
    want_ctx = torch.tensor([
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 0, 1]], dtype=torch.float64)
    want_ctx_w1 = torch.tensor([
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 1, 0, 1]], dtype=torch.float64)
    want_tgt = torch.tensor([
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 1, 0, 1]], dtype=torch.float64)
    checks = [
        ("causal n=5", attn_mask(5, 0, 0, 0), torch.tril(torch.ones(5, 5, dtype=torch.float64))),
        ("targets n=5 nt=2", attn_mask(5, 2, 0, 0), want_tgt),
        ("ctx c=2 n=6 nt=2", attn_mask(6, 2, 2, 0), want_ctx),
        ("ctx c=2 n=6 nt=2 w=1", attn_mask(6, 2, 2, 1), want_ctx_w1),
        ("window w=2 n=5", attn_mask(5, 0, 0, 2),
         torch.tril(torch.ones(5, 5, dtype=torch.float64)) -
         torch.tril(torch.ones(5, 5, dtype=torch.float64), diagonal=-3)),
        ("n=1", attn_mask(1, 1, 2, 1), torch.ones(1, 1, dtype=torch.float64)),
    ]
    for label, got, want in checks:
        good = torch.equal(got, want)
        print(f"selftest mask {label:<24} {'ok' if good else 'FAIL'}")
        if not good:
            print(got)
        ok = ok and good

    # Dropout mask: rate and dependence on step / layer / seed.
    keep = dropout_keep_mask(256, 64, 0.3, 0x1234ABCD5678EF01, 7, 3)
    rate = 1.0 - keep.mean()
    good = abs(rate - 0.3) < 0.02
    print(f"selftest dropout rate {rate:.4f} (want ~0.3) {'ok' if good else 'FAIL'}")
    ok = ok and good
    for label, other in (("step", dropout_keep_mask(256, 64, 0.3, 0x1234ABCD5678EF01, 8, 3)),
                         ("layer", dropout_keep_mask(256, 64, 0.3, 0x1234ABCD5678EF01, 7, 4)),
                         ("seed hi", dropout_keep_mask(256, 64, 0.3, 0x1234ABCE5678EF01, 7, 3))):
        good = not np.array_equal(keep, other)
        print(f"selftest dropout mask changes with {label:<8} {'ok' if good else 'FAIL'}")
        ok = ok and good
    # Elements 0..7 of the mask come from one Philox call with counter (0,0,layer,step):
    # 16 bits each, the low half of a word first, kept at or above ceil(p 2^16).
    words = philox4x32_10(0, 0, 3, 7, 0x5678EF01, 0x1234ABCD)
    threshold = math.ceil(float(np.float32(0.3)) * 65536.0)
    want = [((int(words[e // 2]) >> (16 * (e % 2))) & 0xFFFF) >= threshold for e in range(8)]
    good = list(keep.reshape(-1)[:8]) == want
    print(f"selftest dropout first group {'ok' if good else 'FAIL'}")
    ok = ok and good

    # Reference runs for every case, outputs finite.
    for case in CASES:
        x, params, offsets, nt, grad_out = make_inputs(case)
        ref, keep = compute_reference(case, x, params, offsets, nt, grad_out)
        finite = all(torch.isfinite(t).all().item() for t in ref.values())
        nonzero = all(t.norm().item() > 0 for t in ref.values())
        extra = ""
        if keep is not None:
            extra = f", dropped {int((~keep).sum())}/{keep.numel()}"
        good = finite and nonzero
        print(f"selftest reference [{case['name']}] {len(ref)} tensors, "
              f"finite={finite} nonzero={nonzero}{extra} {'ok' if good else 'FAIL'}")
        ok = ok and good

    # fp32 reference vs fp64 reference: how much headroom the 1e-5 tolerance has.
    for case in CASES:
        x, params, offsets, nt, grad_out = make_inputs(case)
        r32, _ = compute_reference(case, x, params, offsets, nt, grad_out)
        r64, _ = compute_reference(
            case, x.double(), {k: v.double() for k, v in params.items()}, offsets, nt,
            None if grad_out is None else grad_out.double())
        worst = max(rel_err(r32[k], r64[k])[0] for k in r32)
        # fp32 rounding; the dropout case's 1/(1-p) scaling takes it to about 1.5e-6.
        good = worst <= 3e-6
        print(f"selftest fp32 vs fp64 [{case['name']}] worst rel_err {worst:.2e} "
              f"{'ok' if good else 'FAIL'}")
        ok = ok and good

    # gradcheck in float64 on tiny cases covering every feature.
    tiny_cases = [
        dict(name="tiny_all", seed=9, d=4, H=1, dqk=2, dv=3, L=6, lengths=[3, 0, 4, 1],
             num_targets=[1, 0, 1, 0], num_contextual=1, max_attn_len=2, dropout=0.25,
             rng_seed=12345, step=2, layer_index=1, grad=True),
        dict(name="tiny_silu_u", seed=10, d=5, H=2, dqk=3, dv=2, L=5, lengths=[2, 3],
             silu="u", alpha=0.7, grad=True),
    ]
    for case in tiny_cases:
        x, params, offsets, nt, _ = make_inputs(case, dtype=torch.float64)
        cfg = case_cfg(case)
        keep = None
        if cfg["dropout"] > 0:
            keep = torch.from_numpy(dropout_keep_mask(
                x.shape[0], cfg["num_heads"] * cfg["dv"], cfg["dropout"],
                cfg["seed"], cfg["step"], cfg["layer_index"]))
        inputs = [x.clone().requires_grad_(True)] + \
                 [params[k].clone().requires_grad_(True) for k in PARAM_NAMES]

        def fn(xx, *ps, cfg=cfg, offsets=offsets, nt=nt, keep=keep):
            return reference_forward(xx, dict(zip(PARAM_NAMES, ps)), cfg, offsets, nt, keep)

        try:
            good = torch.autograd.gradcheck(fn, tuple(inputs), eps=1e-6, atol=1e-7, rtol=1e-5)
        except Exception as exc:  # noqa: BLE001
            print(exc)
            good = False
        print(f"selftest gradcheck float64 [{case['name']}] {'ok' if good else 'FAIL'}")
        ok = ok and good

    print("selftest: " + ("all ok" if ok else "FAILED"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hstu", help="path to the hstu binary")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the input/output files into DIR and keep them")
    ap.add_argument("--device", default="cpu", help="value passed to --device (default cpu)")
    ap.add_argument("--tol", type=float, default=1e-5, help="relative error bound (default 1e-5)")
    ap.add_argument("--case", action="append",
                    help="run only the named case (repeatable); names: "
                         + ", ".join(c["name"] for c in CASES))
    ap.add_argument("--selftest", action="store_true",
                    help="check the reference itself (no binary needed) and exit")
    args = ap.parse_args()

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    check_philox_known_answers()

    if args.selftest:
        return 0 if selftest() else 1

    if not args.hstu:
        ap.error("--hstu is required (or use --selftest)")
    hstu = os.path.abspath(args.hstu)
    if not (os.path.isfile(hstu) and os.access(hstu, os.X_OK)):
        print(f"error: {args.hstu} is not an executable file")
        print("0 passed, %d failed" % len(CASES))
        return 1

    cases = CASES
    if args.case:
        known = {c["name"] for c in CASES}
        unknown = [n for n in args.case if n not in known]
        if unknown:
            ap.error("unknown case(s): " + ", ".join(unknown))
        cases = [c for c in CASES if c["name"] in args.case]

    if args.keep:
        workdir = os.path.abspath(args.keep)
        os.makedirs(workdir, exist_ok=True)
    else:
        workdir = tempfile.mkdtemp(prefix="hstu_layer_test_")
    passed = failed = 0
    try:
        for case in cases:
            if run_case(case, hstu, workdir, args.device, args.tol):
                passed += 1
            else:
                failed += 1
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"files kept in {workdir}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
