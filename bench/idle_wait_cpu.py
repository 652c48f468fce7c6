#!/usr/bin/env python3
"""The CPU a rank burns while it waits: rank 1 of the chorus backend arrives 2 s late to an
all_reduce, and rank 0 reports the wall time of its call and the CPU time its process used
meanwhile (every thread: Python's, the group's queue, Chorus' executor).

    PYTHONPATH=build/python .venv/bin/python bench/idle_wait_cpu.py
"""
import os
import resource
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus_torch  # noqa: F401  (registers "chorus")

LATE_S = 2.0


def rank_main(rank, world, store, results):
    dist.init_process_group("chorus", init_method=f"file://{store}", rank=rank, world_size=world)
    t = torch.ones(1 << 20)
    dist.all_reduce(t)
    dist.barrier()
    if rank == 1:
        time.sleep(LATE_S)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    dist.all_reduce(t)
    after, ended = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    if rank == 0:
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        results.put((ended - started, cpu))
    dist.destroy_process_group()


def main():
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=rank_main, args=(r, 2, os.path.join(tmp, "store"), results)) for r in range(2)]
        for p in procs:
            p.start()
        wall, cpu = results.get(timeout=120)
        for p in procs:
            p.join()
    print(f"waited {wall:.2f} s, CPU {cpu:.3f} s ({100 * cpu / wall:.1f} % of a core)")


if __name__ == "__main__":
    main()
