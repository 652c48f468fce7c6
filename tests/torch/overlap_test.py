"""DDP's gradient buckets are all-reduced while backward is still running.

Two ranks; rank 1 holds its backward back at the start (1.5 s), so rank 0's first bucket
cannot complete before then, and both spend 0.5 s in backward below the upper layers
(margins of a second or so: a loaded 2-core machine can starve a thread for tenths of one).
Rank 0 records when backward computes its last gradient (the first layer's weight). The bucket's AllReduce must have started before that moment
and finished after it: backward went on while the AllReduce was in flight."""
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch
import ranks


class Delay(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


class Slow(torch.nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        return Delay.apply(x, self.seconds)


def check_overlap(rank, world):
    torch.manual_seed(0)
    # The Slow layer keeps backward busy for 0.5 s after the upper layers' bucket is ready.
    net = torch.nn.Sequential(torch.nn.Linear(64, 512), Slow(0.5), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                              torch.nn.ReLU(), torch.nn.Linear(512, 1))
    last_grad_at = []
    net[0].weight.register_hook(lambda g: last_grad_at.append(time.monotonic()))
    model = DDP(net, bucket_cap_mb=0.1)
    x = torch.randn(32, 64)
    for step in range(3):
        model.zero_grad()
        out = Delay.apply(model(x), 1.5 if rank == 1 else 0.0)
        began = time.monotonic()
        out.sum().backward()
    if rank != 0:
        return
    buckets = [t for t in chorus_torch.collective_timings() if t[0] == "allreduce" and t[1] >= began]
    assert len(buckets) >= 2, f"expected several bucket AllReduces in the last step, got {buckets}"
    _, queued, started, finished, ok = buckets[0]
    last = last_grad_at[-1]
    assert ok
    assert started < last, f"the first bucket's AllReduce started {started - last:+.4f} s after backward's last gradient"
    assert finished > last, (f"the first bucket's AllReduce finished {finished - last:+.4f} s before backward's last "
                             "gradient: nothing overlapped")
    print(f"ok: first bucket queued {queued - began:.4f} s into backward, last gradient at {last - began:.4f} s, "
          f"AllReduce done at {finished - began:.4f} s", flush=True)


if __name__ == "__main__":
    ranks.run(check_overlap, 2)
