"""What an attention path with no e4m3 -> 16-bit conversion of the KV rows would do to the numerics
(issue 22: the FP8 kernels are bound by the producer's conversion; docs/PERF.md open problem 2).

wgmma takes e4m3 operands only K-major, both of them, so QK and PV could run on the cache's bytes if Q
and P were e4m3 too. One e4m3 value keeps 4 significant bits: q in e4m3 alone put 2.6 % of the
scores' rms into every score (docs/PERF.md). Split in two e4m3 terms (x = hi + lo, lo the rounding
error of hi, each with its own per-row scale), a value keeps about 8 bits, bf16's precision, at twice
the e4m3 MMAs — the tensor time of one bf16 MMA. This simulates, in float64 on the CPU, against the
float64 reference over the dequantised cache (DESIGN.md section 5):

  today     K and V rows e4m3 x scale rounded once to f16, q bf16 as given, P rounded to f16 (the
            heads_as_m FP8 path)
  q8        q in one e4m3 term (a per-head scale), the rest as today
  q8x2      q as two e4m3 terms (a scale a row), the rest as today
  q8x2b     the same with a scale a 128-dim block of a row
  q8x3      q as three e4m3 terms (about 12 bits; three e4m3 MMAs for QK, 1.5x bf16's tensor time)
  p8x2      P as two e4m3 terms a 128-dim block, each with the rows' scale of that block folded in
            (O = sum_t P[h,t] s[t,b] V8[t,d] for d in block b), K / V as the cache's e4m3 values
  q8x2p8x2  both: no 16-bit copy of the latent rows at all (the rope's 64 dims stay bf16)

Every variant rounds out to bf16 at the end, as the kernels do. Printed per case: out's relative L2
error (max over tokens) and the largest lse error, against the reference.
Usage: python3 dev/fp8_split_numerics.py   (CPU, PyTorch; ~1 min)
"""

import torch

torch.manual_seed(0)
F8 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def e4m3(x, scale):
    """x / scale rounded to e4m3 (saturating), times scale."""
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(F8).to(torch.float64) * scale


def row_scale(x, dim=-1):
    return (x.abs().amax(dim=dim, keepdim=True) / E4M3_MAX).clamp_min(1e-30)


def split2(x, dim=-1):
    """x as hi + lo, two e4m3 terms with per-row scales (lo: hi's rounding error)."""
    hi = e4m3(x, row_scale(x, dim))
    r = x - hi
    return hi + e4m3(r, row_scale(r, dim))


def split2_blocks(x):
    """split2 with a scale a 128-dim block of a row (x [R, 512])."""
    R = x.shape[0]
    return split2(x.reshape(R, 4, 128)).reshape(R, 512)


def split3(x, dim=-1):
    """x as three e4m3 terms, each the rounding error of the ones before (about 12 bits)."""
    hi = split2(x, dim)
    r = x - hi
    return hi + e4m3(r, row_scale(r, dim))


def one8(x, dim=-1):
    return e4m3(x, row_scale(x, dim))


def f16(x):
    return x.to(torch.float16).to(torch.float64)


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float64)


def cache(n):
    """n packed FP8 rows as mla_kv_store makes them: 512 latent values in e4m3 with a scale a 128
    (amax / 448), 64 rope values bf16. Returns (latent e4m3 values [n, 512], scales [n, 4], rope)."""
    lat = torch.randn(n, 512, dtype=torch.float64)
    s = (lat.view(n, 4, 128).abs().amax(-1) / E4M3_MAX).clamp_min(1e-30)
    q8 = (lat.view(n, 4, 128) / s[..., None]).to(F8).to(torch.float64).view(n, 512)
    rope = bf16(torch.randn(n, 64, dtype=torch.float64))
    return q8, s, rope


def attend(q, k8, s, rope, scale, variant):
    """One token: q [H, 576] (bf16 values), k8 [L, 512] e4m3 values, s [L, 4], rope [L, 64]."""
    L = k8.shape[0]
    kv = k8 * s.repeat_interleave(128, dim=1)  # the dequantised latent rows, exact
    if variant == "ref":
        S = (q[:, :512] @ kv.T + q[:, 512:] @ rope.T) * scale
        m = S.amax(-1, keepdim=True)
        p = torch.exp(S - m)
        l = p.sum(-1, keepdim=True)
        return (p @ kv) / l, (m + torch.log(l)).squeeze(-1)
    qn = q[:, :512]
    if variant in ("q8", "q8x2", "q8x2b", "q8x3", "q8x2p8x2"):
        qn = {"q8": one8, "q8x2b": split2_blocks, "q8x3": split3}.get(variant, split2)(qn)
        # QK on the cache's bytes: a block's partial sums, then the row's block scale
        Sn = sum((qn[:, 128 * b:128 * (b + 1)] @ k8[:, 128 * b:128 * (b + 1)].T) * s[:, b] for b in range(4))
    else:
        Sn = qn @ f16(kv).T
    S = (Sn + q[:, 512:] @ rope.T) * scale
    m = S.amax(-1, keepdim=True)
    p = torch.exp(S - m)
    l = p.sum(-1, keepdim=True)
    if variant in ("p8x2", "q8x2p8x2"):
        o = torch.zeros(q.shape[0], 512, dtype=torch.float64)
        for b in range(4):  # P with the block's row scales folded in, as two e4m3 terms; V as e4m3
            pb = split2(p * s[:, b])
            o[:, 128 * b:128 * (b + 1)] = pb @ k8[:, 128 * b:128 * (b + 1)]
    else:
        o = f16(p) @ f16(kv)
    return o / l, (m + torch.log(l)).squeeze(-1)


def case(name, H, L, q_amp, tokens=8, scale=1 / 16):
    variants = ("today", "q8", "q8x2", "q8x2b", "q8x3", "p8x2", "q8x2p8x2")
    err = {v: [0.0, 0.0] for v in variants}
    for _ in range(tokens):
        k8, s, rope = cache(L)
        q = bf16(torch.randn(H, 576, dtype=torch.float64) * q_amp)
        o_ref, lse_ref = attend(q, k8, s, rope, scale, "ref")
        for v in variants:
            o, lse = attend(q, k8, s, rope, scale, v)
            o = bf16(o)
            rel = (torch.linalg.norm(o - o_ref) / torch.linalg.norm(o_ref)).item()
            err[v][0] = max(err[v][0], rel)
            err[v][1] = max(err[v][1], (lse - lse_ref).abs().max().item())
    print(f"{name:44s} " + "  ".join(f"{v} {e[0]:.2e} / {e[1]:.1e}" for v, e in err.items()))


def main():
    print("out relative L2 (max over tokens) / largest lse error, against float64 over the dequantised cache")
    case("16 heads, 2048 entries, q amplitude 1", 16, 2048, 1.0)
    case("16 heads, 2048 entries, q amplitude 4 (peaked)", 16, 2048, 4.0)
    case("64 heads, 2048 entries, q amplitude 2", 64, 2048, 2.0)
    case("16 heads, 64 entries, q amplitude 2", 16, 64, 2.0)
    case("16 heads, 3 entries, q amplitude 2", 16, 3, 2.0, tokens=32)


if __name__ == "__main__":
    main()
