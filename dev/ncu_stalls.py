#!/usr/bin/env python3
"""ncu_stalls.py — where a kernel's warps wait, instruction by instruction, from an ncu report's source page.

    ncu --kernel-name regex:NAME --launch-count 1 --set full --import-source no -o rep ./prog ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 dev/ncu_stalls.py src.csv [TOP] [LISTING]

Prints the total warp-stall samples, the TOP (default 50) instructions by samples (address, share,
SASS) and the stall reasons summed over the kernel; with LISTING, writes every instruction as
"address samples reason:count reason:count SASS" (its two largest reasons) — e.g.
docs/bench/attn-rows-as-m-copy-issue-h100-2026-12-06/*/sass-stalls-chunk.txt. Host only.
"""
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    hdr_i = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
    hdr = rows[hdr_i]

    def col(name):
        return next((i for i, c in enumerate(hdr) if c.strip().lstrip("# ").startswith(name)), None)

    ia, isrc = col("Address"), col("Source")
    iall, ini = col("Warp Stall Sampling (All"), col("Warp Stall Sampling (Not")
    reasons = [(i, c) for i, c in enumerate(hdr) if "stall" in c.lower() and i not in (iall, ini)]
    body = [r for r in rows[hdr_i + 1:] if len(r) > max(ia, isrc, iall)]

    def num(r, i):
        try:
            return float(r[i] or 0)
        except (ValueError, IndexError):
            return 0.0

    data = [(num(r, iall), r[ia], r[isrc].strip()) for r in body]
    tot = sum(d[0] for d in data) or 1
    print("total samples", int(tot), "instructions", len(data))
    for s, a, src in sorted(data, reverse=True)[: int(sys.argv[2]) if len(sys.argv) > 2 else 50]:
        print(f"{a}  {100 * s / tot:5.1f}%  {src}")
    sums = sorted(((sum(num(r, i) for r in body), c) for i, c in reasons), reverse=True)
    for t, c in sums[:25]:
        if t > 0:
            print(f"{c}: {t:.0f}")
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            for r in body:
                rs = sorted(((num(r, i), c.replace("stall_", "")) for i, c in reasons
                             if "Not Issued" not in c and num(r, i) > 0), reverse=True)
                top = " ".join(f"{c}:{int(v)}" for v, c in rs[:2])
                f.write(f"{r[ia][-5:]} {int(num(r, iall)):6d} {top:30s} {r[isrc].strip()}\n")


if __name__ == "__main__":
    main()
