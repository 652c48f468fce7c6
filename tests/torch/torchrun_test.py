"""torchrun starts examples/ddp/train.py with the chorus backend (env:// rendezvous through
torchrun's TCPStore): it trains, every rank ends with the same parameters, and they are
the ones a gloo run ends with (within float tolerance: the two sum in different orders)."""
import os
import subprocess
import sys
import tempfile

import torch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ddp", "train.py")
WORLD = 2


def torchrun(backend, out, attempts=1):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}", EXAMPLE,
               "--backend", backend, "--steps", "5", "--width", "64", "--depth", "3", "--bucket-cap-mb", "0.01",
               "--save", out]
    for attempt in range(attempts):
        done = subprocess.run(command, capture_output=True, text=True, timeout=240)
        print(done.stdout, end="", flush=True)
        if done.returncode == 0:
            return [torch.load(f"{out}.rank{r}") for r in range(WORLD)]
        if attempt + 1 < attempts:
            print(f"torchrun {backend} failed ({done.returncode}), run again:\n{done.stderr[-2000:]}", flush=True)
    assert False, f"torchrun {backend} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        chorus = torchrun("chorus", os.path.join(tmp, "chorus"))
        # The reference run may be tried three times: gloo's teardown now and then aborts
        # ("terminate called without an active exception") after the run is done; Chorus is
        # not loaded in it. The chorus run gets one try.
        gloo = torchrun("gloo", os.path.join(tmp, "gloo"), attempts=3)
    for r in range(1, WORLD):
        for a, b in zip(chorus[0], chorus[r]):
            assert torch.equal(a, b), f"rank {r}'s parameters differ from rank 0's"
    for i, (a, b) in enumerate(zip(chorus[0], gloo[0])):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"parameter {i}, chorus vs gloo: {m}")
    print(f"ok: torchrun --nproc_per_node={WORLD} examples/ddp/train.py --backend chorus == gloo", flush=True)


if __name__ == "__main__":
    main()
