#!/usr/bin/env python3
"""Chorus next to Open MPI, Gloo and oneCCL: float-sum AllReduce, one process per rank under mpirun.

Per rank count it runs, interleaved and --repeats times each:
  chorus      <build>/tools/perf/all_reduce_perf_mpi (Chorus' default transports)
  chorus-tcp  the same with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (network transport only)
  ompi        bench peer mpi_allreduce, Open MPI's defaults (shared memory)
  ompi-tcp    mpi_allreduce with --mca pml ob1 --mca btl self,tcp
  gloo        bench peer gloo_allreduce: Gloo's ring over TCP on 127.0.0.1
  oneccl      bench peer oneccl_allreduce over oneCCL's libfabric transport, shared memory
              (CCL_ATL_TRANSPORT=ofi FI_PROVIDER=shm CCL_ATL_SHM=1)
  oneccl-tcp  oneccl_allreduce with FI_PROVIDER=tcp
              (both with CCL_WORKER_OFFLOAD=0: on 2 cores oneCCL's polling worker thread makes
              every small call wait ~10 ms; oneCCL comes from bench/setup-oneccl.sh, not CI)
and once per repeat the single-thread memcpy_probe and, with chorus-tcp, the loopback tcp_probe
(both directions at once: the ceiling of a 2-rank ring over TCP), the physical references. Per size it
takes the median time over the repeats and prints Markdown: time and busbw per library,
peer time / Chorus time (>1: Chorus faster), the probes' GB/s, the goals, and every command run.
A program that fails without output (e.g. chorus-tcp before the network transport exists)
is reported as "n/a" with its reason; the sweep goes on. So is a peer that was not built
(oneccl_allreduce before bench/setup-oneccl.sh and a bench reconfigure).

  bench/run_sweep.py --build build --bench-build /tmp/bench-build --out report.md
  bench/run_sweep.py --make --build /tmp/b --bench-build /tmp/b-bench --max 1M --iters 5 --repeats 1
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# tools/perf row: size count type redop root, then time algbw busbw #wrong out of place and in place.
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+"
                 r"\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+(\S+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+(\S+)\s*$")
MEMCPY_ROW = re.compile(r"^\s*(\d+)\s+\d+\s+([\d.]+)\s+[\d.]+\s*$")
# tcp_probe rows: size, time (us), GB/s.
TCP_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+[\d.]+\s*$")
# Reference probes, run once per repeat under nranks 0: key -> (program, row format, column title).
PROBES = {"memcpy": ("memcpy_probe", MEMCPY_ROW, "memcpy GB/s"), "tcp": ("tcp_probe", TCP_ROW, "TCP probe GB/s")}
MIB = 1 << 20
PLACEMENT = {"out": "out-of-place", "in": "in-place", "best": "the better of out-of-place and in-place"}

# key -> (column title, TCP column?)
LIBRARIES = {
    "chorus": ("Chorus", False),
    "chorus-tcp": ("Chorus TCP", True),
    "ompi": ("Open MPI", False),
    "ompi-tcp": ("Open MPI TCP", True),
    "gloo": ("Gloo TCP", True),
    "oneccl": ("oneCCL", False),
    "oneccl-tcp": ("oneCCL TCP", True),
}
# (peer, Chorus run it is compared with): shared memory peers against Chorus' default, TCP
# peers against both Chorus columns (Chorus' default is what a user gets on one host).
RATIOS = [("ompi", "chorus"), ("ompi-tcp", "chorus"), ("gloo", "chorus"),
          ("ompi-tcp", "chorus-tcp"), ("gloo", "chorus-tcp"),
          ("oneccl", "chorus"), ("oneccl-tcp", "chorus"), ("oneccl-tcp", "chorus-tcp")]
# oneCCL over libfabric (ATL/OFI): the provider picks shared memory or TCP. mpirun is Open MPI, so
# the peer takes its rank from OMPI_COMM_WORLD_* and meets rank 0 through a file in {store}.
ONECCL_ENV = {"CCL_ATL_TRANSPORT": "ofi", "CCL_WORKER_OFFLOAD": "0"}
ONECCL_SHM_ENV = dict(ONECCL_ENV, FI_PROVIDER="shm", CCL_ATL_SHM="1")
ONECCL_TCP_ENV = dict(ONECCL_ENV, FI_PROVIDER="tcp")
# What builds a peer that is missing, for its "not built" note.
BUILD_HINT = {"oneccl_allreduce": "run bench/setup-oneccl.sh, then reconfigure the bench"}


class Run:
    """One program launch: its command, and the rows it printed."""

    def __init__(self, key, nranks, argv, env_extra, display):
        self.key, self.nranks, self.argv, self.env_extra, self.display = key, nranks, argv, env_extra, display
        self.rows = {}  # size -> (time us, wrong elements or None)
        self.note = ""  # why it failed, when it did
        self.banner = ""  # the program's first output line (library and version)
        self.ran = False


def shell_text(argv, env_extra):
    """The command as a shell line; mpirun lines carry the root permission, the store a fresh directory."""
    env = dict(ROOT_ENV, **env_extra) if argv[0] == "mpirun" else dict(env_extra)
    words = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    words += ['"$(mktemp -d)"' if a == "{store}" else shlex.quote(a) for a in argv]
    return " ".join(words)


def execute(run, timeout, placement, probe_row=None):
    """Runs in its own process group so a hang can be ended without touching anything else."""
    env = dict(os.environ, **ROOT_ENV, **run.env_extra)
    started = time.monotonic()
    run.ran = True
    proc = subprocess.Popen(run.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        run.note = f"timed out after {timeout} s"
    run.banner = next((l for l in out.splitlines() if l.startswith("# ")), "")
    for line in out.splitlines():
        if probe_row:
            m = probe_row.match(line)
            if m:
                run.rows[int(m.group(1))] = (float(m.group(2)), 0)
            continue
        m = ROW.match(line)
        if m:
            out_time, out_wrong, in_time, in_wrong = float(m.group(3)), m.group(4), float(m.group(5)), m.group(6)
            choice = {"out": (out_time, out_wrong), "in": (in_time, in_wrong),
                      "best": min((out_time, out_wrong), (in_time, in_wrong))}[placement]
            wrong = sum(int(float(w)) for w in (out_wrong, in_wrong) if w != "N/A")
            run.rows[int(m.group(1))] = (choice[0], wrong)
    if proc.returncode and not run.note:
        # oneCCL's warnings (e.g. that Intel MPI's libmpi is not there) would hide the real reason.
        lines = [l.strip() for l in (err + "\n" + out).splitlines()
                 if l.strip() and not l.startswith("-----") and "|CCL_WARN|" not in l]
        reason = next((l for l in lines if re.search(r"fail|error|abort|not", l, re.I)), lines[-1] if lines else "")
        run.note = f"exit status {proc.returncode}: {reason[:200]}"
    print(f"[{time.monotonic() - started:6.1f} s] {run.key} x{run.nranks}: "
          f"{len(run.rows)} sizes{' - ' + run.note if run.note else ''}", file=sys.stderr)


def make_runs(args, nranks, peers):
    perf = os.path.join(args.build, "tools/perf/all_reduce_perf_mpi")
    sweep = ["-b", args.min, "-e", args.max, "-f", str(args.factor), "-n", str(args.iters), "-w", str(args.warmup)]
    mpirun = ["mpirun", "-np", str(nranks), "--oversubscribe", "--bind-to", args.bind_to]
    tcp_env = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    exports = lambda env: [a for k, v in env.items() for a in ("-x", f"{k}={v}")]  # noqa: E731
    # -a 3: the slowest rank's time, the definition the peers use.
    chorus = [perf] + sweep + ["-c", "1", "-a", "3"]
    specs = [
        ("chorus", perf, mpirun + chorus, {}),
        ("chorus-tcp", perf, mpirun + exports(tcp_env) + chorus, tcp_env),
        ("ompi", peers["mpi_allreduce"], mpirun + [peers["mpi_allreduce"]] + sweep, {}),
        ("ompi-tcp", peers["mpi_allreduce"],
         mpirun + ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp", peers["mpi_allreduce"]] + sweep, {}),
        ("gloo", peers["gloo_allreduce"], mpirun + [peers["gloo_allreduce"], "-s", "{store}"] + sweep, {}),
    ]
    specs += [(key, peers["oneccl_allreduce"],
               mpirun + exports(env) + [peers["oneccl_allreduce"], "-s", "{store}"] + sweep, env)
              for key, env in (("oneccl", ONECCL_SHM_ENV), ("oneccl-tcp", ONECCL_TCP_ENV))]
    return [(key, binary, argv, env) for key, binary, argv, env in specs if key in args.libraries]


def run_all(args, peers):
    """results[(nranks, key)] -> list of Run (one per repeat); memcpy runs under nranks 0."""
    results = {}
    probe_sweep = ["-b", args.min, "-e", args.max, "-f", str(args.factor), "-n", str(args.iters),
                   "-w", str(args.warmup)]
    for repeat in range(args.repeats):
        # Interleaved, and rotated per repeat, so slow phases of a noisy machine spread over all.
        jobs = [(0, key, peers[program], [peers[program]] + probe_sweep, {}) for key, (program, _, _) in PROBES.items()
                if key != "tcp" or "chorus-tcp" in args.libraries]
        for nranks in args.ranks:
            jobs += [(nranks,) + spec for spec in make_runs(args, nranks, peers)]
        shift = repeat % len(jobs)
        for nranks, key, binary, argv, env in jobs[shift:] + jobs[:shift]:
            if binary is None or not os.path.exists(binary):
                run = Run(key, nranks, argv, env, shell_text(argv, env))
                hint = BUILD_HINT.get(os.path.basename(binary or ""))
                run.note = f"not built ({binary or 'peer program missing'}{'; ' + hint if hint else ''})"
                results.setdefault((nranks, key), []).append(run)
                continue
            # Gloo's and oneCCL's ranks meet in a fresh directory: keys left by an earlier run would be read back.
            store = tempfile.mkdtemp(prefix=f"{key}-store-") if "{store}" in argv else None
            run = Run(key, nranks, [store if a == "{store}" else a for a in argv], env, shell_text(argv, env))
            try:
                execute(run, args.timeout, args.placement, probe_row=PROBES[key][1] if key in PROBES else None)
            finally:
                if store:
                    shutil.rmtree(store, ignore_errors=True)
            results.setdefault((nranks, key), []).append(run)
    return results


class Summary:
    """Per (nranks, key): size -> median time (us), sizes with wrong elements, and the failure."""

    def __init__(self, results):
        self.time, self.wrong, self.note = {}, {}, {}
        for (nranks, key), runs in results.items():
            sizes = sorted({s for r in runs for s in r.rows})
            self.time[nranks, key] = {s: statistics.median([r.rows[s][0] for r in runs if s in r.rows])
                                      for s in sizes}
            self.wrong[nranks, key] = sorted({s for r in runs for s, (_, w) in r.rows.items() if w})
            notes = sorted({r.note for r in runs if r.note})
            self.note[nranks, key] = "; ".join(notes)

    def usec(self, nranks, key, size):
        return self.time.get((nranks, key), {}).get(size)

    def busbw(self, nranks, key, size):
        t = self.usec(nranks, key, size)
        return size / (t * 1e3) * 2 * (nranks - 1) / nranks if t else None

    def probe(self, key, size):
        """GB/s of a reference probe (memcpy: bytes copied; tcp: bytes each way) / time."""
        t = self.usec(0, key, size)
        return size / (t * 1e3) if t else None

    def memcpy(self, size):
        return self.probe("memcpy", size)


def size_text(size):
    for unit, name in ((1 << 30, "G"), (MIB, "M"), (1 << 10, "K")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def num(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def usec_text(value):
    """Microseconds with tools/perf's precision: fewer decimals as times grow."""
    return num(value, 0 if value is not None and value >= 10000 else 1 if value is not None and value >= 100 else 2)


def ratio(num_value, den_value):
    return num_value / den_value if num_value and den_value else None


def table(summary, nranks, keys, lines):
    head = ["size"]
    for key in keys:
        head += [f"{LIBRARIES[key][0]} us", f"{LIBRARIES[key][0]} GB/s"]
    pairs = [(p, c) for p, c in RATIOS if p in keys and c in keys]
    probes = [k for k in PROBES if summary.time.get((0, k))]
    head += [f"{LIBRARIES[p][0]} / {LIBRARIES[c][0]}" for p, c in pairs] + [PROBES[k][2] for k in probes]
    lines += ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    sizes = sorted({s for k in keys for s in summary.time.get((nranks, k), {})})
    for size in sizes:
        cells = [size_text(size)]
        for key in keys:
            mark = " (WRONG)" if size in summary.wrong.get((nranks, key), []) else ""
            cells += [usec_text(summary.usec(nranks, key, size)) + mark, num(summary.busbw(nranks, key, size))]
        ratios = [ratio(summary.usec(nranks, p, size), summary.usec(nranks, c, size)) for p, c in pairs]
        cells += ["n/a" if r is None else f"{r:.3g}" for r in ratios]
        cells += [num(summary.probe(k, size)) for k in probes]
        lines.append("| " + " | ".join(cells) + " |")
    for key in keys:
        if not summary.time.get((nranks, key)):
            lines.append(f"\n{LIBRARIES[key][0]}: not available ({summary.note.get((nranks, key)) or 'no rows'})")
        elif summary.note.get((nranks, key)):
            lines.append(f"\n{LIBRARIES[key][0]}: {summary.note[nranks, key]}")
        if summary.wrong.get((nranks, key)):
            wrong = ", ".join(size_text(s) for s in summary.wrong[nranks, key])
            lines.append(f"\n{LIBRARIES[key][0]}: WRONG results at {wrong}")


def goal(lines, text, value, threshold, detail):
    if value is None:
        verdict = "n/a"
    else:
        verdict = "met" if value >= threshold else "NOT met"
    lines.append(f"- {text}: **{verdict}** ({detail})")


def goals(summary, args, lines):
    n = 2 if 2 in args.ranks else args.ranks[0]
    big, mid = 64 * MIB, MIB
    bw = lambda key, size, ranks=n: summary.busbw(ranks, key, size)  # noqa: E731
    lines.append(f"\n## Goals ({n} ranks, {PLACEMENT[args.placement]} times, median of {args.repeats} runs)\n")
    c, o = bw("chorus", big), bw("ompi", big)
    goal(lines, "64 MiB busbw >= 1.5x Open MPI (shared memory)", ratio(c, o), 1.5,
         f"Chorus {num(c)} GB/s, Open MPI {num(o)} GB/s, x{num(ratio(c, o))}")
    m = summary.memcpy(big)
    goal(lines, "64 MiB busbw >= 50% of single-thread memcpy", ratio(c, m), 0.5,
         f"Chorus {num(c)} GB/s, memcpy {num(m)} GB/s, {num(ratio(c, m) and 100 * ratio(c, m), 0)}%")
    ct, ot = summary.usec(n, "chorus", 8), summary.usec(n, "ompi", 8)
    goal(lines, "8 B latency <= Open MPI", ratio(ot, ct), 1.0, f"Chorus {num(ct)} us, Open MPI {num(ot)} us")
    c1, o1 = bw("chorus", mid), bw("ompi", mid)
    goal(lines, "1 MiB busbw >= Open MPI", ratio(c1, o1), 1.0, f"Chorus {num(c1)} GB/s, Open MPI {num(o1)} GB/s")
    tcp = bw("chorus-tcp", big)
    tcp_note = "" if summary.time.get((n, "chorus-tcp")) else ", Chorus TCP not available"
    for key, name in (("gloo", "Gloo"), ("ompi-tcp", "Open MPI TCP")):
        p = bw(key, big)
        goal(lines, f"64 MiB TCP busbw >= 1.3x {name}", ratio(tcp, p), 1.3,
             f"Chorus TCP {num(tcp)} GB/s, {name} {num(p)} GB/s{tcp_note}")
    # oneCCL's goals, the same bars as Open MPI's, only where it ran (it is not built by default).
    if summary.time.get((n, "oneccl")):
        c, p = bw("chorus", big), bw("oneccl", big)
        goal(lines, "64 MiB busbw >= 1.5x oneCCL (shared memory)", ratio(c, p), 1.5,
             f"Chorus {num(c)} GB/s, oneCCL {num(p)} GB/s, x{num(ratio(c, p))}")
        ct, pt = summary.usec(n, "chorus", 8), summary.usec(n, "oneccl", 8)
        goal(lines, "8 B latency <= oneCCL", ratio(pt, ct), 1.0, f"Chorus {num(ct)} us, oneCCL {num(pt)} us")
        c1, p1 = bw("chorus", mid), bw("oneccl", mid)
        goal(lines, "1 MiB busbw >= oneCCL", ratio(c1, p1), 1.0, f"Chorus {num(c1)} GB/s, oneCCL {num(p1)} GB/s")
    if summary.time.get((n, "oneccl-tcp")):
        p = bw("oneccl-tcp", big)
        goal(lines, "64 MiB TCP busbw >= 1.3x oneCCL TCP", ratio(tcp, p), 1.3,
             f"Chorus TCP {num(tcp)} GB/s, oneCCL TCP {num(p)} GB/s{tcp_note}")
    if 4 in args.ranks and 2 in args.ranks:
        c2, c4 = bw("chorus", big, 2), bw("chorus", big, 4)
        goal(lines, "4 ranks 64 MiB busbw within 2x of 2 ranks", ratio(c4, c2), 0.5,
             f"4 ranks {num(c4)} GB/s, 2 ranks {num(c2)} GB/s")


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def report(args, results, build_commands, loads):
    summary = Summary(results)
    names = [name for name, keys in (("Open MPI", ("ompi", "ompi-tcp")), ("Gloo", ("gloo",)),
                                     ("oneCCL", ("oneccl", "oneccl-tcp"))) if set(keys) & set(args.libraries)]
    peer_text = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names) or "itself"
    lines = [f"# AllReduce: Chorus vs {peer_text}\n",
             f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, float sum, sizes {args.min}..{args.max} "
             f"x{args.factor}, {args.iters} iterations after {args.warmup} warm-up, median of {args.repeats} "
             f"interleaved runs, {PLACEMENT[args.placement]} times (the slowest rank's per-iteration average). "
             "busbw = bytes / time x 2(n-1)/n; memcpy GB/s = bytes copied / time. "
             "Ratios are peer time / Chorus time: above 1, Chorus is faster."]
    lines.append(f"\n1-minute load average before / after: {num(loads[0])} / {num(loads[1])}.")
    if (loads[0] or 0) > 0.5:
        # Ranks that block in poll (TCP, Gloo) wait for a scheduler tick when other work holds the cores.
        # (Only the load before counts: the sweep's own runs raise the one after.)
        lines.append("**Warning: the machine was busy; times (TCP and Gloo above all) are not trustworthy.**")
    inherited = sorted(k for k in os.environ if k.startswith("NCCL_"))
    if inherited:
        lines.append(f"\nInherited environment passed to every run: {', '.join(inherited)}")
    keys = [k for k in LIBRARIES if k in args.libraries]
    for nranks in args.ranks:
        lines.append(f"\n## {nranks} ranks\n")
        table(summary, nranks, keys, lines)
    for key in PROBES:
        if summary.note.get((0, key)):
            lines.append(f"\n{PROBES[key][0]}: {summary.note[0, key]}")
    goals(summary, args, lines)
    banners = {r.banner for runs in results.values() for r in runs if r.banner}
    lines.append("\n## Programs\n")
    lines += [f"- `{b[2:]}`" for b in sorted(banners)]
    lines.append("\n## Commands\n\n```")
    lines += build_commands
    counts = {}
    for runs in results.values():
        for r in runs:
            if r.ran:
                counts[r.display] = counts.get(r.display, 0) + 1
    lines += [f"{cmd}    # x{count}" for cmd, count in counts.items()]
    lines.append("```")
    return "\n".join(lines) + "\n"


def build(args):
    commands = []
    steps = [(REPO, args.build)]
    if args.bench_build and os.path.abspath(args.bench_build) != os.path.abspath(os.path.join(args.build, "bench")):
        steps.append((os.path.join(REPO, "bench"), args.bench_build))
    for source, binary in steps:
        for argv in (["cmake", "-S", source, "-B", binary], ["cmake", "--build", binary, "-j2"]):
            commands.append(" ".join(shlex.quote(a) for a in argv))
            print(f"$ {commands[-1]}", file=sys.stderr)
            if subprocess.run(argv, stdout=sys.stderr).returncode != 0:
                sys.exit(f"build failed: {commands[-1]}")
    return commands


BEGIN_MARK = "<!-- run_sweep.py report: begin -->"
END_MARK = "<!-- run_sweep.py report: end -->"


def write_report(path, text):
    """Writes `text` to `path`, or between the markers when the file has them (the rest stays)."""
    old = open(path).read() if os.path.exists(path) else ""
    begin, end = old.find(BEGIN_MARK), old.find(END_MARK)
    if 0 <= begin < end:
        text = old[:begin + len(BEGIN_MARK)] + "\n" + text.strip() + "\n" + old[end:]
    with open(path, "w") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(REPO, "build"), help="Chorus build directory")
    parser.add_argument("--bench-build", help="standalone build of bench/ (default: <build>/bench)")
    parser.add_argument("--make", action="store_true", help="configure and build first (cmake, -j2)")
    parser.add_argument("--min", default="8", help="smallest size, K/M/G suffixes (default 8)")
    parser.add_argument("--max", default="64M", help="largest size (default 64M)")
    parser.add_argument("--factor", type=int, default=2, help="size multiplier (default 2)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up iterations (default 5)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], help="rank counts (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each program; median per size (default 3)")
    parser.add_argument("--placement", choices=("out", "in", "best"), default="out",
                        help="which time to compare: out-of-place (default), in-place, or the better")
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=list(LIBRARIES),
                        help="columns to run (default: all)")
    parser.add_argument("--bind-to", default="none", help="mpirun --bind-to for every run (default none)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per program run (default 900)")
    parser.add_argument("--out", help="write the Markdown report here instead of stdout; in a file with the "
                        f"markers {BEGIN_MARK} ... {END_MARK} (BENCHMARKS.md), replace only what is between them")
    args = parser.parse_args()
    if args.factor < 2 or args.iters < 1 or args.warmup < 0 or args.repeats < 1 or min(args.ranks) < 2:
        parser.error("need --factor >= 2, --iters >= 1, --warmup >= 0, --repeats >= 1, --ranks >= 2")
    if "chorus" not in args.libraries:
        parser.error("--libraries must include chorus (every ratio is against it)")
    build_commands = build(args) if args.make else []
    args.build = os.path.abspath(args.build)
    bench_dir = os.path.abspath(args.bench_build or os.path.join(args.build, "bench"))
    peers = {name: os.path.join(bench_dir, name)
             for name in ("mpi_allreduce", "gloo_allreduce", "oneccl_allreduce")
             + tuple(p for p, _, _ in PROBES.values())}
    if not shutil.which("mpirun"):
        sys.exit("mpirun not found (tools/setup-deps.sh installs Open MPI)")
    before = load_average()
    results = run_all(args, peers)
    text = report(args, results, build_commands, (before, load_average()))
    if args.out:
        write_report(args.out, text)
        print(f"report written to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
