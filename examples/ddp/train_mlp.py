"""Trains a small MLP with DistributedDataParallel on N local CPU processes.

    PYTHONPATH=build/python python3 examples/ddp/train_mlp.py --backend chorus --world-size 4

Each rank trains on its own shard of a fixed synthetic regression task; DDP averages
the gradients (AllReduce in buckets, overlapped with backward). --save writes the final
parameters of every rank, --report prints the median step time.
"""
import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # noqa: F401  (registers the "chorus" backend)
from train import make_model, shard  # the model and data of the torchrun example, next to this file


def train(rank, args, store, results):
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, init_method=f"file://{store}", rank=rank, world_size=args.world_size)
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = DDP(make_model(args.width, args.depth), bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = shard(rank, args.batch)
    times = []
    if args.comm_only:  # the backend alone: one AllReduce of all gradients per step
        flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
        for _ in range(args.steps):
            start = time.perf_counter()
            dist.all_reduce(flat)
            times.append(time.perf_counter() - start)
        results.put((rank, 0.0, times))
        dist.destroy_process_group()
        return
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    if args.save:
        torch.save([p.detach().clone() for p in model.module.parameters()], f"{args.save}.rank{rank}")
    results.put((rank, loss.item(), times))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="chorus", help="chorus or gloo")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the reported time")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket-cap-mb", type=float, default=25)
    parser.add_argument("--save", help="writes each rank's final parameters to SAVE.rank<r>")
    parser.add_argument("--report", action="store_true", help="prints the median step time")
    parser.add_argument("--comm-only", action="store_true",
                        help="times one AllReduce of the model's gradients per step, without training")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=train, args=(r, args, store, results)) for r in range(args.world_size)]
        for p in procs:
            p.start()
        outcome = sorted(results.get(timeout=600) for _ in procs)
        for p in procs:
            p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
    rank0_loss = outcome[0][1]
    print(f"{args.backend}, {args.world_size} ranks: final loss (rank 0) {rank0_loss:.6f}")
    if args.report:
        # A step is as slow as its slowest rank: per step, the maximum over ranks.
        steps = [max(times[i] for _, _, times in outcome) for i in range(args.warmup, args.steps)]
        print(f"step_time_ms {args.backend} {args.world_size} {1000 * statistics.median(steps):.3f}")


if __name__ == "__main__":
    main()
