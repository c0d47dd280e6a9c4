"""Prints the README's decode and prefill tables (markdown) from a `dsa-bench glm --json` file, so
that the figures in README.md and docs/PERF.md are exactly what the committed JSON says.

    python3 tools/bench_table.py docs/bench/glm-0.2.0-2026-11-30.json
"""

import json
import sys


def label(s: int) -> str:
    if s >= 1 << 20:
        return f"{s >> 20}M"
    if s in (90000, 92160):
        return "90k"
    return f"{s >> 10}k" if s >= 1024 else str(s)


def main(path: str) -> None:
    d = json.load(open(path))
    for table, title in (("decode", "Decode, 1 request × 1 token:"),
                         ("prefill", "Prefill, 64 query tokens at the end of an S-token context (token j sees S − 63 + j rows):")):
        rows = sorted((r for r in d["rows"] if r["table"] == table and r.get("batch", 1) == 1), key=lambda r: r["S"])
        if not rows:
            continue
        print(title + "\n")
        print("| S | scores | top-k | attention | **total** | % of floor | Gluon | × |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {label(r['S'])} | {r['scores_ms']:.4f} | {r['topk_ms']:.4f} | {r['attn_ms']:.4f} | "
                  f"**{r['total_ms']:.4f}** | {r['pct_floor_total']:.1f} | {r['gluon_ms']:.3f} | {r['ours_over_gluon']:.2f} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
