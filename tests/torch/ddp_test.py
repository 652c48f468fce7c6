"""examples/ddp/train_mlp.py with backend="chorus" ends with the parameters a gloo run
of the same script ends with (within float tolerance), identical on every rank.
argv: the world sizes (default 2 4). ddp_exact_test.py checks exact values."""
import os
import subprocess
import sys
import tempfile

import torch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ddp", "train_mlp.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))
import train_mlp  # noqa: E402  (for the initial model)


def train(backend, world, out):
    subprocess.run([sys.executable, EXAMPLE, "--backend", backend, "--world-size", str(world), "--steps", "6",
                    "--width", "128", "--batch", "16", "--bucket-cap-mb", "0.05", "--save", out],
                   check=True, timeout=240)
    return [torch.load(f"{out}.rank{r}") for r in range(world)]


def main(worlds):
    torch.manual_seed(0)
    initial = [p.detach() for p in train_mlp.make_model(128, 4).parameters()]
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            chorus = train("chorus", world, os.path.join(tmp, f"chorus{world}"))
            gloo = train("gloo", world, os.path.join(tmp, f"gloo{world}"))
            for r in range(1, world):
                for a, b in zip(chorus[0], chorus[r]):
                    assert torch.equal(a, b), f"{world} ranks: rank {r}'s parameters differ from rank 0's"
            for i, (a, b, start) in enumerate(zip(chorus[0], gloo[0], initial)):
                assert not torch.equal(a, start), f"parameter {i} did not train"
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5,
                                           msg=lambda m: f"{world} ranks, parameter {i}, chorus vs gloo: {m}")
            print(f"ok: DDP on {world} ranks, chorus == gloo", flush=True)


if __name__ == "__main__":
    main([int(w) for w in sys.argv[1:]] or [2, 4])
