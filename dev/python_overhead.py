"""Host cost of dsa's Python calls against torch.add's, in one run (issue 23: each eager call should cost
at most 1.5x a torch.add on a tiny tensor).

For each public call (every one with a fast path: dsa/_fast.py) at a small shape, the host time per
call: the median over BURSTS bursts of BURST calls, each burst issued onto an idle GPU (synchronised
before it, the clock stopped when its last call returns). A burst is short, so the host should not
wait for the GPU (if the launch queue holds fewer than 200 of a call's launches, it still does;
dev/launch_cost.cu measures its depth). Over thousands of calls back to back, a call whose kernel
outlasts its issue (the indexer's, ~14 us at 8k) times the GPU instead: that sustained rate is
printed beside the C call. DSA_OVERHEAD_BURST=n sets the burst (a shorter one for a call whose
launches fill the queue within 200) (N calls back to back, max(host, GPU)). With outputs given (and workspace
given) and with outputs allocated by the call, through each implementation of the fast path (the dsa._fastcall
extension where it is built — with PyTorch >= 2.10 once reading tensors in C, once asking their Python
attributes (fc-attrs) — and the Python one); torch.ops.dsa's operators through their kernels
(C where dsa.ops has C kernels: timed with the extension, whose plans they use); beside it
torch.add on 16 floats (output allocated, and out= given).
Needs PyTorch and an sm_90 GPU; run from the repository root:

    PYTHONPATH=python python3 dev/python_overhead.py        # or with the wheel installed
"""

import ctypes
import os
import statistics
import time

import torch

import dsa
from dsa import _fast
import dsa.ops  # noqa: F401  (torch.ops.dsa, timed too)

N = 2000  # the sustained loop
BURST, BURSTS = int(os.environ.get("DSA_OVERHEAD_BURST", "200")), 10
DEV = torch.device("cuda")
P, HI, K, H = 64, 32, 2048, 16


def per_call_us(fn):
    """Host us a call: the median of BURSTS bursts of BURST calls, each onto an idle GPU."""
    for _ in range(50):
        fn()
    per = []
    for _ in range(BURSTS):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(BURST):
            fn()
        per.append((time.perf_counter() - t) / BURST * 1e6)
    torch.cuda.synchronize()
    return statistics.median(per)


def sustained_us(fn, n=N):
    """us a call of n calls back to back, one synchronisation after: max(host, GPU) a call."""
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    g = torch.Generator(device=DEV).manual_seed(0)
    a = torch.randn(16, device=DEV)
    b = torch.randn(16, device=DEV)
    c = torch.empty(16, device=DEV)
    rows = [("torch.add (16 floats)", per_call_us(lambda: torch.add(a, b))),
            ("torch.add (16 floats, out=)", per_call_us(lambda: torch.add(a, b, out=c))),
            # what any operator costs called through torch.ops (the OpOverload's Python entry and the
            # dispatcher): the floor under torch.ops.dsa.*
            ("torch.ops.aten.add.Tensor (16 floats)", per_call_us(lambda: torch.ops.aten.add.Tensor(a, b))),
            # what each output or workspace a call allocates costs at least (the caching allocator)
            ("torch.empty (1, 2048) int32", per_call_us(lambda: torch.empty((1, 2048), dtype=torch.int32, device=DEV))),
            ("torch.empty (1, 16, 512) bf16",
             per_call_us(lambda: torch.empty((1, 16, 512), dtype=torch.bfloat16, device=DEV)))]

    # one request, 8k context: the decode step's calls
    S = 8192
    pages = S // P
    block_table = torch.randperm(pages, device=DEV, generator=g).to(torch.int32).view(1, pages)
    index_k_cache = torch.zeros(pages, P * 132, dtype=torch.uint8, device=DEV)
    kv_cache = torch.zeros(pages, P, 656, dtype=torch.uint8, device=DEV)
    seq_lens = torch.full((1,), S, dtype=torch.int32, device=DEV)
    slot = torch.zeros(1, dtype=torch.int64, device=DEV)
    k_index = torch.randn(1, 128, device=DEV).to(torch.bfloat16)
    kv = torch.randn(1, 576, device=DEV).to(torch.bfloat16)
    q_index = torch.zeros(1, HI, 128, dtype=torch.float8_e4m3fn, device=DEV)
    q_scale = torch.ones(1, HI, device=DEV)
    weights = torch.ones(1, HI, device=DEV)
    q = torch.randn(1, H, 576, device=DEV).to(torch.bfloat16)
    idx = torch.empty(1, K, dtype=torch.int32, device=DEV)
    lens = torch.empty(1, dtype=torch.int32, device=DEV)
    out = torch.empty(1, H, 512, dtype=torch.bfloat16, device=DEV)
    scale = HI ** -0.5 / 128 ** 0.5
    ws_i = torch.empty(max(1, dsa.indexer_decode_workspace_size(q_index, weights, index_k_cache, seq_lens, block_table,
                                                                topk=K, softmax_scale=scale, q_scale=q_scale)),
                       dtype=torch.uint8, device=DEV)
    scores = torch.randn(1, S, device=DEV)
    ws_t = torch.empty(max(1, dsa.topk_workspace_size(scores, topk=K)), dtype=torch.uint8, device=DEV)
    dsa.indexer_decode(q_index, weights, index_k_cache, seq_lens, block_table, topk=K, softmax_scale=scale,
                       q_scale=q_scale, topk_indices=idx, topk_lens=lens)
    ws_a = torch.empty(max(1, dsa.sparse_mla_workspace_size(q, kv_cache, idx, softmax_scale=0.1)), dtype=torch.uint8,
                       device=DEV)
    # prefill: one token over S workspace rows (slots 0 .. S-1)
    ws_slots = torch.arange(S, dtype=torch.int64, device=DEV)
    row_starts = torch.zeros(1, dtype=torch.int32, device=DEV)
    row_ends = torch.full((1,), S, dtype=torch.int32, device=DEV)
    ws_p = torch.empty(max(1, dsa.indexer_prefill_workspace_size(q_index, weights, index_k_cache, ws_slots, row_starts,
                                                                 row_ends, topk=K, softmax_scale=scale,
                                                                 q_scale=q_scale)), dtype=torch.uint8, device=DEV)
    scores_out = torch.empty(1, S, device=DEV)
    # context parallelism's pieces: two ranks' candidates, a merge, a rank's rows, the combine
    cand_s = torch.randn(2, 1, K, device=DEV)
    cand_i = torch.arange(2 * K, dtype=torch.int32, device=DEV).view(2, 1, K)
    cs_out = torch.empty(1, K, device=DEV)
    ci_out = torch.empty(1, K, dtype=torch.int32, device=DEV)
    slots_out = torch.empty(1, K, dtype=torch.int32, device=DEV)
    outs = torch.randn(2, 1, H, 512, device=DEV).to(torch.bfloat16)
    lses = torch.randn(2, 1, H, device=DEV)
    lse = torch.empty(1, H, device=DEV)
    calls = [
        ("index_k_store", lambda: dsa.index_k_store(k_index, slot, index_k_cache), None),
        ("mla_kv_store", lambda: dsa.mla_kv_store(kv, slot, kv_cache), None),
        ("indexer_decode", lambda: dsa.indexer_decode(q_index, weights, index_k_cache, seq_lens, block_table, topk=K,
                                                      softmax_scale=scale, q_scale=q_scale),
         lambda: dsa.indexer_decode(q_index, weights, index_k_cache, seq_lens, block_table, topk=K,
                                    softmax_scale=scale, q_scale=q_scale, topk_indices=idx, topk_lens=lens,
                                    workspace=ws_i)),
        ("topk", lambda: dsa.topk(scores, topk=K),
         lambda: dsa.topk(scores, topk=K, indices=idx, lens=lens, workspace=ws_t)),
        ("sparse_mla", lambda: dsa.sparse_mla(q, kv_cache, idx, lens=lens, softmax_scale=0.1),
         lambda: dsa.sparse_mla(q, kv_cache, idx, lens=lens, softmax_scale=0.1, out=out, workspace=ws_a)),
        ("sparse_mla, return_lse", lambda: dsa.sparse_mla(q, kv_cache, idx, lens=lens, softmax_scale=0.1,
                                                          return_lse=True),
         lambda: dsa.sparse_mla(q, kv_cache, idx, lens=lens, softmax_scale=0.1, return_lse=True, out=out, lse=lse,
                                workspace=ws_a)),
        ("torch.ops.dsa.sparse_mla", lambda: torch.ops.dsa.sparse_mla.default(q, kv_cache, idx, 0.1, lens), None),
        ("torch.ops.dsa.topk", lambda: torch.ops.dsa.topk.default(scores, K), None),
        ("torch.ops.dsa.indexer_decode",
         lambda: torch.ops.dsa.indexer_decode.default(q_index, weights, index_k_cache, seq_lens, block_table, K, scale,
                                                      q_scale), None),
        ("torch.ops.dsa.mla_kv_store", lambda: torch.ops.dsa.mla_kv_store.default(kv, slot, kv_cache), None),
        # the same operators with their outputs and workspace given (NAME_out: nothing allocated)
        ("torch.ops.dsa.sparse_mla_out", None,
         lambda: torch.ops.dsa.sparse_mla_out.default(q, kv_cache, idx, 0.1, out, lse, lens, None, ws_a)),
        ("torch.ops.dsa.topk_out", None, lambda: torch.ops.dsa.topk_out.default(scores, K, idx, lens, None, None, ws_t)),
        ("torch.ops.dsa.indexer_decode_out", None,
         lambda: torch.ops.dsa.indexer_decode_out.default(q_index, weights, index_k_cache, seq_lens, block_table, K,
                                                          scale, idx, lens, q_scale, P, 1, 0, 0, ws_i)),
        ("indexer_decode_scores",
         lambda: dsa.indexer_decode_scores(q_index, weights, index_k_cache, seq_lens, block_table,
                                           softmax_scale=scale, q_scale=q_scale),
         lambda: dsa.indexer_decode_scores(q_index, weights, index_k_cache, seq_lens, block_table,
                                           softmax_scale=scale, q_scale=q_scale, scores=scores_out)),
        ("indexer_prefill",
         lambda: dsa.indexer_prefill(q_index, weights, index_k_cache, ws_slots, row_starts, row_ends, topk=K,
                                     softmax_scale=scale, q_scale=q_scale),
         lambda: dsa.indexer_prefill(q_index, weights, index_k_cache, ws_slots, row_starts, row_ends, topk=K,
                                     softmax_scale=scale, q_scale=q_scale, topk_indices=idx, topk_lens=lens,
                                     workspace=ws_p)),
        ("indexer_prefill_scores",
         lambda: dsa.indexer_prefill_scores(q_index, weights, index_k_cache, ws_slots, row_starts, row_ends,
                                            softmax_scale=scale, q_scale=q_scale),
         lambda: dsa.indexer_prefill_scores(q_index, weights, index_k_cache, ws_slots, row_starts, row_ends,
                                            softmax_scale=scale, q_scale=q_scale, scores=scores_out)),
        ("cp_candidates", lambda: dsa.cp_candidates(scores, idx, world_size=2, rank=0),
         lambda: dsa.cp_candidates(scores, idx, world_size=2, rank=0, cand_scores=cs_out, cand_ids=ci_out)),
        ("topk_merge", lambda: dsa.topk_merge(cand_s, cand_i, topk=K),
         lambda: dsa.topk_merge(cand_s, cand_i, topk=K, indices=idx, lens=lens)),
        ("cp_local_indices",
         lambda: dsa.cp_local_indices(idx, world_size=2, rank=0, block_table=block_table, num_pages=pages,
                                      compact=True),
         lambda: dsa.cp_local_indices(idx, world_size=2, rank=0, block_table=block_table, num_pages=pages,
                                      compact=True, out_slots=slots_out, out_lens=lens)),
        ("lse_combine", lambda: dsa.lse_combine(outs, lses),
         lambda: dsa.lse_combine(outs, lses, out=out, lse=lse)),
    ]
    workspaces = {"indexer_decode": ws_i, "topk": ws_t, "sparse_mla": ws_a, "sparse_mla, return_lse": ws_a,
                  "indexer_prefill": ws_p}
    stream = torch.cuda.current_stream().cuda_stream
    c_only = {}
    ext = _fast._ext
    # the extension reading tensors in C (PyTorch >= 2.10), the extension asking their Python attributes,
    # the Python implementation
    impls = [("python", None, None)]
    if ext is not None:
        impls[:0] = [("fastcall", ext, True), ("fc-attrs", ext, False)] if _fast.torch_abi() else [("fastcall", ext, None)]
    timed = {}  # (call, given) -> {implementation: us}
    for impl, mod, in_c in impls:
        _fast._ext = mod
        _fast.clear()
        if in_c is not None:
            _fast._configure()
            assert _fast.borrow_setup(torch, in_c) == in_c
        for name, alloc, given in calls:
            if name.startswith("torch.ops") and mod is None and dsa.ops._C_KERNELS:
                continue  # the C kernels find only the extension's plans: timed with it
            if alloc is not None:
                timed.setdefault((name, False), {})[impl] = per_call_us(alloc)
            if given is not None:
                timed.setdefault((name, True), {})[impl] = per_call_us(given)
    _fast._ext = ext
    if ext is not None and _fast.torch_abi():
        _fast.borrow_setup(torch)
    for name, alloc, given in calls:
        if given is not None and not name.startswith("torch.ops"):
            c_only[name] = c_call_us(given, workspaces.get(name), stream)
    base = rows[0][1]
    names = [impl for impl, _, _ in impls]
    print(f"dsa {dsa.version()} on {torch.cuda.get_device_name()}, torch {torch.__version__}: host us a call "
          f"(median of {BURSTS} bursts of {BURST} calls onto an idle GPU); fast path: {' / '.join(names)} "
          f"(dsa/_fast.py); C: the library call alone (its struct built once), the floor under Python; "
          f"sustained: the C call {N} times back to back, max(host, GPU)")
    for name, us in rows:
        print(f"  {name:48s} {us:7.1f} us  {us / base:5.2f}x torch.add")
    for (name, given), by_impl in timed.items():
        label = (f"dsa.{name}" if not name.startswith("torch") else name) + (" (outputs, workspace given)" if given else "")
        cells = "  ".join(f"{impl} {by_impl[impl]:6.1f} us {by_impl[impl] / base:5.2f}x" for impl in names
                          if impl in by_impl)
        c = c_only.get(name) if given else None
        print(f"  {label:48s} {cells}" + (f"   C {c[0]:5.1f} us  sustained {c[1]:5.1f} us" if c else ""))


def c_call_us(given, workspace, stream):
    """The C function of a call alone: the plan the checked path leaves (dsa/_fast.py, its Python
    implementation, whose plan is readable here), its struct passed as is, N times."""
    ext, _fast._ext = _fast._ext, None
    try:
        _fast.clear()
        given()
        (p,) = _fast._plans.values()
    finally:
        _fast._ext = ext
        _fast.clear()
    a = p.fn.argtypes[0]._type_.from_buffer_copy(p.args)
    if len(p.fn.argtypes) == 4:
        keep = workspace if workspace is not None or not p.need else torch.empty(p.need, dtype=torch.uint8, device=DEV)
        wp, wb = (keep.data_ptr(), keep.numel()) if keep is not None else (None, 0)
        call = lambda: p.fn(ctypes.byref(a), wp, wb, stream)  # noqa: E731
    else:
        call = lambda: p.fn(ctypes.byref(a), stream)  # noqa: E731
    return per_call_us(call), sustained_us(call)


if __name__ == "__main__":
    main()
