#!/usr/bin/env bash
# Drop-in check under CUDA PyTorch: runs one CUDA DDP step with backend="nccl" at world
# size 1 and 2, with Chorus' libnccl.so.2 first on LD_LIBRARY_PATH (then, if PyTorch
# still loaded another NCCL, through LD_PRELOAD), and confirms from the NCCL_DEBUG=VERSION
# line that Chorus served it. Needs a GPU and a CUDA build of PyTorch: without them it
# says so and exits 77 (skipped). Two ranks on one GPU set CHORUS_ALLOW_SHARED_GPU=1.
#
#   tools/torch-cuda-check.sh [build-dir (default: build)] [python (default: python3)]
set -uo pipefail
build=$(realpath "${1:-build}")
python=${2:-python3}
lib="$build/libnccl.so.2"
[[ -f $lib ]] || { echo "torch-cuda-check: $lib not found: build Chorus first" >&2; exit 1; }

if ! "$python" -c 'import sys, torch, torch.distributed as d
sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)' 2>/dev/null; then
  echo "torch-cuda-check: SKIPPED: no GPU, or $python's torch has no CUDA/NCCL"
  exit 77
fi

step=$(mktemp --suffix=.py)
trap 'rm -f "$step"' EXIT
cat > "$step" <<'PY'
import os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def rank_main(rank, world, store):
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(256, 256).cuda(), device_ids=[torch.cuda.current_device()])
    torch.manual_seed(rank)
    model(torch.randn(32, 256, device="cuda")).square().sum().backward()
    grads = [torch.empty_like(model.module.weight.grad) for _ in range(world)]
    dist.all_gather(grads, model.module.weight.grad)
    assert all(torch.equal(g, grads[0]) for g in grads), "ranks disagree on the averaged gradient"
    print(f"rank {rank}: DDP step done, gradients agree", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    world = int(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(world, os.path.join(tmp, "store")), nprocs=world)
PY

status=0
for world in 1 2; do
  for how in LD_LIBRARY_PATH LD_PRELOAD; do
    if [[ $how == LD_LIBRARY_PATH ]]; then
      out=$(LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=VERSION \
            CHORUS_ALLOW_SHARED_GPU=1 timeout 300 "$python" "$step" "$world" 2>&1)
    else
      out=$(LD_PRELOAD="$lib" NCCL_DEBUG=VERSION CHORUS_ALLOW_SHARED_GPU=1 timeout 300 "$python" "$step" "$world" 2>&1)
    fi
    rc=$?
    version=$(grep -m1 "NCCL version" <<<"$out")
    if grep -q "Chorus" <<<"$version"; then break; fi
    echo "torch-cuda-check: world $world via $how: PyTorch loaded another NCCL (${version:-no version line})"
  done
  if ! grep -q "Chorus" <<<"$version"; then
    echo "torch-cuda-check: FAIL: world $world never ran on Chorus (a PyTorch that links NCCL statically cannot be swapped)"
    status=1
  elif [[ $rc -ne 0 ]]; then
    echo "torch-cuda-check: FAIL: world $world on Chorus ($how): exit $rc"; tail -20 <<<"$out"; status=1
  else
    echo "torch-cuda-check: PASS: world $world on Chorus via $how: $version"
  fi
done
exit $status
