"""shrink_group on the chorus backend, on N processes (argv: N, 3 or more): the new group's
communicator is ncclCommShrink of the old one's, the ranks that stay are renumbered in order,
and collectives and sends on the new group give exact results.

- SHRINK_DEFAULT: rank 1 leaves after a collective; the others shrink it out.
- SHRINK_ABORT: the last rank stays alive but silent while the others have an all_reduce
  waiting for it; the shrink stops that work (its wait raises) and the new group works at
  once. Rank 0 shrinks first; rank 1, which receives from rank 0 on the ring, then sees its
  work fail before it shrinks a group whose work has failed."""
import faulthandler
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import SHRINK_ABORT, SHRINK_DEFAULT

import ranks

def survivors_work(rank, world, excluded):
    """Collectives and a ring of sends on the (new) default group, checked exactly."""
    stay = [r for r in range(world) if r != excluded]
    assert dist.get_world_size() == len(stay), dist.get_world_size()
    assert dist.get_rank() == stay.index(rank), (dist.get_rank(), stay, rank)
    t = torch.full((1001,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1001,), float(sum(r + 1 for r in stay)))), t[:3]
    b = torch.full((4,), float(rank))
    dist.broadcast(b, src=dist.get_world_size() - 1)  # the new numbering's last rank
    assert torch.equal(b, torch.full((4,), float(stay[-1]))), b
    me, n = dist.get_rank(), dist.get_world_size()
    got = torch.empty(3)
    works = [dist.isend(torch.full((3,), float(rank)), dst=(me + 1) % n), dist.irecv(got, src=(me - 1) % n)]
    for w in works:
        w.wait()
    assert torch.equal(got, torch.full((3,), float(stay[(me - 1) % n]))), got


def shrink_default(rank, world, _):
    faulthandler.dump_traceback_later(120)  # a rank that hangs shows where
    excluded = 1  # the ranks after it move down
    t = torch.ones(8)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((8,), float(world)))
    if rank == excluded:
        return  # leaves (the harness destroys its group)
    group = dist.shrink_group([excluded], shrink_flags=SHRINK_DEFAULT)
    assert group == dist.group.WORLD and dist.get_backend(group) == "chorus"
    survivors_work(rank, world, excluded)


def marks(marks_dir, kind):
    return sum(1 for name in os.listdir(marks_dir) if name.startswith(kind))


def await_marks(marks_dir, kind, count):
    deadline = time.monotonic() + 120
    while marks(marks_dir, kind) < count and time.monotonic() < deadline:
        time.sleep(0.02)


def shrink_abort_past_a_silent_rank(rank, world, marks_dir):
    faulthandler.dump_traceback_later(120)
    survivors, excluded = world - 1, world - 1
    if rank == excluded:
        await_marks(marks_dir, "done", survivors)  # alive and silent until the others are through,
        os._exit(0)  # then gone without a word
    work = dist.all_reduce(torch.ones(1 << 12), async_op=True)  # the last rank never joins it
    time.sleep(0.3)
    if work.is_completed():
        try:
            work.wait()
        except RuntimeError as e:
            raise AssertionError(f"an all_reduce without the last rank failed before the shrink: {e}") from e
        raise AssertionError("an all_reduce without the last rank completed")
    open(os.path.join(marks_dir, f"waiting-{rank}"), "w").close()
    # Rank 0 shrinks once every survivor saw its work waiting; its shrink stops its own work
    # and breaks its connections, so rank 1's work (receiving from rank 0) fails before rank
    # 1 shrinks a group whose work has failed, a second later.
    first = rank == 0
    await_marks(marks_dir, "waiting", survivors)
    if not first:
        time.sleep(1.0)
    began = time.monotonic()
    dist.shrink_group([excluded], shrink_flags=SHRINK_ABORT)
    assert time.monotonic() - began < 30, f"the shrink took {time.monotonic() - began:.1f} s"
    try:
        work.wait()
    except RuntimeError as e:
        # Rank 0's by its own shrink; the others' failed first (rank 0's stopped work broke
        # its connections), and they shrank a group whose work had failed.
        want = "allreduce was stopped: the group was shrunk with SHRINK_ABORT" if first else "allreduce failed: "
        assert want in str(e), str(e)
    else:
        raise AssertionError("the all_reduce stopped by the shrink reported success")
    survivors_work(rank, world, excluded)
    open(os.path.join(marks_dir, f"done-{rank}"), "w").close()


def main(world):
    for check in (shrink_default, shrink_abort_past_a_silent_rank):
        with tempfile.TemporaryDirectory() as marks_dir:
            ranks.run(check, world, args=(marks_dir,), timeout=180)
        print(f"ok: {check.__name__} on {world} ranks", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
