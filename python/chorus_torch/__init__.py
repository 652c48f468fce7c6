"""Chorus as a torch.distributed backend (PyTorch 2.x).

    import chorus_torch                     # registers the "chorus" backend for CPU tensors
    torch.distributed.init_process_group(backend="chorus", ...)

Installed as a package (pip install ./python), the backend is also found through the
"torch.distributed.backends" entry point, so init_process_group("chorus") works without
the import. Every call returns at once with a Work that completes on the group's own
threads; errors from Chorus are raised by wait() with Chorus' message.
"""
import datetime

import torch  # loads libtorch before the extension needs its symbols
import torch.distributed as dist

from . import _C

__all__ = ["Options", "collective_timings", "register"]

Options = _C.Options


def _create_backend(dist_options, backend_options, name="chorus"):
    """The creator torch.distributed calls (extended API). `name` is what the group's
    backend is registered as: it names the profiler's events ("chorus:all_reduce")."""
    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(f"chorus: pg_options must be chorus_torch.Options, got {type(backend_options).__name__}")
    options = backend_options if backend_options is not None else Options()
    timeout = dist_options.timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    options._timeout = timeout
    options.group_name = str(dist_options.group_id)
    options.global_ranks_in_group = list(dist_options.global_ranks_in_group)
    return _C.create_backend(dist_options.store, dist_options.group_rank, dist_options.group_size, options, name)


def register():
    """Registers the "chorus" backend for CPU tensors (done on import; the entry point calls it)."""
    if "CHORUS" not in dist.Backend._plugins:
        dist.Backend.register_backend("chorus", _create_backend, extended_api=True, devices=["cpu"])


register()


def collective_timings(group=None):
    """(op, queued, started, finished, ok) for the group's recent calls, times in
    time.monotonic() seconds: when the call was made, when its NCCL calls were issued on
    the group's thread, and when they completed. Sends and receives are named
    "send to <peer>" and "recv from <peer>"."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C.collective_timings(group._get_backend(torch.device("cpu")))
