#!/usr/bin/env python3
"""seesaw_protocol_model.py — the synchronisation of heads_as_m's seesaw (src/attention/heads_as_m.cu:
hm_consume_seesaw, hm_pair_qk, hm_produce_pairs; FlashMLA's paired prefill schedule) replayed as three
processes — the producer and the two consumer warpgroups, each a unit of 128 threads — under random
schedules, on the CPU. Chunks go in pairs (2i in tile 0, 2i + 1 in tile 1; an odd count ends with a pair
whose tile 1 holds no rows); each tile is two halves, L (dims 0-255) and R (256-575, the rope in it),
each with a full and an empty barrier. Checked on every schedule, for chunk counts 0..9:

  - no deadlock (every process finishes);
  - a named barrier phase is completed by one arrival of each warpgroup, never two of one (the
    hardware counts threads: a second bar.arrive of the same warpgroup before the other's bar.sync
    would complete the phase without it);
  - every read of the shared m buffer, of P0 (kept in tile 0's rope segment) and of P1 sees the pair
    it is meant to, and no write overwrites a value its reader has not read yet;
  - a half is refilled only after its last reader released it, and read only while it holds the
    chunk being processed (P0's segment included: written and read while tile 0's R holds chunk 2i);
  - at the end, each warpgroup has accumulated every chunk on its half, every half use was released,
    and no named barrier is left with a pending arrival.

It models the order of the kernel's steps, not their data; keep it in step with the kernel.

    python3 dev/seesaw_protocol_model.py
"""
import random


class Deadlock(Exception):
    pass


L, R = 0, 1


class Model:
    def __init__(self, n, rng):
        self.n = n
        self.pairs = (n + 1) // 2
        self.rng = rng
        self.bar = {}  # named barrier id -> set of warpgroups arrived in the current phase
        self.bar_done = {}  # id -> completed phases
        self.full = {(t, h): 0 for t in (0, 1) for h in (L, R)}  # published uses
        self.empty = {(t, h): 0 for t in (0, 1) for h in (L, R)}  # released uses
        self.half = {(t, h): None for t in (0, 1) for h in (L, R)}  # chunk the half holds
        self.m = None  # (pair, writer) whose m the buffer holds
        self.m_read = True
        self.p0 = None  # pair whose P0 tile 0's rope segment holds
        self.p0_read = True
        self.p1 = None
        self.p1_read = True
        self.errors = []
        self.pv = [set(), set()]  # chunks each warpgroup has accumulated on its O half
        self.in_flight = []  # halves whose copies are issued and have not landed

    def arrive(self, wg, bid):
        s = self.bar.setdefault(bid, set())
        if wg in s:
            self.errors.append(f"barrier {bid}: warpgroup {wg} arrived twice in one phase")
        s.add(wg)
        if len(s) == 2:
            self.bar[bid] = set()
            self.bar_done[bid] = self.bar_done.get(bid, 0) + 1

    def sync(self, wg, bid):
        """generator: arrive, then wait for the phase to complete"""
        before = self.bar_done.get(bid, 0)
        self.arrive(wg, bid)
        while self.bar_done.get(bid, 0) == before:
            yield

    def holds(self, who, t, h, c):
        if self.half[(t, h)] != c:
            self.errors.append(f"{who}: tile {t} half {'LR'[h]} holds {self.half[(t, h)]}, chunk {c} expected")

    def release(self, t, h):
        self.empty[(t, h)] += 1


# the producer's jobs in a pair: (tile, half)
JOBS = [(0, L), (1, R), (0, R), (1, L)]


def producer(M):
    """hm_produce_pairs: each half's copies issued once the half is free; its full barrier completes when
    they have landed (cp.async.mbarrier.arrive) — at any later point, modelled as a landing process"""
    for i in range(M.pairs):
        for t, h in JOBS:
            c = 2 * i + t
            while M.empty[(t, h)] < i:  # ring_wait_empty: use i of the half needs use i - 1 released
                yield
            if M.half[(t, h)] is not None and M.half[(t, h)] != c - 2:
                M.errors.append(f"half {(t, h)} refilled for chunk {c} while it holds {M.half[(t, h)]}")
            M.half[(t, h)] = c
            M.in_flight.append((t, h))  # the copies issued; the arrivals made
            yield


def landing(M):
    """the halves in flight land in any order, whenever the schedule lets them"""
    landed = 0
    while landed < 4 * M.pairs:
        if M.in_flight:
            M.full[M.in_flight.pop(M.rng.randrange(len(M.in_flight)))] += 1
            landed += 1
        yield


def wait_full(M, t, h, i):
    while M.full[(t, h)] < i + 1:
        yield


def pair_qk(M, j, i):
    """hm_pair_qk: warpgroup j's QK of the pair's chunk in tile j, its halves in the order they land"""
    for h in ((L, R) if j == 0 else (R, L)):
        yield from wait_full(M, j, h, i)
        M.holds(f"wg{j} QK", j, h, 2 * i + j)
        yield


def wg0(M):
    if M.pairs:
        yield from pair_qk(M, 0, 0)
    for i in range(M.pairs):
        c0, c1 = 2 * i, 2 * i + 1
        # the pair's QK is done (before the loop, or behind the last pair's PV(P1)); the softmax
        if not M.m_read and M.m is not None:
            M.errors.append(f"wg0 pair {i}: m overwrites {M.m} before it was read")
        M.m, M.m_read = (i, 0), False
        M.arrive(0, "M0->1")
        yield  # PV(P0, tile 0 L) from registers
        M.holds("wg0 PV(P0)", 0, L, c0)
        M.pv[0].add(c0)
        M.release(0, L)
        yield from M.sync(0, "M1->0")
        if M.m != (i, 1):
            M.errors.append(f"wg0 pair {i}: m buffer holds {M.m}, the pair's max expected")
        M.m_read = True
        # P0 into tile 0's rope segment
        M.holds("wg0 P0 store", 0, R, c0)
        if not M.p0_read and M.p0 is not None:
            M.errors.append(f"wg0 pair {i}: P0 overwrites pair {M.p0}'s before it was read")
        M.p0, M.p0_read = i, False
        M.arrive(0, "P0->1")
        yield
        # PV(P1, tile 1 L) issued
        yield from wait_full(M, 1, L, i)
        yield from M.sync(0, "P1->0")
        if M.p1 != i:
            M.errors.append(f"wg0 pair {i}: P1 buffer holds {M.p1}")
        M.p1_read = True
        yield
        if i + 1 < M.pairs:
            # the next pair's QK on tile 0's L half issued behind it (the wgmma run in order)
            yield from wait_full(M, 0, L, i + 1)
            yield
            M.holds("wg0 PV(P1)", 1, L, c1)  # wgmma.wait_group 1: PV(P1) done
            M.pv[0].add(c1)
            M.release(1, L)
            M.holds("wg0 QK", 0, L, 2 * (i + 1))
            yield from wait_full(M, 0, R, i + 1)
            M.holds("wg0 QK", 0, R, 2 * (i + 1))
            yield
        else:
            M.holds("wg0 PV(P1)", 1, L, c1)
            M.pv[0].add(c1)
            M.release(1, L)
    yield from M.sync(0, "EPILOGUE")


def wg1(M):
    for i in range(M.pairs):
        c0, c1 = 2 * i, 2 * i + 1
        yield from pair_qk(M, 1, i)
        yield from M.sync(1, "M0->1")
        if M.m != (i, 0):
            M.errors.append(f"wg1 pair {i}: m buffer holds {M.m}, wg0's m expected")
        M.m_read = True
        yield  # softmax
        # the quad read m before its lane 0 writes M (program order, __syncwarp)
        M.m, M.m_read = (i, 1), False
        M.arrive(1, "M1->0")
        yield  # PV(P1, tile 1 R) issued; P1 stored
        if not M.p1_read and M.p1 is not None:
            M.errors.append(f"wg1 pair {i}: P1 overwrites pair {M.p1}'s before it was read")
        M.p1, M.p1_read = i, False
        yield from wait_full(M, 0, R, i)
        yield from M.sync(1, "P0->1")
        if M.p0 != i:
            M.errors.append(f"wg1 pair {i}: P0 segment holds {M.p0}")
        M.holds("wg1 PV(P0)", 0, R, c0)
        M.arrive(1, "P1->0")
        yield  # wgmma.wait_group 1: PV(P1) done
        M.holds("wg1 PV(P1)", 1, R, c1)
        M.pv[1].add(c1)
        M.release(1, R)
        yield  # wgmma.wait_group 0: PV(P0) done
        M.p0_read = True
        M.holds("wg1 PV(P0)", 0, R, c0)
        M.pv[1].add(c0)
        M.release(0, R)
    yield from M.sync(1, "EPILOGUE")


def run(n, seed):
    rng = random.Random(seed)
    M = Model(n, rng)
    procs = {"producer": producer(M), "landing": landing(M), "wg0": wg0(M), "wg1": wg1(M)}
    live = dict(procs)
    idle = 0
    while live:
        name = rng.choice(sorted(live))
        try:
            next(live[name])
        except StopIteration:
            del live[name]
        idle += 1
        if idle > 200000:
            raise Deadlock(f"n={n} seed={seed}: stuck in {sorted(live)}")
    chunks = set(range(2 * M.pairs))  # an odd count's last pair: tile 1 without rows, still processed
    for j in (0, 1):
        if M.pv[j] != chunks:
            M.errors.append(f"warpgroup {j} accumulated chunks {sorted(M.pv[j])} of {sorted(chunks)}")
    for s in M.empty:
        if M.empty[s] != M.pairs or M.full[s] != M.pairs:
            M.errors.append(f"half {s}: {M.full[s]} uses published, {M.empty[s]} released, {M.pairs} pairs")
    pending = {b: s for b, s in M.bar.items() if s}
    if pending:
        M.errors.append(f"named barriers left with arrivals: {pending}")
    return M.errors


def main():
    bad = 0
    for n in range(10):
        for seed in range(300):
            try:
                errs = run(n, seed)
            except Deadlock as e:
                errs = [str(e)]
            if errs:
                bad += 1
                if bad <= 5:
                    print(f"n={n} seed={seed}: {errs[:3]}")
    print("schedules with a problem:", bad, "of", 10 * 300)
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
