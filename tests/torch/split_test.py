"""split_group on the chorus backend, on N processes (argv: N, 3 or more): the new groups'
communicators are ncclCommSplit of the parent's (a "split" job on the parent's queue), the
group ranks follow the order of each part, ranks outside every part get no group, and
collectives on the parent and the children interleave with exact results. A split of a
split works too."""
import sys

import torch
import torch.distributed as dist

import chorus_torch
import ranks


def split_jobs(group):
    return sum(1 for t in chorus_torch.collective_timings(group) if t[0] == "split")


def contributions(members, base):
    return float(sum(base + m for m in members))


def halves(rank, world):
    """Two parts, the second listed in reverse: group rank = position in its list."""
    first, second = list(range(world // 2)), list(reversed(range(world // 2, world)))
    parent = dist.group.WORLD
    before = split_jobs(parent)
    mine = first if rank in first else second
    group = dist.split_group(split_ranks=[first, second])
    assert group is not None and group != dist.GroupMember.NON_GROUP_MEMBER
    assert split_jobs(parent) == before + 1, "the child's communicator comes from ncclCommSplit on the parent's queue"
    assert dist.get_backend(group) == "chorus"
    assert group.rank() == mine.index(rank), (group.rank(), mine, rank)
    assert group.size() == len(mine)
    assert dist.get_process_group_ranks(group) == mine
    # Parent and child collectives interleaved, each exact.
    for i in range(3):
        t = torch.full((1000,), float(rank + i))
        dist.all_reduce(t, group=group)
        assert torch.equal(t, torch.full((1000,), contributions(mine, i))), f"child all_reduce {i}"
        w = torch.full((7,), float(rank))
        dist.all_reduce(w)
        assert torch.equal(w, torch.full((7,), contributions(range(world), 0))), f"parent all_reduce {i}"
    # Group rank 0 of the child (its list's first rank) broadcasts.
    b = torch.full((5,), float(rank))
    dist.broadcast(b, group_src=0, group=group)
    assert torch.equal(b, torch.full((5,), float(mine[0])))
    # Point-to-point inside the child, by group rank.
    if group.size() > 1:
        peer = (group.rank() + 1) % group.size()
        got = torch.empty(3)
        works = [dist.isend(torch.full((3,), float(rank)), group_dst=peer, group=group),
                 dist.irecv(got, group_src=(group.rank() - 1) % group.size(), group=group)]
        for w in works:
            w.wait()
        assert torch.equal(got, torch.full((3,), float(mine[(group.rank() - 1) % group.size()])))
    return group, mine


def non_member(rank, world):
    """One part without the last rank: it gets no group, the others one of world - 1."""
    part = list(range(world - 1))
    group = dist.split_group(split_ranks=[part])
    if rank == world - 1:
        assert group == dist.GroupMember.NON_GROUP_MEMBER or group is None, group
    else:
        t = torch.full((10,), float(rank))
        dist.all_reduce(t, group=group)
        assert torch.equal(t, torch.full((10,), contributions(part, 0)))
    dist.barrier()


def split_of_split(rank, world, group, mine):
    """The child split again, each rank alone: a group of one whose all_reduce is itself."""
    grandchildren = [[r] for r in range(group.size())]
    alone = dist.split_group(parent_pg=group, split_ranks=grandchildren)
    assert alone.size() == 1 and alone.rank() == 0
    t = torch.full((4,), float(rank))
    dist.all_reduce(t, group=alone)
    assert torch.equal(t, torch.full((4,), float(rank)))
    t = torch.full((4,), 1.0)
    dist.all_reduce(t, group=group)  # the parent still works after its split
    assert torch.equal(t, torch.full((4,), float(len(mine))))


def every_check(rank, world):
    group, mine = halves(rank, world)
    non_member(rank, world)
    split_of_split(rank, world, group, mine)
    dist.barrier()


if __name__ == "__main__":
    ranks.run(every_check, int(sys.argv[1]), timeout=240)
