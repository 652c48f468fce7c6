"""PyTorch's own distributed test suite (torch.testing._internal.distributed.distributed_test,
what test/distributed/test_distributed_spawn.py runs upstream) with chorus in gloo's place:
BACKEND=gloo selects the tests and code paths PyTorch runs for gloo, and every group those
tests create with backend "gloo" is a chorus group.

    BACKEND=gloo WORLD_SIZE=2 PYTHONPATH=build/python:tests/torch \\
        .venv/bin/python tests/torch/upstream_suite.py [-k test_name ...] [-v] [--part]

CHORUS_AS_GLOO=0 runs the suite on gloo itself, for comparison. It needs the expecttest
package (tools/setup-torch.sh installs it). The whole suite takes about 40 minutes per
world size on 2 cores; ctest runs a part of it (--part: the tests in PART).
"""
import os
import sys

# With CI set (as CI services set it), run_tests writes JUnit XML through the xmlrunner package
# and skips the tests PyTorch marks slow; this suite is read from the console, whole.
os.environ.pop("CI", None)

os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "2")

import torch.distributed as dist  # noqa: E402

import chorus_torch  # noqa: E402,F401

if os.environ.get("CHORUS_AS_GLOO", "1") == "1":
    # Every gloo group the tests make (the default one, new_group(backend="gloo"), ...) is chorus.
    # Its profiler events are named "gloo:<op>", as the tests look for; C++ sees it as a
    # custom backend (DDP's logger would take a GLOO one for ProcessGroupGloo).
    dist.Backend._plugins["GLOO"] = dist.Backend._BackendPlugin(
        lambda options, backend_options: chorus_torch._create_backend(options, backend_options, name="gloo"), True)
    dist.Backend.backend_type_map["gloo"] = dist.ProcessGroup.BackendType.CUSTOM

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


# What ctest runs (about 2 minutes at 2 ranks): one test of each kind of call.
PART = ["test_all_reduce_sum", "test_all_reduce_coalesced_sum", "test_broadcast", "test_all_gather_coalesced_simple",
        "test_scatter", "test_send_recv_with_tag", "test_batch_isend_irecv_gloo", "test_monitored_barrier_gloo",
        "test_isend_torch_profiler", "test_DistributedDataParallelCPU", "test_sparse_all_reduce_sum"]

if __name__ == "__main__":
    if "--part" in sys.argv:
        sys.argv = [a for a in sys.argv if a != "--part"] + [f"TestDistBackendWithSpawn.{t}" for t in PART]
    run_tests()
