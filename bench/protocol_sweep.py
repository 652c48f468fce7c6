#!/usr/bin/env python3
"""AllReduce per algorithm x protocol, across processes under mpirun, with the tuned default.

Runs tools/perf's all_reduce_perf_mpi once per forced NCCL_ALGO x NCCL_PROTO pair and
once with the tuner free, for each rank count, and prints a Markdown report: the 8-byte
latency per protocol, then per size the busbw of every pair, the tuned default's choice
and its time relative to the best forced pair (the goal: never more than 10% slower).

  bench/protocol_sweep.py --build build --ranks 2 4 > report.md
"""
import argparse
import os
import re
import subprocess
import sys

PAIRS = [(a, p) for a in ("Ring", "Tree") for p in ("LL", "LL128", "Simple")]
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def run_perf(args, nranks, env_extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env_extra)
    env.pop("NCCL_DEBUG", None)
    cmd = ["mpirun", "-np", str(nranks), "--oversubscribe", "--bind-to", "none"]
    for k, v in env_extra.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(args.build, "tools/perf/all_reduce_perf_mpi"), "-b", args.min, "-e", args.max, "-f", "2",
            "-n", str(args.iters), "-w", str(args.warmup), "-c", "1"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    rows = {}
    for line in out.stdout.splitlines():
        m = ROW.match(line)
        if m:
            size = int(m.group(1))
            # the better of out-of-place and in-place: one figure per size
            t = min(float(m.group(3)), float(m.group(6)))
            bw = max(float(m.group(5)), float(m.group(8)))
            rows[size] = (t, bw)
    return " ".join(cmd), rows


def tuned_choices(args, nranks):
    """The tuner's pick per size, read from its TUNING log of one short run."""
    log = "/tmp/chorus-tuning-%p.log"
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_DEBUG_FILE": log}
    envs = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    cmd = ["mpirun", "-np", str(nranks), "--oversubscribe", "--bind-to", "none"]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(args.build, "tools/perf/all_reduce_perf_mpi"), "-b", args.min, "-e", args.max, "-f", "2",
            "-n", "1", "-w", "0", "-c", "0"]
    subprocess.run(cmd, env=envs, capture_output=True, text=True, timeout=1800, check=True)
    choices = {}
    for name in os.listdir("/tmp"):
        if name.startswith("chorus-tuning-"):
            with open(os.path.join("/tmp", name)) as f:
                for line in f:
                    m = re.search(r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+)", line)
                    if m:
                        choices[int(m.group(1))] = f"{m.group(2)}/{m.group(3)}"
            os.remove(os.path.join("/tmp", name))
    return choices


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="256M")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    worst = 1.0
    ll_ok = True
    for n in args.ranks:
        results, commands = {}, []
        for algo, proto in PAIRS:
            cmd, rows = run_perf(args, n, {"NCCL_ALGO": algo, "NCCL_PROTO": proto})
            results[(algo, proto)] = rows
            commands.append(f"NCCL_ALGO={algo} NCCL_PROTO={proto} {cmd}")
        cmd, tuned = run_perf(args, n, {})
        commands.append(cmd)
        choices = tuned_choices(args, n)
        print(f"\n### AllReduce, {n} ranks as processes (float sum)\n")
        print("8-byte latency (us): " + ", ".join(
            f"{a}/{p} {results[(a, p)][8][0]:.2f}" for a, p in PAIRS if 8 in results[(a, p)]) +
            f", tuned default {tuned[8][0]:.2f}\n")
        header = "| size (B) | " + " | ".join(f"{a}/{p}" for a, p in PAIRS) + " | default | chosen | default time / best |"
        print(header)
        print("|" + "---|" * (len(PAIRS) + 4))
        for size in sorted(tuned):
            best = min(results[pair][size][0] for pair in PAIRS if size in results[pair])
            ratio = tuned[size][0] / best
            worst = max(worst, ratio)
            if size < 4096 and results[("Ring", "LL")][size][0] >= results[("Ring", "Simple")][size][0]:
                ll_ok = False
            cells = " | ".join(f"{results[pair][size][1]:.3f}" for pair in PAIRS)
            print(f"| {size} | {cells} | {tuned[size][1]:.3f} | {choices.get(size, '?')} | {ratio:.2f} |")
        print("\nbusbw in GB/s (the better of out-of-place and in-place). Commands:\n")
        for c in commands:
            print(f"    {c}")
    print(f"\nWorst tuned-default time relative to the best forced pair: {worst:.2f} "
          f"(goal <= 1.10). LL faster than Simple below 4 KiB: {'yes' if ll_ok else 'NO'}.")


if __name__ == "__main__":
    main()
