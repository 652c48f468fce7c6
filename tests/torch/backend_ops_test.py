"""Every operation of the chorus torch.distributed backend on N processes (argv: N),
checked against the result computed locally from every rank's (deterministic) input.
All checks run in one set of processes, one after another (rank 0 prints each one's ok)."""
import copy
import datetime
import functools
import sys
import time

import torch
import torch.distributed as dist

import ranks

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]  # int16: reduced as int32


def contribution(rank, dtype, n=7):
    """Rank `rank`'s input: small values (1..3), so a product over 4 ranks fits int8."""
    base = (torch.arange(n) + rank) % 3 + 1
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 2 == 0
    if dtype.is_complex:
        return torch.complex(base.double(), -base.double()).to(dtype)
    return base.to(dtype)


def expected(world, dtype, op):
    stacked = torch.stack([contribution(r, dtype).to(torch.complex128 if dtype.is_complex else torch.float64)
                           if dtype != torch.bool else contribution(r, dtype) for r in range(world)])
    if dtype == torch.bool:
        return {R.SUM: stacked.any(0), R.MAX: stacked.any(0), R.PRODUCT: stacked.all(0), R.MIN: stacked.all(0),
                R.BOR: stacked.any(0), R.BAND: stacked.all(0),
                R.BXOR: functools.reduce(torch.logical_xor, stacked)}[op]
    if op in (R.BAND, R.BOR, R.BXOR):
        ints = stacked.long()
        fn = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
        return functools.reduce(fn, ints).to(dtype)
    reduced = {R.SUM: lambda s: s.sum(0), R.PRODUCT: lambda s: s.prod(0), R.MIN: lambda s: s.min(0).values,
               R.MAX: lambda s: s.max(0).values, R.AVG: lambda s: s.mean(0)}[op](stacked)
    if op == R.AVG and not (dtype.is_floating_point or dtype.is_complex):
        reduced = torch.div(stacked.sum(0), world, rounding_mode="trunc")  # the exact sum, divided as NCCL
    return reduced.to(dtype)


def raises(call, failure, *fragments):
    """Runs call(): it must raise RuntimeError with every fragment in its message (else
    AssertionError naming `failure`, what the call would have done)."""
    try:
        call()
    except RuntimeError as e:
        assert all(f in str(e) for f in fragments), str(e)
    else:
        raise AssertionError(failure)


def check(actual, want, what):
    tol = dict(rtol=1e-2, atol=1e-2) if actual.dtype in (torch.float16, torch.bfloat16) else {}
    torch.testing.assert_close(actual, want, **tol, msg=lambda m: f"{what}: {m}")


def allreduce_every_type_and_op(rank, world):
    cases = [(t, op) for t in FLOATS for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG)]
    cases += [(t, op) for t in INTS for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR)]
    cases += [(torch.bool, op) for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR)]
    cases += [(torch.complex64, op) for op in (R.SUM, R.AVG)]
    for dtype, op in cases:
        t = contribution(rank, dtype)
        dist.all_reduce(t, op=op)
        check(t, expected(world, dtype, op), f"all_reduce {dtype} {op}")
    t = contribution(rank, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.5))
    check(t, 2.5 * expected(world, torch.float32, R.SUM), "all_reduce PREMUL_SUM")
    # What NCCL cannot reduce is refused at the call, naming the op and dtype (complex MAX
    # by torch.distributed itself, with a ValueError).
    for dtype, op, words in [(torch.bool, R.AVG, "AVG"), (torch.float32, R.BAND, "BAND"),
                             (torch.complex64, R.MAX, "complex"), (torch.uint16, R.SUM, "UInt16")]:
        try:
            dist.all_reduce(torch.ones(3, dtype=dtype), op=op)
        except (RuntimeError, ValueError) as e:
            assert words in str(e), f"{dtype} {op}: {e}"
        else:
            raise AssertionError(f"all_reduce of {dtype} with {op} was accepted")


def averages_like_gloo(rank, world):
    """AVG is the sum divided by the group's size: exact for integers whose sum overflows
    their type (gloo refuses integer AVG; NCCL's sum would wrap), and the float mean with
    one rounding, bit for bit what gloo gives (NCCL's 1/n before the sum is a ulp off)."""
    for dtype, base in [(torch.int8, 100), (torch.uint8, 200), (torch.int16, 30000)]:
        values = [base - 3 * r for r in range(world)]  # their sum overflows the type
        want = torch.tensor([int(sum(values) / world)], dtype=dtype)  # truncated toward zero
        t = torch.tensor([values[rank]], dtype=dtype)
        dist.all_reduce(t, op=R.AVG)
        assert torch.equal(t, want), f"all_reduce AVG {dtype}: {t} instead of {want}"
        blocks = torch.tensor([values[rank]] * world, dtype=dtype)
        got = torch.empty(1, dtype=dtype)
        dist.reduce_scatter_tensor(got, blocks, op=R.AVG)
        assert torch.equal(got, want), f"reduce_scatter_tensor AVG {dtype}: {got} instead of {want}"
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        t = torch.tensor([22.0 + 3 * rank, 0.1 * (rank + 1)], dtype=dtype)
        reference = torch.stack([torch.tensor([22.0 + 3 * r, 0.1 * (r + 1)], dtype=dtype).float() for r in range(world)])
        dist.all_reduce(t, op=R.AVG)
        assert t[0].item() == 22.0 + 1.5 * (world - 1), f"all_reduce AVG {dtype}: {t[0].item()}"
        check(t, (reference.sum(0) / world).to(dtype), f"all_reduce AVG {dtype}")
    # A reduce's AVG lands on the root only; the others keep their tensors.
    t = torch.tensor([100 - 3 * rank], dtype=torch.int8)
    dist.reduce(t, dst=0, op=R.AVG)
    want = int(sum(100 - 3 * r for r in range(world)) / world) if rank == 0 else 100 - 3 * rank
    assert t.item() == want, f"reduce AVG int8 on rank {rank}: {t.item()} instead of {want}"


def rooted_collectives(rank, world):
    root = world - 1
    for op in (R.SUM, R.MAX, R.BOR):
        t = contribution(rank, torch.int32)
        dist.reduce(t, dst=root, op=op)
        want = expected(world, torch.int32, op) if rank == root else contribution(rank, torch.int32)
        check(t, want, f"reduce {op} (root {root})")
    t = torch.arange(6, dtype=torch.int16) * (rank + 1)  # int16: broadcast moves bytes of any dtype
    dist.broadcast(t, src=root)
    check(t, torch.arange(6, dtype=torch.int16) * world, "broadcast int16")
    big = torch.full((300_000,), float(rank))
    dist.broadcast(big, src=0)
    check(big, torch.zeros(300_000), "broadcast 1.2 MB")


def gathers_and_scatters(rank, world):
    out = [torch.empty(5) for _ in range(world)]
    dist.all_gather(out, torch.full((5,), float(rank)))
    for r in range(world):
        check(out[r], torch.full((5,), float(r)), f"all_gather block {r}")
    flat = torch.empty(world * 4, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, torch.arange(4, dtype=torch.float64) + 10 * rank)
    check(flat, torch.cat([torch.arange(4, dtype=torch.float64) + 10 * r for r in range(world)]), "all_gather_into_tensor")
    inputs = [torch.full((3,), float(rank * world + r)) for r in range(world)]
    got = torch.empty(3)
    dist.reduce_scatter(got, inputs)
    check(got, torch.full((3,), float(sum(s * world + rank for s in range(world)))), "reduce_scatter")
    flat_in = torch.arange(world * 2, dtype=torch.float32) * (rank + 1)
    got = torch.empty(2)
    dist.reduce_scatter_tensor(got, flat_in, op=R.MAX)
    check(got, (torch.arange(world * 2, dtype=torch.float32) * world)[rank * 2:rank * 2 + 2], "reduce_scatter_tensor MAX")
    # Bitwise ops, which NCCL lacks: an all-to-all, then each rank combines its blocks.
    bits = torch.tensor([1 << ((rank * world + r) % 60) | 1 for r in range(world * 2)], dtype=torch.int64)
    got = torch.empty(2, dtype=torch.int64)
    dist.reduce_scatter_tensor(got, bits, op=R.BOR)
    want = [functools.reduce(lambda a, b: a | b, [1 << ((s * world + i) % 60) | 1 for s in range(world)])
            for i in range(rank * 2, rank * 2 + 2)]
    check(got, torch.tensor(want, dtype=torch.int64), "reduce_scatter_tensor BOR")
    flags = [torch.tensor([True, bool((rank + r) % 2)]) for r in range(world)]
    got = torch.empty(2, dtype=torch.bool)
    dist.reduce_scatter(got, flags, op=R.BAND)
    check(got, torch.tensor([True, world == 1 and bool(rank % 2)]), "reduce_scatter BAND on bool")
    root = world - 1
    gathered = [torch.empty(2, dtype=torch.int64) for _ in range(world)] if rank == root else None
    dist.gather(torch.tensor([rank, -rank]), gathered, dst=root)
    if rank == root:
        for r in range(world):
            check(gathered[r], torch.tensor([r, -r]), f"gather block {r}")
    # gather_single: one flat (or stacked) tensor at the root; the others pass none.
    whole = torch.full((world, 2, 3), -1.0) if rank == root else None
    dist.gather_single(torch.full((2, 3), float(rank) + 0.25), whole, dst=root)
    if rank == root:
        check(whole, torch.stack([torch.full((2, 3), float(r) + 0.25) for r in range(world)]), "gather_single")
        raises(lambda: dist.gather_single(torch.ones(2), torch.empty(2 * world + 1), dst=root),
               "gather_single into a wrong-sized output succeeded", "gather_single", f"expected world size {world} x 2")
        raises(lambda: dist.gather_single(torch.ones(2), torch.empty(2, 2 * world)[:, ::2], dst=root),
               "gather_single into a non-contiguous output succeeded", "must be contiguous")
    flat = torch.empty(world * 3, dtype=torch.int64) if rank == root else None
    dist.gather_into_tensor(torch.arange(3) + rank, flat, dst=root)
    if rank == root:
        check(flat, torch.cat([torch.arange(3) + r for r in range(world)]), "gather_into_tensor")
    got = torch.empty(3)
    pieces = [torch.full((3,), float(r) + 0.5) for r in range(world)] if rank == 0 else None
    dist.scatter(got, pieces, src=0)
    check(got, torch.full((3,), float(rank) + 0.5), "scatter")
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})  # rides on all_gather of byte tensors
    assert objects == [{"rank": r} for r in range(world)], objects


def all_to_all_and_p2p(rank, world):
    inp = torch.arange(world * 2, dtype=torch.int64) + 100 * rank
    out = torch.empty(world * 2, dtype=torch.int64)
    dist.all_to_all_single(out, inp)
    check(out, torch.cat([torch.arange(2) + 2 * rank + 100 * s for s in range(world)]), "all_to_all_single even")
    # Uneven: rank s sends (s + d + 1) rows to rank d.
    send_splits = [rank + d + 1 for d in range(world)]
    recv_splits = [s + rank + 1 for s in range(world)]
    inp = torch.cat([torch.full((n, 2), float(rank * 10 + d)) for d, n in enumerate(send_splits)])
    out = torch.empty(sum(recv_splits), 2)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    check(out, torch.cat([torch.full((n, 2), float(s * 10 + rank)) for s, n in enumerate(recv_splits)]), "all_to_all_single uneven")
    outs = [torch.empty(d + 1) for d in range(world)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(rank * world + d)) for d in range(world)])
    for s in range(world):
        check(outs[s], torch.full((s + 1,), float(s * world + rank)), f"all_to_all from {s}")
    if world > 1:
        nxt, prev = (rank + 1) % world, (rank - 1) % world
        got = torch.empty(1000)
        works = [dist.isend(torch.full((1000,), float(rank)), nxt), dist.irecv(got, prev)]
        for w in works:
            w.wait()
        check(got, torch.full((1000,), float(prev)), "isend/irecv ring")
        assert works[1].source_rank() == prev, f"irecv's source_rank() is {works[1].source_rank()}, not {prev}"
    dist.barrier()


def async_work_and_errors(rank, world):
    t = torch.ones(1 << 16)
    work = dist.all_reduce(t, async_op=True)
    result = work.get_future().wait()
    assert work.is_completed()
    check(result[0], torch.full((1 << 16,), float(world)), "future's tensor")
    # After wait() or is_completed(), the future holds the result too (as gloo's): its value()
    # must not find it still pending on the thread that completes futures.
    for i in range(200):
        t = torch.full((4,), float(i))
        work = dist.all_reduce(t, async_op=True)
        if i % 2:
            work.wait()
        else:
            while not work.is_completed():
                pass
        assert work.get_future().done(), f"round {i}: the work completed before its future"
        check(work.get_future().value()[0], torch.full((4,), float(i * world)), f"round {i}: future's value")
    # An argument only Chorus checks: its message arrives as the Python exception.
    raises(lambda: dist.broadcast(torch.ones(2), src=world + 3),
           "broadcast from a root outside the group succeeded", "ncclBroadcast", f"root {world + 3} is out of range")
    # A bitwise reduce gathers, so no NCCL call checks its root: the backend does.
    raises(lambda: dist.reduce(torch.ones(2, dtype=torch.int32), dst=world + 3, op=R.BOR),
           "a bitwise reduce to a root outside the group succeeded", f"root {world + 3} is out of range")
    # A tensor whose elements share memory cannot take a result: refused at the call.
    raises(lambda: dist.all_reduce(torch.ones(1).expand(4)), "all_reduce into an expanded tensor was accepted",
           "share memory")
    raises(lambda: dist.broadcast(torch.ones(1).expand(4), src=0), "broadcast into an expanded tensor was accepted",
           "share memory")
    flat = torch.empty(2 * world)
    dist.all_gather_into_tensor(flat, torch.full((1,), float(rank)).expand(2))  # one only read is fine
    check(flat, torch.arange(world, dtype=torch.float32).repeat_interleave(2), "all_gather of an expanded input")
    t = torch.ones(3)
    dist.all_reduce(t)  # the group still works after the errors
    check(t, torch.full((3,), float(world)), "all_reduce after errors")


def timeout_releases_a_wait(rank, world):
    """A second group with a 2 s timeout: rank 0 calls all_reduce on it alone. Its wait
    ends with the timeout's message instead of hanging, and the default group still works."""
    group = dist.new_group(backend="chorus", timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        began = time.monotonic()
        raises(lambda: dist.all_reduce(torch.ones(8), group=group),
               "an all_reduce that no other rank joined completed", "allreduce: Timed out after 2000 ms")
        assert time.monotonic() - began < 30, "the timeout took far longer than 2 s"
    # dist.set_timeout shortens a group's timeout likewise.
    group = dist.new_group(backend="chorus")
    dist.set_timeout(datetime.timedelta(seconds=1), group)
    if rank == 0:
        raises(lambda: dist.all_reduce(torch.ones(8), group=group),
               "an all_reduce that no other rank joined completed (set_timeout)", "allreduce: Timed out after 1000 ms")
    dist.barrier()  # the default group is untouched
    t = torch.ones(3)
    dist.all_reduce(t)
    check(t, torch.full((3,), float(world)), "all_reduce on the default group after the timeout")


def sparse_entries(rank, world, shape):
    """Rank `rank`'s sparse COO tensor of `shape` (sparse in the first two dims): rank r holds
    r + 1 entries (none on the last rank), some at indices other ranks use too, uncoalesced."""
    nnz = 0 if rank == world - 1 else rank + 1
    rows = torch.tensor([(rank + k) % shape[0] for k in range(nnz)] + [rank % shape[0]] * (nnz > 0))
    cols = torch.tensor([(2 * k) % shape[1] for k in range(nnz)] + [0] * (nnz > 0))
    values = torch.arange(1, rows.numel() + 1, dtype=torch.float64).reshape(-1, *([1] * (len(shape) - 2)))
    values = values.expand(rows.numel(), *shape[2:]).clone() * (rank + 1)
    return torch.sparse_coo_tensor(torch.stack([rows, cols]).reshape(2, -1), values, shape, check_invariants=True)


def sparse_all_reduce(rank, world):
    """all_reduce of sparse COO tensors (SUM, as gloo): different nonzero counts per rank, an
    empty one, hybrid tensors with a dense dimension; the result is the coalesced sum."""
    for shape in ((5, 4), (6, 3, 2)):
        t = sparse_entries(rank, world, shape)
        work = dist.all_reduce(t, async_op=True)
        result = work.get_future().wait()[0]
        want = sum(sparse_entries(r, world, shape).to_dense() for r in range(world))
        assert t.is_sparse and t.is_coalesced(), "the result is not a coalesced sparse tensor"
        check(t.to_dense(), want, f"sparse all_reduce of {shape}")
        check(result.to_dense(), want, "the sparse all_reduce's future")
    t = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (3, 3))
    dist.all_reduce(t)  # nothing held anywhere
    check(t.to_dense(), torch.zeros(3, 3), "sparse all_reduce of empty tensors")
    raises(lambda: dist.all_reduce(sparse_entries(rank, world, (5, 4)), op=R.MAX),
           "a sparse all_reduce with MAX was accepted", "only works with ReduceOp.SUM")
    # The ranks' shapes, then their dtypes, differ: every rank's wait fails, naming both.
    raises(lambda: dist.all_reduce(sparse_entries(rank, world, (5, 4) if rank == 0 else (5, 5))),
           "a sparse all_reduce of different shapes succeeded", "sizes [5, 4] with 2 sparse dims", "sizes [5, 5]")
    mixed = sparse_entries(rank, world, (5, 4)).to(torch.float32 if rank == 0 else torch.float64)
    raises(lambda: dist.all_reduce(mixed), "a sparse all_reduce of different dtypes succeeded",
           "Float sizes [5, 4]", "Double sizes [5, 4]")
    t = torch.ones(3)
    dist.all_reduce(t)  # the group still works after the mismatches
    check(t, torch.full((3,), float(world)), "all_reduce after a sparse mismatch")


def ddp_with_sparse_gradients(rank, world):
    """DDP over an EmbeddingBag with sparse gradients (what gloo serves on CPUs): three steps
    end with the parameters one process gets from the whole batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(50, 4, mode="sum", sparse=True), torch.nn.Linear(4, 1))
    whole = copy.deepcopy(model)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt, whole_opt = torch.optim.SGD(ddp.parameters(), lr=0.1), torch.optim.SGD(whole.parameters(), lr=0.1)
    for step in range(3):
        batches = [torch.randint(0, 50, (8, 3), generator=torch.Generator().manual_seed(100 * step + r))
                   for r in range(world)]
        opt.zero_grad()
        ddp(batches[rank]).sum().backward()
        assert model[0].weight.grad.is_sparse
        opt.step()
        whole_opt.zero_grad()
        (sum(whole(b).sum() for b in batches) / world).backward()
        whole_opt.step()
    for mine, want in zip(model.parameters(), whole.parameters()):
        check(mine.detach(), want.detach(), "DDP with sparse gradients")


CHECKS = (allreduce_every_type_and_op, averages_like_gloo, sparse_all_reduce, ddp_with_sparse_gradients, rooted_collectives,
          gathers_and_scatters, all_to_all_and_p2p, async_work_and_errors, timeout_releases_a_wait)


def every_check(rank, world):
    for fn in CHECKS:
        fn(rank, world)
        if rank == 0:
            print(f"ok: {fn.__name__} on {world} ranks", flush=True)


def main(world):
    ranks.run(every_check, world, timeout=240)


if __name__ == "__main__":
    main(int(sys.argv[1]))
