#!/usr/bin/env python3
"""seesaw_protocol_model.py — the synchronisation of heads_as_m's seesaw consumers
(src/attention/heads_as_m.cu: hm_consume_seesaw, hm_seesaw_other_pv, hm_produce_bf16) replayed as
three processes — the producer and the two consumer warpgroups, each a unit of 128 threads — under
random schedules, on the CPU. Checked on every schedule, for chunk counts 0..9:

  - no deadlock (every process finishes);
  - a named barrier phase is completed by one arrival of each warpgroup, never two of one (the
    hardware counts threads: a second bar.arrive of the same warpgroup before the other's bar.sync
    would complete the phase without it);
  - every read of the shared m / alpha / P buffers sees the chunk it is meant to (the value the
    barrier chain promises), and no write overwrites a value its reader has not read yet;
  - a tile is refilled only after both warpgroups released it, and read only while it holds the
    chunk being processed;
  - at the end, each warpgroup has accumulated every chunk on its half, every tile use was released
    by both, and no named barrier is left with a pending arrival.

It models the order of the kernel's steps, not their data; keep it in step with the kernel.

    python3 dev/seesaw_protocol_model.py
"""
import random


class Deadlock(Exception):
    pass


class Model:
    def __init__(self, n, rng):
        self.n = n
        self.rng = rng
        self.bar = {}  # named barrier id -> set of warpgroups arrived in the current phase
        self.bar_done = {}  # id -> completed phases
        self.full = [0, 0]  # producer arrivals on full[b] (completed phases)
        self.empty = [0, 0]  # consumer arrivals on empty[b] (each phase needs 2)
        self.tile = [None, None]  # chunk held by tile b
        self.m = None  # chunk whose m / alpha the buffers hold
        self.m_read = True  # the reader has read it
        self.p = None  # chunk whose P the buffer holds
        self.p_read = True
        self.errors = []
        self.pv = [set(), set()]  # chunks each warpgroup has accumulated on its O half

    # ---- named barriers: bar.arrive (writer) / bar.sync (reader), one warpgroup each side ----
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


def producer(M):
    for c in range(M.n):
        b = c & 1
        # ring_wait_empty: the stage's previous use (chunk c - 2) released by both warpgroups
        need = (c >> 1)  # completed empty phases before this use
        while M.empty[b] < 2 * need:
            yield
        if M.tile[b] is not None and M.tile[b] != c - 2:
            M.errors.append(f"tile {b} refilled for chunk {c} while it holds {M.tile[b]}")
        M.tile[b] = c
        M.full[b] += 1
        yield


def wait_full(M, c):
    b = c & 1
    while M.full[b] < (c >> 1) + 1:
        yield
    if M.tile[b] != c:
        M.errors.append(f"chunk {c}: tile {b} holds {M.tile[b]}")


def other_pv(M, j, c):
    """hm_seesaw_other_pv: the other warpgroup's chunk c"""
    yield from wait_full(M, c)
    yield from M.sync(j, f"P{1 - j}->{j}")
    if M.p != c:
        M.errors.append(f"warpgroup {j}: P buffer holds {M.p}, PV of chunk {c} needs it")
    M.p_read = True
    yield  # the PV
    M.pv[j].add(c)
    if M.tile[c & 1] != c:
        M.errors.append(f"warpgroup {j}: tile of chunk {c} refilled during its PV")
    M.empty[c & 1] += 1


def consumer(M, j):
    for c in range(j, M.n, 2):
        yield from wait_full(M, c)
        yield  # QK(c)
        if c > 0:
            yield from M.sync(j, f"M{1 - j}->{j}")
            if M.m != c - 1:
                M.errors.append(f"warpgroup {j}, chunk {c}: m buffer holds chunk {M.m}, expected {c - 1}")
            M.m_read = True
        yield  # softmax(c)
        if not M.m_read and M.m is not None:
            M.errors.append(f"warpgroup {j}: m of chunk {c} overwrites chunk {M.m}'s before it was read")
        M.m, M.m_read = c, False
        M.arrive(j, f"M{j}->{1 - j}")
        if c > 0:
            yield from other_pv(M, j, c - 1)
        if not M.p_read and M.p is not None:
            M.errors.append(f"warpgroup {j}: P of chunk {c} overwrites chunk {M.p}'s before it was read")
        M.p, M.p_read = c, False
        M.arrive(j, f"P{j}->{1 - j}")
        yield  # PV(c), P from registers
        M.pv[j].add(c)
        if M.tile[c & 1] != c:
            M.errors.append(f"warpgroup {j}: tile of chunk {c} refilled during its own PV")
        M.empty[c & 1] += 1
    if M.n > 0 and ((M.n - 1) & 1) != j:  # the other's last chunk
        c = M.n - 1
        yield from M.sync(j, f"M{1 - j}->{j}")
        if M.m != c:
            M.errors.append(f"warpgroup {j}, tail: m buffer holds chunk {M.m}, expected {c}")
        M.m_read = True
        yield from other_pv(M, j, c)
    # the epilogue barriers (both warpgroups sync)
    yield from M.sync(j, "EPILOGUE")


def run(n, seed):
    rng = random.Random(seed)
    M = Model(n, rng)
    procs = {"producer": producer(M), "wg0": consumer(M, 0), "wg1": consumer(M, 1)}
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
    for j in (0, 1):
        if M.pv[j] != set(range(n)):
            M.errors.append(f"warpgroup {j} accumulated chunks {sorted(M.pv[j])} of {n}")
    if sum(M.empty) != 2 * n:
        M.errors.append(f"{sum(M.empty)} tile releases for {n} chunks")
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
