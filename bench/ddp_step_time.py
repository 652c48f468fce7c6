#!/usr/bin/env python3
"""DDP step time of examples/ddp/train_mlp.py, chorus vs gloo, on the same machine in
the same run: the backends alternate within each round, so a slow phase of the machine
hits both. Prints a Markdown table (median over rounds of each run's median step).

    PYTHONPATH=build/python .venv/bin/python bench/ddp_step_time.py --rounds 5
"""
import argparse
import os
import statistics
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "ddp", "train_mlp.py")


def step_ms(backend, world, args, comm_only=False):
    cmd = [sys.executable, EXAMPLE, "--backend", backend, "--world-size", str(world), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--width", str(args.width), "--depth", str(args.depth),
           "--batch", str(args.batch), "--report"] + (["--comm-only"] if comm_only else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900).stdout
    line = next(l for l in out.splitlines() if l.startswith("step_time_ms"))
    return float(line.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    times = {(w, b): [] for w in args.worlds for b in ("chorus", "gloo")}
    comm = {(w, b): [] for w in args.worlds for b in ("chorus", "gloo")}
    for r in range(args.rounds):
        for world in args.worlds:
            for backend in (("chorus", "gloo") if r % 2 == 0 else ("gloo", "chorus")):
                times[(world, backend)].append(step_ms(backend, world, args))
                comm[(world, backend)].append(step_ms(backend, world, args, comm_only=True))
    params = (64 * args.width + args.width) + (args.depth - 1) * (args.width * args.width + args.width) + args.width + 1
    print(f"Model: MLP 64 -> {args.depth} x {args.width} -> 1 ({params} parameters, {4 * params / 2**20:.2f} MiB of "
          f"gradients), batch {args.batch} per rank, {args.steps} steps of which {args.warmup} warm-up, "
          f"{args.rounds} rounds; 1-minute load before: {load}.\n")
    print("| processes | chorus step (ms) | gloo step (ms) | chorus / gloo | AllReduce of the gradients alone: "
          "chorus (ms) | gloo (ms) | chorus / gloo |")
    print("|---|---|---|---|---|---|---|")
    for world in args.worlds:
        c, g = (statistics.median(times[(world, b)]) for b in ("chorus", "gloo"))
        cc, gc = (statistics.median(comm[(world, b)]) for b in ("chorus", "gloo"))
        print(f"| {world} | {c:.2f} | {g:.2f} | {c / g:.2f} | {cc:.2f} | {gc:.2f} | {cc / gc:.2f} |")
    print("\nEvery run (ms): " + "; ".join(f"{b} {w}: {', '.join(f'{t:.1f}' for t in ts)}"
                                         for (w, b), ts in times.items()))


if __name__ == "__main__":
    main()
