"""Trains a small MLP with DistributedDataParallel on CPU, one process per rank, as torchrun
starts it (env:// rendezvous: torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

One host, four ranks:

    torchrun --nproc_per_node=4 examples/ddp/train.py --backend chorus

Two hosts, four ranks each (run the same line on both; host0 is where the rendezvous
listens):

    torchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d --rdzv-endpoint=host0:29500 \\
        --rdzv-id=job1 examples/ddp/train.py --backend chorus

The "chorus" backend comes from the chorus_torch package: installed (pip install ./python),
or from a build tree with PYTHONPATH=build/python. --backend gloo runs the same training
on PyTorch's gloo backend, for comparison. Each rank trains on its own shard of a fixed
synthetic regression task; DDP averages the gradients (AllReduce in buckets, overlapped
with backward).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(width, depth):
    layers, size = [], 64
    for _ in range(depth):
        layers += [torch.nn.Linear(size, width), torch.nn.ReLU()]
        size = width
    layers.append(torch.nn.Linear(size, 1))
    return torch.nn.Sequential(*layers)


def shard(rank, batch):
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(batch, 64, generator=g)
    y = x[:, :8].sum(dim=1, keepdim=True).sin()
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="chorus", help="chorus or gloo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket-cap-mb", type=float, default=25)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    parser.add_argument("--save", help="writes each rank's final parameters to SAVE.rank<r>")
    args = parser.parse_args()

    if args.backend == "chorus":
        import chorus_torch  # noqa: F401  (registers "chorus"; an installed package also does through its entry point)
    torch.set_num_threads(args.threads)
    dist.init_process_group(args.backend)  # env://, from torchrun's variables
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = DDP(make_model(args.width, args.depth), bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = shard(rank, args.batch)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    if args.save:
        torch.save([p.detach().clone() for p in model.module.parameters()], f"{args.save}.rank{rank}")
    if rank == 0:
        median_ms = 1000 * statistics.median(times[min(3, len(times) - 1):])
        print(f"{args.backend}, {world} ranks ({os.environ.get('LOCAL_WORLD_SIZE', '?')} on this host): "
              f"final loss {loss.item():.6f}, median step {median_ms:.3f} ms", flush=True)
    # Every rank is done before any tears down: gloo's rank that is still closing its pairs
    # when its peer's have gone can abort the process ("terminate called without an active
    # exception", seen once in CI's comparison run).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
