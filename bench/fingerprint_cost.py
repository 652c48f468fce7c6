#!/usr/bin/env python3
"""The cost of collective fingerprints (CHORUS_FINGERPRINTS, issue 19): float-sum AllReduce
with the check on and off, in the same run, interleaved round by round.

For each link (2 ranks as threads: P2P; 2 processes: SHM; 2 processes with P2P and SHM
disabled: NET over loopback TCP) and size (8 B: latency, 64 MiB: bandwidth), runs
all_reduce_perf with CHORUS_FINGERPRINTS=1 and =0 alternately, `--rounds` times, and prints
the median out-of-place time of each and their ratio as a Markdown table.

  bench/fingerprint_cost.py --build build --rounds 5
"""
import argparse
import os
import statistics
import subprocess

MPI = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "core:overload-allowed"]


def command(build, link, size, iters):
    args = ["-b", str(size), "-e", str(size), "-n", str(iters), "-w", str(max(iters // 10, 2)), "-c", "0"]
    if link == "P2P (2 threads)":
        return [f"{build}/tools/perf/all_reduce_perf", "-g", "2"] + args
    extra = []
    if link.startswith("NET"):
        extra = ["-x", "NCCL_P2P_DISABLE=1", "-x", "NCCL_SHM_DISABLE=1"]
    return MPI + extra + ["-x", "CHORUS_FINGERPRINTS", f"{build}/tools/perf/all_reduce_perf_mpi"] + args + ["-a", "3"]


def time_us(cmd, fingerprints):
    env = dict(os.environ, CHORUS_FINGERPRINTS=str(fingerprints), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and not line.startswith("#") and fields[0].isdigit():
            return float(fields[5])
    raise RuntimeError("no result line in:\n" + out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    print("| link | bytes | on (µs) | off (µs) | on / off |")
    print("|---|---|---|---|---|")
    for link in ["P2P (2 threads)", "SHM (2 processes)", "NET (2 processes, loopback TCP)"]:
        for size, iters in [(8, 2000), (64 << 20, 10)]:
            cmd = command(opts.build, link, size, iters)
            on, off = [], []
            for _ in range(opts.rounds):
                on.append(time_us(cmd, 1))
                off.append(time_us(cmd, 0))
            m_on, m_off = statistics.median(on), statistics.median(off)
            print(f"| {link} | {size} | {m_on:.2f} | {m_off:.2f} | {m_on / m_off:.3f} |", flush=True)


if __name__ == "__main__":
    main()
