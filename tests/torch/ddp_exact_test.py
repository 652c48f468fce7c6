"""DDP with known gradients (argv: world size): after training, every parameter on every
rank is exactly (bit for bit) what the arithmetic says, with chorus and with gloo.

The model is a sum of independent linear layers, loss = sum_i <c_i, W_i x_i + b_i>, so the
gradient of W_i is c_i x_i^T and of b_i is c_i times the batch size whatever the weights
are. Each rank's inputs are multiples of 12, so DDP's division by the world size (2, 3
or 4) is exact, and every sum of the averaged gradients is an exact float32 integer in
any order: no tolerance. Tiny buckets put every parameter in a bucket of its own."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ranks

LAYERS, IN, OUT, BATCH, STEPS, LR = 5, 6, 4, 3, 3, 0.5


def c_of(i):
    return torch.arange(OUT, dtype=torch.float32) - i


def inputs(rank, step, i):
    """Integer inputs, multiples of 12, different per rank, step and layer."""
    g = torch.arange(BATCH * IN, dtype=torch.float32).view(BATCH, IN)
    return 12 * ((g * (rank + 1) + 3 * step + i) % 7 - 3)


class Branches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(IN, OUT) for _ in range(LAYERS))
        with torch.no_grad():
            for i, layer in enumerate(self.layers):
                layer.weight.fill_(float(i))
                layer.bias.fill_(-float(i))

    def forward(self, xs):
        return sum((layer(x) * c_of(i)).sum() for i, (layer, x) in enumerate(zip(self.layers, xs)))


def expected(world):
    """Parameters after STEPS of SGD, from the gradients' formula, in float64."""
    params = []
    for i in range(LAYERS):
        weight = torch.full((OUT, IN), float(i), dtype=torch.float64)
        bias = torch.full((OUT,), -float(i), dtype=torch.float64)
        for step in range(STEPS):
            grads = [c_of(i).double()[:, None] * inputs(r, step, i).double().sum(0)[None, :] for r in range(world)]
            weight -= LR * sum(grads) / world
            bias -= LR * c_of(i).double() * BATCH
        params += [weight, bias]
    return params


def train(rank, group):
    torch.manual_seed(0)
    model = DDP(Branches(), process_group=group, bucket_cap_mb=1e-5)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        optimizer.zero_grad()
        model([inputs(rank, step, i) for i in range(LAYERS)]).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.module.parameters()]


def check(rank, world):
    gloo = dist.new_group(backend="gloo")
    want = expected(world)
    for name, group in (("chorus", None), ("gloo", gloo)):
        got = train(rank, group)
        for k, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g.double(), w), f"{name}, rank {rank}, parameter {k}: {g} != {w}"
            assert not torch.equal(g, train_start(k)), f"{name}: parameter {k} did not train"
    if rank == 0:
        print(f"ok: DDP on {world} ranks: chorus and gloo end with the exact parameters", flush=True)


def train_start(k):
    i = k // 2
    return torch.full((OUT, IN) if k % 2 == 0 else (OUT,), float(i) if k % 2 == 0 else -float(i))


if __name__ == "__main__":
    ranks.run(check, int(sys.argv[1]), timeout=240)
