"""What PyTorch 2.x's backend API asks beyond plain collectives, on N processes (argv: N),
each result checked exactly: sends and receives in flight at once in any order,
batch_isend_irecv, the coalesced ops (startCoalescing/endCoalescing, *_coalesced),
monitored_barrier naming the ranks that did not arrive, non-contiguous tensors, and
sequence numbers. All checks run in one set of processes, one after another."""
import datetime
import sys

import torch
import torch.distributed as dist

import ranks

CPU = torch.device("cpu")
MB4 = 4 << 20  # bytes: above what a FIFO holds, so a send waits for its receive


def fill(n, value, dtype=torch.float32):
    return torch.full((n,), value, dtype=dtype)


def irecv_before_isend(rank, world):
    """Every rank posts its receives before its sends; with one queue for everything this
    deadlocked (each rank waited in its receive)."""
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(MB4, dtype=torch.uint8)
    recv = dist.irecv(got, prev)
    send = dist.isend(torch.full((MB4,), rank + 1, dtype=torch.uint8), nxt)
    recv.wait()
    send.wait()
    assert torch.equal(got, torch.full((MB4,), prev + 1, dtype=torch.uint8)), "irecv before isend: wrong data"
    # Both directions between every pair, receive first.
    gots = {p: torch.empty(1000, dtype=torch.int64) for p in range(world) if p != rank}
    works = [dist.irecv(gots[p], p) for p in gots]
    works += [dist.isend(torch.arange(1000) + 1000 * rank + p, p) for p in gots]
    for w in works:
        w.wait()
    for p, t in gots.items():
        assert torch.equal(t, torch.arange(1000) + 1000 * p + rank), f"pairwise irecv from {p}"


def isend_then_irecv_fresh_group(rank, world):
    """isend then irecv on every rank, 4 MB, on a group whose first calls these are."""
    group = dist.new_group(backend="chorus")
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(MB4 // 4, dtype=torch.float32)
    send = dist.isend(fill(MB4 // 4, float(rank)), nxt, group=group)
    recv = dist.irecv(got, prev, group=group)
    send.wait()
    recv.wait()
    assert torch.equal(got, fill(MB4 // 4, float(prev))), "isend then irecv, 4 MB"
    dist.destroy_process_group(group)


def batch_isend_irecv_recv_first(rank, world):
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    from_prev, from_next = torch.empty(MB4 // 8, dtype=torch.float64), torch.empty(5, dtype=torch.int32)
    ops = [dist.P2POp(dist.irecv, from_prev, prev), dist.P2POp(dist.irecv, from_next, nxt),
           dist.P2POp(dist.isend, torch.full((MB4 // 8,), rank + 0.5, dtype=torch.float64), nxt),
           dist.P2POp(dist.isend, torch.arange(5, dtype=torch.int32) * rank, prev)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    assert torch.equal(from_prev, torch.full((MB4 // 8,), prev + 0.5, dtype=torch.float64)), "batch: from prev"
    assert torch.equal(from_next, torch.arange(5, dtype=torch.int32) * nxt), "batch: from next"


def many_in_flight_match_in_order(rank, world):
    """Five sends to one peer before its receives are posted (waited in reverse): messages
    between two ranks match in order; a collective completes while a receive is pending."""
    if rank == 0:
        works = [dist.isend(fill(300, float(i)), 1) for i in range(5)]
    elif rank == 1:
        gots = [torch.empty(300) for _ in range(5)]
        works = [dist.irecv(g, 0) for g in gots]
    else:
        works = []
    for w in reversed(works):
        w.wait()
    if rank == 1:
        for i, g in enumerate(gots):
            assert torch.equal(g, fill(300, float(i))), f"message {i} out of order"
    # Rank 1's receive waits while every rank all-reduces; rank 0 sends after the all_reduce.
    pending = dist.irecv(got := torch.empty(3), 0) if rank == 1 else None
    t = fill(4, 1.0)
    dist.all_reduce(t)
    assert torch.equal(t, fill(4, float(world))), "all_reduce with a receive pending"
    if rank == 0:
        dist.send(fill(3, 7.0), 1)
    if rank == 1:
        pending.wait()
        assert torch.equal(got, fill(3, 7.0)), "receive pending across a collective"
    # Messages match in order per tag, as gloo's: a receive of tag 9 takes the send of tag
    # 9 though the send of tag 5 came first; untagged ones keep their own order.
    if rank == 0:
        works = [dist.isend(fill(2, 1.0), 1, tag=5), dist.isend(fill(2, 2.0), 1, tag=9),
                 dist.isend(fill(2, 3.0), 1), dist.isend(fill(2, 4.0), 1, tag=5)]
        for w in works:
            w.wait()
    elif rank == 1:
        a, b, c, d = (torch.empty(2) for _ in range(4))
        dist.recv(a, 0, tag=9)
        dist.recv(b, 0, tag=5)
        dist.recv(c, 0)
        dist.recv(d, 0, tag=5)
        assert [t[0].item() for t in (a, b, c, d)] == [2.0, 1.0, 3.0, 4.0], f"tagged messages: {a} {b} {c} {d}"


def p2p_errors(rank, world):
    # Each tag is a channel: a rank keeps 64 tags per peer and direction and refuses one
    # more at the call, naming it (the messages before it arrive whole). On a new group,
    # which has used no tags yet.
    tags = dist.new_group(backend="chorus")
    if rank in (0, 1):
        got = torch.empty(2)
        for tag in range(100, 164):
            if rank == 0:
                dist.send(fill(2, float(tag)), 1, tag=tag, group=tags)
            else:
                dist.recv(got, 0, tag=tag, group=tags)
                assert torch.equal(got, fill(2, float(tag))), f"tag {tag}"
        try:
            dist.send(got, 1, tag=164, group=tags) if rank == 0 else dist.recv(got, 0, tag=164, group=tags)
        except RuntimeError as e:
            assert "with tag 164" in str(e) and "64 other tags" in str(e), str(e)
        else:
            raise AssertionError("a 65th tag was accepted")
    dist.destroy_process_group(tags)
    group = dist.group.WORLD
    for call, words in [(lambda: group.send([torch.ones(2)], world + 2, 0), f"destination rank {world + 2} is out"),
                        (lambda: group.recv_anysource([torch.ones(2)], 0), "recv from any source is not supported")]:
        try:
            call()
        except RuntimeError as e:
            assert words in str(e), str(e)
        else:
            raise AssertionError(f"accepted: {words}")


def coalesced_ops(rank, world):
    # all_reduce in a coalescing manager: one allreduce_coalesced, one NCCL group. (The
    # manager applies the first call's op to all of them.)
    a, b = fill(5, float(rank + 1)), torch.arange(4, dtype=torch.int64) * (rank + 1)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    total = world * (world + 1) // 2
    assert torch.equal(a, fill(5, float(total))), "coalesced all_reduce (float)"
    assert torch.equal(b, torch.arange(4, dtype=torch.int64) * total), "coalesced all_reduce (int64)"
    # all_gather_into_tensor and reduce_scatter_tensor, coalesced.
    outs = [torch.empty(world * 3), torch.empty(world * 2, dtype=torch.int32)]
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], fill(3, float(rank)))
        dist.all_gather_into_tensor(outs[1], torch.full((2,), rank * 10, dtype=torch.int32))
    cm.wait()
    assert torch.equal(outs[0], torch.arange(world).repeat_interleave(3).float()), "coalesced all_gather_into_tensor"
    assert torch.equal(outs[1], (torch.arange(world) * 10).repeat_interleave(2).int()), "coalesced all_gather (int)"
    got = [torch.empty(2), torch.empty(1)]
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.reduce_scatter_tensor(got[0], torch.arange(world * 2, dtype=torch.float32) + rank)
        dist.reduce_scatter_tensor(got[1], torch.arange(world, dtype=torch.float32) * (rank + 1))
    cm.wait()
    sum_ranks = world * (world - 1) // 2
    assert torch.equal(got[0], torch.arange(2 * rank, 2 * rank + 2).float() * world + sum_ranks), "coalesced RS"
    assert torch.equal(got[1], torch.tensor([float(rank * total)])), "coalesced RS (second)"
    # The old names.
    a, b = fill(3, 1.0), fill(2, 2.0)
    dist.all_reduce_coalesced([a, b])
    assert torch.equal(a, fill(3, float(world))) and torch.equal(b, fill(2, 2.0 * world)), "all_reduce_coalesced"
    inputs = [fill(2, float(rank)), torch.arange(6, dtype=torch.float32).view(2, 3) * rank]
    output_lists = [[torch.empty(2), torch.empty(2, 3)] for _ in range(world)]
    dist.all_gather_coalesced(output_lists, inputs)
    for r in range(world):
        assert torch.equal(output_lists[r][0], fill(2, float(r))), f"all_gather_coalesced [{r}][0]"
        assert torch.equal(output_lists[r][1], torch.arange(6, dtype=torch.float32).view(2, 3) * r), \
            f"all_gather_coalesced [{r}][1]"
    # startCoalescing/endCoalescing through the backend: different collectives, one group.
    group = dist.group.WORLD
    group._start_coalescing(CPU)
    x, y = fill(4, float(rank)), fill(3, float(rank))
    bopts = dist.BroadcastOptions()
    bopts.rootRank = world - 1
    group.allreduce([x])
    group.broadcast([y], bopts)
    work = group._end_coalescing(CPU)
    work.wait()
    assert torch.equal(x, fill(4, float(sum_ranks))), "start/endCoalescing: allreduce"
    assert torch.equal(y, fill(3, float(world - 1))), "start/endCoalescing: broadcast"


def coalescing_block_left_open(rank, world):
    """A sync collective inside a block raises (its wait would never return: the block's
    calls are issued at its end); an exception that leaves a block open makes the next
    block drop the old block's calls (their works fail) and run its own."""
    group = dist.group.WORLD
    t = fill(3, float(rank))
    try:
        with dist._coalescing_manager(device=CPU):
            held = dist.broadcast(t, 0, async_op=True)
            try:
                dist.broadcast(t, 0)
            except RuntimeError as e:
                assert "coalescing block that has not ended" in str(e), str(e)
            else:
                raise AssertionError("a sync broadcast inside a coalescing block returned")
            raise KeyError("the user's code fails inside the block")
    except KeyError:
        pass
    with dist._coalescing_manager(device=CPU, async_ops=True) as cm:
        dist.broadcast(t, world - 1, async_op=True)
    cm.wait()
    assert torch.equal(t, fill(3, float(world - 1))), "the block after the one left open"
    try:
        held.wait()
    except RuntimeError as e:
        assert "coalescing block that never ended" in str(e), str(e)
    else:
        raise AssertionError("a call of a block left open succeeded")
    x = fill(2, 1.0)
    group.allreduce([x]).wait()  # the group works on
    assert torch.equal(x, fill(2, float(world))), "allreduce after the block left open"


def monitored_barriers(rank, world):
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)
    # Rank 1 does not come: rank 0 names it; the others learn that the barrier failed.
    group = dist.new_group(backend="chorus")
    timeout = datetime.timedelta(milliseconds=500)
    if rank == 0:
        try:
            dist.monitored_barrier(group, timeout=timeout)
        except RuntimeError as e:
            assert "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 500 ms" in str(e), str(e)
        else:
            raise AssertionError("monitored_barrier passed without rank 1")
    elif rank != 1:
        try:
            dist.monitored_barrier(group, timeout=timeout)
        except RuntimeError as e:
            assert f"Rank {rank} successfully reached monitoredBarrier, but received errors" in str(e), str(e)
            assert "Rank 1 failed to pass monitoredBarrier" in str(e), str(e)
        else:
            raise AssertionError("monitored_barrier passed on a rank though rank 1 never came")
    dist.barrier()
    # Only rank 0 comes, wait_all_ranks: every other rank is named.
    group = dist.new_group(backend="chorus")
    if rank == 0:
        names = ", ".join(str(r) for r in range(1, world))
        try:
            dist.monitored_barrier(group, timeout=datetime.timedelta(milliseconds=300), wait_all_ranks=True)
        except RuntimeError as e:
            assert f"Ranks {names} failed to pass monitoredBarrier in 300 ms" in str(e), str(e)
        else:
            raise AssertionError("monitored_barrier passed alone")
        try:  # and with no time at all, rank 0 says it timed out
            dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=0))
        except RuntimeError as e:
            assert "Rank 0 timed out in monitoredBarrier after 0 ms" in str(e), str(e)
        else:
            raise AssertionError("monitored_barrier with a zero timeout passed")
    dist.barrier()


def non_contiguous(rank, world):
    """Every kind of call on transposed and strided tensors: copied in, and results copied
    back into the caller's tensor."""
    base = torch.arange(12, dtype=torch.float32).view(3, 4) + rank
    t = base.t()
    dist.all_reduce(t)
    assert torch.equal(t, (torch.arange(12, dtype=torch.float32).view(3, 4) * world + world * (world - 1) / 2).t())
    assert not t.is_contiguous() and t.data_ptr() == base.data_ptr()
    wide = torch.zeros(4, 6)
    column = wide[:, 1::2]  # strided
    if rank == 0:
        column.copy_(torch.arange(12, dtype=torch.float32).view(4, 3))
    dist.broadcast(column, src=0)
    assert torch.equal(column, torch.arange(12, dtype=torch.float32).view(4, 3)), "broadcast into a strided view"
    assert torch.equal(wide[:, 0::2], torch.zeros(4, 3)), "broadcast wrote outside the view"
    outs = [torch.zeros(2, 3).t() for _ in range(world)]
    dist.all_gather(outs, (torch.arange(6, dtype=torch.float32).view(2, 3) + 10 * rank).t())
    for r in range(world):
        assert torch.equal(outs[r], (torch.arange(6, dtype=torch.float32).view(2, 3) + 10 * r).t()), f"all_gather {r}"
    big = torch.zeros(world * 2, 3)
    dist.all_gather_into_tensor(big[:, 1], torch.tensor([rank, rank + 0.5]))
    assert torch.equal(big[:, 1], torch.tensor([v for r in range(world) for v in (r, r + 0.5)])), "AG into a column"
    out = torch.zeros(2, 2)[:, 0]
    dist.reduce_scatter_tensor(out, torch.arange(world * 2, dtype=torch.float32).view(2, world).t().reshape(-1))
    want = torch.arange(world * 2, dtype=torch.float32).view(2, world).t().reshape(-1)[2 * rank:2 * rank + 2] * world
    assert torch.equal(out, want), "reduce_scatter_tensor into a column"
    a2a_out = torch.zeros(2, world).t()  # row s comes from rank s
    dist.all_to_all_single(a2a_out, (torch.arange(2 * world, dtype=torch.float32) + 100 * rank).view(2, world).t())
    assert torch.equal(a2a_out, torch.stack([(torch.arange(2 * world, dtype=torch.float32) + 100 * s)
                                                 .view(2, world).t()[rank] for s in range(world)])), "all_to_all_single"
    if world > 1:
        if rank == 0:
            dist.send(torch.arange(20, dtype=torch.int64).view(4, 5).t(), 1)
        elif rank == 1:
            got = torch.zeros(10, 4, dtype=torch.int64)[::2]
            dist.recv(got, 0)
            assert torch.equal(got, torch.arange(20, dtype=torch.int64).view(4, 5).t()), "recv into a strided view"


def sequence_numbers(rank, world):
    """The group's sequence number counts its collectives, the same on every rank; sends
    and receives (which only some ranks call) leave it alone."""
    group = dist.new_group(backend="chorus")
    start = group._get_sequence_number_for_group()
    assert start == 0, f"a new group starts at {start}"
    for i in range(3):
        dist.all_reduce(torch.ones(2), group=group)
    dist.barrier(group=group)
    if world > 1 and rank < 2:
        peer = 1 - rank
        w = [dist.isend(torch.ones(1), peer, group=group), dist.irecv(torch.empty(1), peer, group=group)]
        for x in w:
            x.wait()
    seq = group._get_sequence_number_for_group()
    assert seq == 4, f"after 3 all_reduce and a barrier: {seq}"
    seqs = [None] * world
    dist.all_gather_object(seqs, seq)
    assert seqs == [4] * world, seqs


def groups_made_again_in_one_store(rank, world):
    """destroy_process_group, then init_process_group on the same store, three times: the
    group gets the same name each time (PyTorch counts groups from 0 again), so keys a
    group left in the store must not serve the next one. Rank 0 comes late to each step,
    so the others would find the last group's unique ids and barrier answer first."""
    import time
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    for round_ in range(3):
        if rank == 0:
            time.sleep(0.5)
        dist.init_process_group("chorus", store=store, rank=rank, world_size=world)
        t = fill(3, float(rank + round_))
        dist.all_reduce(t)
        assert torch.equal(t, fill(3, float(sum(range(world)) + world * round_))), f"round {round_}: all_reduce"
        if rank == 0:
            time.sleep(0.5)
            dist.send(fill(2, float(round_)), 1)
        elif rank == 1:
            got = fill(2, -1.0)
            dist.recv(got, 0)
            assert torch.equal(got, fill(2, float(round_))), f"round {round_}: recv got {got}"
        if rank == 0:
            time.sleep(0.5)
            store.set(f"test/rank0_at_barrier/{round_}", "1")
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        assert store.check([f"test/rank0_at_barrier/{round_}"]), f"round {round_}: passed the barrier before rank 0"
        dist.destroy_process_group()
    dist.init_process_group("chorus", store=store, rank=rank, world_size=world)  # for the runner's destroy


CHECKS = (irecv_before_isend, isend_then_irecv_fresh_group, batch_isend_irecv_recv_first,
          many_in_flight_match_in_order, p2p_errors, coalesced_ops, coalescing_block_left_open, monitored_barriers, non_contiguous,
          sequence_numbers, groups_made_again_in_one_store)


def every_check(rank, world):
    for fn in CHECKS:
        fn(rank, world)
        if rank == 0:
            print(f"ok: {fn.__name__} on {world} ranks", flush=True)


if __name__ == "__main__":
    ranks.run(every_check, int(sys.argv[1]), timeout=240)
