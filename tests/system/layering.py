#!/usr/bin/env python3
"""The layering rules of ARCHITECTURE.md, checked on the sources: which folder may include
which, what the communicator's headers may pull in, that the group layer names no
executor, and that every path ARCHITECTURE.md names exists. Prints each violation with its
file and line; exits 1 if there is any."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
sources = (".h", ".cc", ".cu", ".cuh")

# Folder -> the folders its files may include from (besides itself and nccl.h; chorus.h:
# src/api/ only). Dependencies point one way: core -> device -> transport -> src.
ALLOWED = {
    "core/": ["core/"],
    "device/common/": ["device/common/"],
    "device/cpu/": ["core/", "device/common/", "device/cpu/"],
    "device/cuda/": ["core/", "device/common/", "device/cuda/"],
    "transport/": ["core/", "device/common/", "transport/"],
    "src/": ["core/", "device/", "transport/", "src/"],
}
# What no header of the communicator (src/comm) may include: an executor, a primitive or
# an algorithm.
COMM_FORBIDDEN = [
    "device/cpu/", "device/cuda/", "src/executor/",
    "device/common/simple_primitives.h", "device/common/ll_primitives.h", "device/common/ll128_primitives.h",
    "device/common/team_ops.h", "device/common/ring_algorithms.h", "device/common/tree_algorithms.h",
    "device/common/programs.h", "device/common/lane_program.h", "device/common/reduce_ops.h",
]
# Words that would mean the group layer picks an executor itself.
GROUP_FORBIDDEN = re.compile(r"\b(Cpu|Cuda|Gpu|CPU|CUDA|GPU)[A-Z]?\w*|ExecutorChoice::")

problems = []


def rel(path):
    return path.relative_to(root).as_posix()


for path in sorted(root.rglob("*")):
    if path.suffix not in sources or not path.is_file():
        continue
    name = rel(path)
    if name.startswith(("build", ".git")):
        continue
    layer = next((f for f in ALLOWED if name.startswith(f)), None)
    if layer is None:
        continue
    text = path.read_text(encoding="utf-8", errors="replace")
    for m in include.finditer(text):
        target = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        if target == "nccl.h":
            continue
        if target == "chorus.h" and name.startswith("src/api/"):
            continue  # Chorus' additions to the API: implemented by the API layer only
        if not (root / target).is_file():
            problems.append(f"{name}:{line}: includes \"{target}\", which is not a path from the repository root")
            continue
        if not any(target.startswith(f) for f in ALLOWED[layer]):
            problems.append(f"{name}:{line}: {layer} may not include \"{target}\" (allowed: {', '.join(ALLOWED[layer])})")
        if name.startswith("src/comm/") and path.suffix == ".h" and any(target.startswith(f) for f in COMM_FORBIDDEN):
            problems.append(f"{name}:{line}: a communicator header includes \"{target}\" (an executor, primitive or algorithm)")
    if name.startswith("src/group/"):
        code = re.sub(r"//[^\n]*", "", text)
        for m in GROUP_FORBIDDEN.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            problems.append(f"{name}:{line}: the group layer names an executor ({m.group(0)})")

architecture = root / "ARCHITECTURE.md"
if not architecture.is_file():
    problems.append("ARCHITECTURE.md is missing")
else:
    text = architecture.read_text(encoding="utf-8")
    # Every `path` in backquotes that looks like a file or folder of the repository.
    for m in re.finditer(r"`([A-Za-z0-9_./-]+)`", text):
        candidate = m.group(1).rstrip("/")
        if "/" not in candidate or candidate.startswith(("-", "../", "/")):
            continue
        if not (root / candidate).exists():
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"ARCHITECTURE.md:{line}: names `{m.group(1)}`, which does not exist")
readme = root / "README.md"
if "ARCHITECTURE.md" not in readme.read_text(encoding="utf-8"):
    problems.append("README.md does not link to ARCHITECTURE.md")

for p in problems:
    print(p)
print(f"layering: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
