"""Prints the README's decode and prefill tables (markdown) from a `dsa-bench glm --json` file, so
that the figures in README.md and docs/PERF.md are exactly what the committed JSON says. Given a
second file from `dsa-bench glm --cold --json`, each table gets the cold columns beside the hot ones.

Columns: scores = the scores-only call, indexer = the scores + top-k call (decode: one fused kernel
where the choice table takes it), attention, total = indexer + attention.

    python3 tools/bench_table.py docs/bench/glm-fused-2026-12-02.json [docs/bench/glm-fused-cold-2026-12-02.json]
"""

import json
import sys


def label(s: int) -> str:
    if s >= 1 << 20:
        return f"{s >> 20}M"
    if s in (90000, 92160):
        return "90k"
    return f"{s >> 10}k" if s >= 1024 else str(s)


def rows_of(d: dict, table: str) -> list:
    return sorted((r for r in d["rows"] if r["table"] == table and r.get("batch", 1) == 1), key=lambda r: r["S"])


def main(path: str, cold_path: str | None) -> None:
    d = json.load(open(path))
    cold = json.load(open(cold_path)) if cold_path else None
    for table, title in (("decode", "Decode, 1 request × 1 token:"),
                         ("prefill", "Prefill, 64 query tokens at the end of an S-token context (token j sees S − 63 + j rows):")):
        rows = rows_of(d, table)
        if not rows:
            continue
        cold_by_s = {r["S"]: r for r in rows_of(cold, table)} if cold else {}
        print(title + "\n")
        head = "| S | scores | indexer | attention | **total** |"
        rule = "|---|---|---|---|---|"
        if cold:
            head += " cold scores | cold indexer | cold attention | **cold total** |"
            rule += "---|---|---|---|"
        print(head + " % of floor | Gluon | × |")
        print(rule + "---|---|---|")
        for r in rows:
            line = (f"| {label(r['S'])} | {r['scores_ms']:.4f} | {r['indexer_ms']:.4f} | {r['attn_ms']:.4f} | "
                    f"**{r['total_ms']:.4f}** |")
            if cold:
                c = cold_by_s.get(r["S"])
                line += (f" {c['scores_ms']:.4f} | {c['indexer_ms']:.4f} | {c['attn_ms']:.4f} | **{c['total_ms']:.4f}** |"
                         if c else " – | – | – | – |")
            print(line + f" {r['pct_floor_total']:.1f} | {r['gluon_ms']:.3f} | {r['ours_over_gluon']:.2f} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None)
