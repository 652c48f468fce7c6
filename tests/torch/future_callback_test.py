"""A future's callback may issue collectives on the same group and wait for them, as
PowerSGD's DDP comm hook does (argv: world size). Each callback below is added while its
collective still waits for the last rank, so it runs where the work completes: if that were
the group's own collective thread, the collective the callback waits for could never start
and the rank would hang. Then DDP with PowerSGD's hook trains and every rank ends with the
same parameters."""
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

import ranks


def wait_done(fut, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not fut.done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not done after {seconds} s")
        time.sleep(0.01)
    return fut.value()


def nested_collectives(rank, world):
    if rank == world - 1:
        time.sleep(1.0)  # the others add their callbacks while their all_reduce waits for this rank
    first = torch.full((4,), float(rank + 1))
    fut = dist.all_reduce(first, async_op=True).get_future()

    def then(f):
        inner = f.value()[0] * 2
        dist.all_reduce(inner)  # blocking, on the same group
        gathered = [torch.zeros(4) for _ in range(world)]
        dist.all_gather(gathered, inner)
        return torch.stack(gathered)

    chained = fut.then(then)
    total = world * (world + 1) / 2
    result = wait_done(chained, f"rank {rank}: the callback's collectives")
    assert torch.equal(result, torch.full((world, 4), 2 * total * world)), result
    # Callbacks nested two deep.
    if rank == 0:
        time.sleep(0.5)
    outer = dist.all_reduce(torch.ones(2), async_op=True).get_future()

    def level2(f):
        inner_fut = dist.all_reduce(f.value()[0].clone(), async_op=True).get_future()

        def level3(g):
            t = g.value()[0].clone()
            dist.all_reduce(t)
            return t

        return inner_fut.then(level3).wait()  # a callback waiting for another callback

    got = wait_done(outer.then(level2), f"rank {rank}: two levels of callbacks")
    assert torch.equal(got, torch.full((2,), float(world ** 3))), got
    # A callback that waits for a later work's future without issuing anything: that
    # work's completion is posted after the callback's own, and still runs.
    if rank == world - 1:
        time.sleep(0.5)
    first_work = dist.all_reduce(torch.ones(3), async_op=True)
    later = torch.full((3,), 2.0)
    later_work = dist.all_reduce(later, async_op=True)
    got = wait_done(first_work.get_future().then(lambda f: later_work.get_future().wait()[0] + f.value()[0]),
                    f"rank {rank}: a callback waiting for a later work")
    assert torch.equal(got, torch.full((3,), 3.0 * world)), got


def powersgd_ddp(rank, world):
    torch.manual_seed(0)
    # One bucket: with several, the autograd thread issues a bucket's first all_reduce while
    # the callbacks of the bucket before issue theirs, in an order that can differ between
    # ranks with any backend whose works complete on other threads (gloo too).
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)))
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=2,
                                   min_compression_rate=0.5, use_error_feedback=True, warm_start=True)
    model.register_comm_hook(state, powerSGD.powerSGD_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(rank + 1)
    for _ in range(6):
        optimizer.zero_grad()
        model(torch.randn(5, 16)).square().sum().backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(every, flat)
    for r, other in enumerate(every):
        assert torch.equal(other, flat), f"rank {rank}: parameters differ from rank {r}'s"
    assert state.iter >= 6 and len(state.p_memory_dict) > 0, "PowerSGD never compressed"


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ranks.run(nested_collectives, world, timeout=120)
    ranks.run(powersgd_ddp, world, timeout=120)
    print(f"future callbacks: nested collectives and PowerSGD DDP on {world} ranks: OK")
