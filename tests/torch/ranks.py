"""Runs a function on N local processes joined by torch.distributed (FileStore rendezvous),
for the chorus backend tests. A rank that raises fails the run with its traceback."""
import multiprocessing as mp
import os
import queue
import tempfile
import traceback

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  (registers "chorus")


def _rank_main(fn, backend, rank, world, store_path, args, errors):
    try:
        torch.set_num_threads(1)
        dist.init_process_group(backend, init_method=f"file://{store_path}", rank=rank, world_size=world)
        fn(rank, world, *args)
        dist.destroy_process_group()
    except BaseException:
        errors.put(f"rank {rank}:\n{traceback.format_exc()}")
        errors.close()
        errors.join_thread()  # the message must be out before the process ends
        os._exit(1)


def run(fn, world, backend="chorus", args=(), timeout=90):
    """Runs fn(rank, world, *args) on `world` processes; raises if any rank failed."""
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank_main, args=(fn, backend, r, world, store, args, errors))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        failures = []
        try:
            while True:
                failures.append(errors.get(timeout=0.5))
        except queue.Empty:
            pass
        codes = [p.exitcode for p in procs]
        if hung or failures or any(codes):
            raise AssertionError(f"{fn.__name__} on {world} ranks: exit codes {codes}, hung {hung}\n"
                                 + "\n".join(failures))
