"""Chorus as a torch.distributed backend.

    import chorus_torch                     # registers the "chorus" backend
    torch.distributed.init_process_group(backend="chorus", ...)

CPU tensors only (Chorus' CPU executor). Every call returns at once with a Work that
completes on the group's own thread; errors from Chorus are raised by wait() with
Chorus' message.
"""
import torch  # loads libtorch before the extension needs its symbols
import torch.distributed as dist

from . import _C

__all__ = ["collective_timings"]


def _create_process_group(store, rank, world_size, timeout):
    return _C.create_process_group(store, rank, world_size, timeout.total_seconds())


if "CHORUS" not in dist.Backend._plugins:
    dist.Backend.register_backend("chorus", _create_process_group)


def collective_timings(group=None):
    """(op, queued, started, finished, ok) for the group's recent calls, times in
    time.monotonic() seconds: when the call was made, when its NCCL calls were issued on
    the group's thread, and when they completed."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C.collective_timings(group)
