"""Draws a `dsa-bench glm --json` result: per-stage stacked bars (scores, top-k, attention) against
the context length S, decode and prefill side by side, with the reference system's totals
(tokenspeed PR #627, MI355; DESIGN.md §6) as lines and the best NVIDIA peers composed on the H200
(DeepGEMM + FlashInfer + FlashMLA; DESIGN.md §7) as markers.

    python tools/plot_bench.py docs/bench/glm-2026-11-30.json docs/bench/glm-2026-11-30.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# DESIGN.md §7: DeepGEMM scores + FlashInfer top-k + FlashMLA attention (padded to 64 heads), H200, ms.
PEERS = {"decode": {8192: 0.036, 131072: 0.042, 1048576: 0.104},
         "prefill": {8192: 0.088, 131072: 0.222, 1048576: 1.21}}
STAGES = (("scores_ms", "scores", "#4C72B0"), ("topk_ms", "top-k", "#DD8452"), ("attn_ms", "attention", "#55A868"))


def label(s: int) -> str:
    if s >= 1 << 20 and s % (1 << 20) == 0:
        return f"{s >> 20}M"
    if s == 92160 or s == 90000:
        return "90k"
    return f"{s >> 10}k" if s >= 1024 else str(s)


def main(src: str, dst: str) -> None:
    d = json.load(open(src))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, table in zip(axes, ("decode", "prefill")):
        rows = sorted((r for r in d["rows"] if r["table"] == table and r.get("batch", 1) == 1), key=lambda r: r["S"])
        if not rows:
            ax.set_visible(False)
            continue
        x = list(range(len(rows)))
        bottom = [0.0] * len(rows)
        for key, name, color in STAGES:
            vals = [r[key] for r in rows]
            ax.bar(x, vals, bottom=bottom, color=color, label=f"dsa {name}", width=0.7)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for key, name, style in (("gluon_ms", "tokenspeed Gluon (MI355)", "k-o"), ("triton_ms", "tokenspeed Triton (MI355)", "k:^")):
            if all(r.get(key) for r in rows):
                ax.plot(x, [r[key] for r in rows], style, label=name, markersize=4, linewidth=1)
        px = [i for i, r in enumerate(rows) if r["S"] in PEERS[table]]
        if px:
            ax.plot(px, [PEERS[table][rows[i]["S"]] for i in px], "r*", markersize=11, linestyle="none",
                    label="best NVIDIA peers composed (H200)")
        ax.set_yscale("log")
        ax.set_xticks(x, [label(r["S"]) for r in rows])
        ax.set_xlabel("context S (tokens)")
        ax.set_ylabel("ms per call (log)")
        title = "decode: 1 request x 1 token" if table == "decode" else "prefill: 64 tokens at the end of S"
        ax.set_title(title)
        ax.grid(axis="y", which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, frameon=False)
    o = d.get("options", {})
    fig.suptitle(f"dsa {d.get('dsa_version', '?')} on {d.get('device', '?')} ({d.get('date', '')[:10]}): "
                 f"{o.get('index_heads')}x128 indexer, topk {o.get('topk')}, {o.get('heads')} heads, "
                 f"{o.get('kv')} KV — medians of CUDA-graph replays, hot L2", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
