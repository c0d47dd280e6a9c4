"""A model of src/cp/merge_tree.cu's arithmetic, checked against the merge's contract on random rows —
for the kernel's logic before it meets a GPU (the radix passes' digits and stops, the runs' starts, the
sortedness check (ascending lists must be merged, not sorted), the merge rounds' pair search and stepping,
thread by thread).

For each row: the exact top-k ids of W candidate lists (score desc, NaN lowest, -0 = +0, the lower id
first on equal scores), in ascending id order, -1 after; the lists in ascending id order (dsa_cp's) or
not. The model runs the kernel's phases as written, two merge outputs a thread a round, and asserts the
output. Mutations of the model (--mutate N) must each fail: that the check can.

    python3 dev/merge_tree_model.py [--rows 3000] [--mutate N]
"""

import argparse
import random
import struct

THREADS, ITEMS, BINS, MAX_LISTS, MAX_TOPK = 1024, 16, 2048, 64, 2048
MUT = 0


def score_key(f):
    if f != f:
        return 0
    u = struct.unpack("<I", struct.pack("<f", f))[0]
    if u == 0x80000000:
        u = 0
    return (~u & 0xffffffff) if u & 0x80000000 else (u | 0x80000000)


def offset(key, id_, kmin):
    return ((key - kmin) << 32) | (~id_ & 0xffffffff)


def find_bin(hist, need):
    """topk/radix.cuh find_bin: the bin of the need-th largest from the top, and the count above it."""
    above = 0
    for b in range(len(hist) - 1, -1, -1):
        if above + hist[b] >= need:
            return b, above
        above += hist[b]
    return 0, 0


def kernel(W, k_in, topk, scores, ids):
    """scores, ids: flat list-major [W * k_in] of one row (id < 0: none). Returns (out[topk], len)."""
    n = W * k_in
    key = [score_key(scores[f]) if f < n else 0 for f in range(THREADS * ITEMS)]
    idv = [ids[f] if f < n else -1 for f in range(THREADS * ITEMS)]
    valid_f = [f for f in range(n) if idv[f] >= 0]
    valid = len(valid_f)
    mn = min((key[f] for f in valid_f), default=0xffffffff)
    mx = max((key[f] for f in valid_f), default=0)
    k = min(topk, valid)
    T = 0
    if k < valid:
        span = (mx - mn) & 0xffffffff
        sh = max(0, span.bit_length() - 11)
        need, shift = k, 64
        while True:
            width = 11 if shift == 64 else min(11, shift)
            nsh = 32 + sh if shift == 64 else shift - width
            dmask = (1 << width) - 1
            hist = [0] * BINS
            for f in valid_f:
                if shift == 64:
                    hist[((key[f] - mn) >> sh) & (BINS - 1)] += 1
                else:
                    oc = offset(key[f], idv[f], mn)
                    if (oc >> shift) == (T >> shift):
                        hist[(oc >> nsh) & dmask] += 1
            b, above = find_bin(hist, need)
            in_bin = hist[b]
            need -= above
            T |= b << nsh
            shift = nsh
            if MUT == 1:
                shift = max(0, shift - 1)
            if in_bin == need or shift == 0:
                break
    # compaction in flat order
    sel = [f for f in valid_f if offset(key[f], idv[f], mn) >= (T if MUT != 2 else T + 1)]
    total = len(sel)
    m = min(total, k)
    cat = [[0] * MAX_TOPK, [0] * MAX_TOPK]
    for o, f in enumerate(sel):
        if o < m:
            cat[0][o] = idv[f]
    tree = W <= MAX_LISTS
    start = [0] * (W + 1)
    if tree:
        for w in range(W + 1):
            fw = w * k_in
            before = total if fw >= n else sum(1 for f in sel if f < fw)
            start[w] = min(before, m)
    unsorted = not tree
    if tree:
        for i in range(m - 1):
            starts = any(start[w] == i + 1 for w in range(1, W))
            if MUT == 3:
                starts = False
            if not starts and cat[0][i] > cat[0][i + 1]:
                unsorted = True
    buf = 0
    if not unsorted:
        width = 1
        while width < W:
            cur, nxt = cat[buf], cat[buf ^ 1]
            for t in range(THREADS):
                g_end = -1
                ia = ib = ra = na = rb = nb = 0
                for i in range(2 * t, min(2 * t + 2, m)):
                    if i >= g_end:
                        g0 = 0
                        while g0 + 2 * width < W and start[g0 + 2 * width] <= i:
                            g0 += 2 * width
                        g1, g2 = min(g0 + width, W), min(g0 + 2 * width, W)
                        ra, na = start[g0], start[g1] - start[g0]
                        rb, nb = start[g1], start[g2] - start[g1]
                        g_end = start[g2] if MUT != 4 else start[g2] + 1
                        d = i - ra
                        lo, hi = max(0, d - nb), min(d, na)
                        while lo < hi:
                            mid = (lo + hi) >> 1
                            if cur[ra + mid] <= cur[rb + d - 1 - mid]:
                                lo = mid + 1
                            else:
                                hi = mid
                        ia, ib = lo, d - lo
                    take_a = ia < na and (ib >= nb or cur[ra + ia] <= cur[rb + ib])
                    if take_a:
                        nxt[i] = cur[ra + ia]
                        ia += 1
                    else:
                        nxt[i] = cur[rb + ib]
                        ib += 1
            width <<= 1
            buf ^= 1
    else:
        cat[0][:m] = sorted(cat[0][:m])
    out = [cat[buf][i] if i < m else -1 for i in range(topk)]
    return (out, m), not unsorted


def reference(W, k_in, topk, scores, ids):
    cand = [(score_key(scores[f]), -ids[f], ids[f]) for f in range(W * k_in) if ids[f] >= 0]
    cand.sort(reverse=True)
    chosen = sorted(c[2] for c in cand[:topk])
    return chosen + [-1] * (topk - len(chosen)), len(chosen)


def make_row(rng, W, k_in, kind, ascending):
    span = W * k_in * 3
    perm = rng.sample(range(span), W * k_in)
    scores, ids = [], []
    empty = kind == 1 and rng.random() < 0.1
    for f in range(W * k_in):
        v = rng.uniform(-4, 4)
        if kind == 2:
            v = float(rng.randrange(4))
        if kind == 3:
            v = 1.0 + rng.random() / 4096
        if kind == 1:
            u = rng.randrange(40)
            v = [float("nan"), float("-inf"), float("inf")][u] if u < 3 else 1.5 if u < 8 else -0.0 if u == 8 else 0.0 if u == 9 else v
        v = struct.unpack("<f", struct.pack("<f", v))[0]
        scores.append(v)
        ids.append(-1 if empty or (kind == 1 and rng.randrange(16) == 0) else perm[f])
    if ascending:
        for w in range(W):
            seg = [(ids[f], scores[f]) for f in range(w * k_in, (w + 1) * k_in) if ids[f] >= 0]
            seg.sort(key=lambda p: p[0])
            it = iter(seg)
            for f in range(w * k_in, (w + 1) * k_in):
                if ids[f] >= 0:
                    ids[f], scores[f] = next(it)
    return scores, ids


SHAPES = [(2, 2048, 2048), (8, 2048, 2048), (8, 2048, 1), (3, 700, 512), (4, 1024, 2048), (1, 100, 37),
          (5, 1, 3), (7, 3, 5), (6, 1500, 700), (16, 1024, 2048), (100, 3, 50), (64, 200, 2048), (65, 100, 300),
          (13, 17, 97)]


def main():
    global MUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--mutate", type=int, default=0)
    args = ap.parse_args()
    MUT = args.mutate
    rng = random.Random(1)
    bad = 0
    for r in range(args.rows):
        W, k_in, topk = SHAPES[r % len(SHAPES)]
        kind, asc = rng.randrange(4), rng.random() < 0.7
        scores, ids = make_row(rng, W, k_in, kind, asc)
        (got, merged), want = kernel(W, k_in, topk, scores, ids), reference(W, k_in, topk, scores, ids)
        if asc and W <= MAX_LISTS and not merged:  # ascending lists must take the merge rounds, not the sort
            got = None
        if got != want:
            bad += 1
            if bad <= 3:
                print(f"row {r}: W {W} k_in {k_in} topk {topk} kind {kind} ascending {asc}: "
                      + ("sorted, not merged" if got is None else f"lens {got[1]} vs {want[1]}"))
    print(f"{bad} problems in {args.rows} rows" + (f" (mutation {MUT})" if MUT else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
