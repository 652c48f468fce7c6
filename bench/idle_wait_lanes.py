#!/usr/bin/env python3
"""The CPU a rank burns while it waits, through the NCCL API alone (ctypes, no torch):
two processes, rank 1 arrives 2 s late to an ncclAllReduce of 256 KiB, and rank 0 reports
its call's wall time and its process's CPU time meanwhile. Run it with NCCL_MIN_NCHANNELS
= NCCL_MAX_NCHANNELS = 1 (one lane on the waiting thread) and 2 (two lanes on one thread).

    NCCL_MIN_NCHANNELS=2 NCCL_MAX_NCHANNELS=2 python3 bench/idle_wait_lanes.py build/libnccl.so.2
"""
import ctypes
import multiprocessing as mp
import os
import resource
import sys
import time

LATE_S = 2.0
COUNT = 1 << 16  # floats
NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def rank_main(library, rank, id_bytes, results):
    nccl = ctypes.CDLL(library)
    uid = UniqueId()
    ctypes.memmove(ctypes.byref(uid), id_bytes, ctypes.sizeof(uid))
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, rank) == 0
    data = (ctypes.c_float * COUNT)()

    def all_reduce():
        assert nccl.ncclAllReduce(data, data, ctypes.c_size_t(COUNT), NCCL_FLOAT32, NCCL_SUM, comm, None) == 0

    all_reduce()
    if rank == 1:
        time.sleep(LATE_S)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    all_reduce()
    after, ended = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    if rank == 0:
        results.put((ended - started, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)))
    nccl.ncclCommDestroy(comm)


def main():
    library = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/libnccl.so.2")
    uid = UniqueId()
    assert ctypes.CDLL(library).ncclGetUniqueId(ctypes.byref(uid)) == 0
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(library, r, bytes(uid), results)) for r in range(2)]
    for p in procs:
        p.start()
    wall, cpu = results.get(timeout=60)
    for p in procs:
        p.join()
    channels = os.environ.get("NCCL_MAX_NCHANNELS", "default")
    print(f"channels {channels}: waited {wall:.2f} s, CPU {cpu:.3f} s ({100 * cpu / wall:.1f} % of a core)")


if __name__ == "__main__":
    main()
