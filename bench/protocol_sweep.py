#!/usr/bin/env python3
"""AllReduce per algorithm x protocol, across processes under mpirun, with the tuned default.

Runs tools/perf's all_reduce_perf_mpi once per forced NCCL_ALGO x NCCL_PROTO pair and
once with the tuner free, for each rank count, and prints a Markdown report: the 8-byte
latency per protocol, then per size the busbw of every pair, the tuned default's choice
and its time relative to the best forced pair (the goal: never more than 10% slower).

The machine is noisy (2 cores, shared): every configuration runs --repeats times,
interleaved with the others (so a slow minute hits all of them alike), and each size's
figure is the median over the repeats. Sizes up to --split run --iters iterations; larger
ones --big-iters, so one sweep covers 8 B to 256 MiB in minutes.

  bench/protocol_sweep.py --build build --ranks 2 4 > report.md
  bench/protocol_sweep.py --build build --ranks 4 --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_DISABLE=1 --max 4M
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

PAIRS = [(a, p) for a in ("Ring", "Tree") for p in ("LL", "LL128", "Simple")]
TUNED = ("default", "")
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def mpirun(args, nranks, env_extra, perf_args):
    env_extra = dict(dict(kv.split("=", 1) for kv in args.env), **env_extra)
    env = dict(os.environ, **MPI_ENV, **env_extra)
    env.pop("NCCL_DEBUG", None) if "NCCL_DEBUG" not in env_extra else None
    cmd = ["mpirun", "-np", str(nranks), "--oversubscribe", "--bind-to", args.bind]
    for k, v in env_extra.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(args.build, "tools/perf/all_reduce_perf_mpi")] + perf_args
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return " ".join(cmd), out.stdout


def ranges(args):
    """(min, max, iters, warmup) of the one or two runs a sweep needs."""
    lo, hi, split = parse_size(args.min), parse_size(args.max), parse_size(args.split)
    if hi <= split:
        return [(lo, hi, args.iters, args.warmup)]
    if lo > split:
        return [(lo, hi, args.big_iters, 1)]
    return [(lo, split, args.iters, args.warmup), (split * 2, hi, args.big_iters, 1)]


def run_perf(args, nranks, env_extra):
    """{size: time_us} of one configuration (the better of out-of-place and in-place)."""
    rows, cmds = {}, []
    for lo, hi, iters, warmup in ranges(args):
        perf = ["-b", str(lo), "-e", str(hi), "-f", "2", "-n", str(iters), "-w", str(warmup), "-c", "1"]
        cmd, stdout = mpirun(args, nranks, env_extra, perf)
        cmds.append(cmd)
        for line in stdout.splitlines():
            m = ROW.match(line)
            if m:
                rows[int(m.group(1))] = min(float(m.group(3)), float(m.group(6)))
    return cmds, rows


def tuned_choices(args, nranks):
    """The tuner's pick per size, read from its TUNING log of one short run."""
    log_dir = f"/tmp/chorus-tuning-{os.getpid()}"
    os.makedirs(log_dir, exist_ok=True)
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_DEBUG_FILE": f"{log_dir}/%p.log"}
    mpirun(args, nranks, env, ["-b", args.min, "-e", args.max, "-f", "2", "-n", "1", "-w", "0", "-c", "0"])
    choices = {}
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                m = re.search(r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+)", line)
                if m:
                    choices[int(m.group(1))] = f"{m.group(2)}/{m.group(3)}"
        os.remove(os.path.join(log_dir, name))
    os.rmdir(log_dir)
    return choices


def busbw(size, nranks, time_us):
    return size / time_us / 1e3 * 2 * (nranks - 1) / nranks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="256M")
    ap.add_argument("--split", default="1M", help="largest size run with --iters")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--big-iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bind", default="core:overload-allowed", help="mpirun --bind-to value")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set for every run, e.g. NCCL_P2P_DISABLE=1 --env NCCL_SHM_DISABLE=1 (the network transport)")
    args = ap.parse_args()
    worst, worst_at = 1.0, ""
    ll_ok, small_seen = True, False
    configs = PAIRS + [TUNED]
    for n in args.ranks:
        samples = {c: {} for c in configs}
        commands = {}
        for _ in range(args.repeats):
            for c in configs:
                env = {} if c == TUNED else {"NCCL_ALGO": c[0], "NCCL_PROTO": c[1]}
                cmds, rows = run_perf(args, n, env)
                commands[c] = " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ; ".join(cmds)
                for size, t in rows.items():
                    samples[c].setdefault(size, []).append(t)
        med = {c: {s: statistics.median(v) for s, v in samples[c].items()} for c in configs}
        choices = tuned_choices(args, n)
        print(f"\n### AllReduce, {n} ranks as processes (float sum, median of {args.repeats} runs)\n")
        if 8 in med[TUNED]:
            print("8-byte latency (us): " + ", ".join(f"{a}/{p} {med[(a, p)][8]:.2f}" for a, p in PAIRS) +
                  f", tuned default {med[TUNED][8]:.2f}\n")
        print("| size (B) | " + " | ".join(f"{a}/{p}" for a, p in PAIRS) +
              " | default | chosen | default time / best |")
        print("|" + "---|" * (len(PAIRS) + 4))
        for size in sorted(med[TUNED]):
            best = min(med[pair][size] for pair in PAIRS)
            ratio = med[TUNED][size] / best
            if ratio > worst:
                worst, worst_at = ratio, f"{n} ranks, {size} B"
            if size < 4096:
                small_seen = True
                ll_ok = ll_ok and med[("Ring", "LL")][size] < med[("Ring", "Simple")][size]
            cells = " | ".join(f"{busbw(size, n, med[pair][size]):.3f}" for pair in PAIRS)
            print(f"| {size} | {cells} | {busbw(size, n, med[TUNED][size]):.3f} | {choices.get(size, '?')} "
                  f"| {ratio:.2f} |")
        print("\nbusbw in GB/s from the median time. Commands (each run once per repeat):\n")
        for c in configs:
            print(f"    {commands[c].strip()}")
    print(f"\nWorst tuned-default time relative to the best forced pair: {worst:.2f} at {worst_at} "
          f"(goal <= 1.10). Ring LL faster than Ring Simple below 4 KiB: "
          f"{('yes' if ll_ok else 'NO') if small_seen else 'n/a (no size below 4 KiB swept)'}.")


if __name__ == "__main__":
    main()
