#!/usr/bin/env python3
"""The settings table (core/settings.cc) against the sources and README: every variable the
library reads is in the table, with the default the code falls back to; every setting the
library reads or knows is in one of README's tables, and every variable README's tables name
is in the settings table. Prints each mismatch; exits 1 if there is any."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
problems = []

entry = re.compile(r'\{"((?:NCCL|CHORUS)_[A-Z0-9_]+)",\s*(k\w+),\s*"([^"]*)",\s*(k\w+)')
table = {m[1]: (m[2], m[3], m[4]) for m in entry.finditer((root / "core/settings.cc").read_text())}
if len(table) < 40:
    problems.append(f"core/settings.cc: only {len(table)} settings parsed; the table's layout changed?")

# Reads: envInt/envString/envValue with a literal name, the helpers that take one, and
# names kept in constants (k...Env = "NAME").
read = re.compile(r'(?:envInt|envIntInRange|envString|envValue|slotBytesFromEnv|findSetting)\(\s*"([A-Z0-9_]+)"(?:,\s*([^;]*?))?\)')
constant = re.compile(r'Env\s*=\s*"([A-Z0-9_]+)"')
library = [p for d in ("core", "src", "transport", "device") for p in (root / d).rglob("*")
           if p.suffix in (".h", ".cc", ".cu", ".cuh")]
seen = set()
for path in library:
    text = path.read_text()
    rel = path.relative_to(root)
    for m in read.finditer(text):
        name, fallback = m[1], (m[2] or "").strip()
        if m[0].startswith("envIntInRange"):
            fallback = fallback.split(",")[0].strip()  # then the range
        seen.add(name)
        line = text.count("\n", 0, m.start()) + 1
        if name not in table:
            problems.append(f"{rel}:{line}: {name} is read but not in core/settings.cc")
            continue
        kind, default, _ = table[name]
        if kind == "kInt64" and re.fullmatch(r"[-0-9x<> ()]+", fallback or "x"):
            if eval(fallback) != int(default, 0):
                problems.append(f"{rel}:{line}: {name} falls back to {fallback}, the table says {default}")
    for m in constant.finditer(text):
        seen.add(m[1])
        if m[1] not in table:
            problems.append(f"{rel}: {m[1]} is read but not in core/settings.cc")

for name, (_, _, use) in table.items():
    if use == "kHonoured" and name not in seen and name not in ("NCCL_CONF_FILE",):
        problems.append(f"core/settings.cc: {name} is marked honoured but the library never reads it")

# README: the names in the first cell of its table rows.
readme = (root / "README.md").read_text()
documented = set()
for line in readme.splitlines():
    if line.startswith("|"):
        first = line.split("|")[1]
        documented.update(re.findall(r"`((?:NCCL|CHORUS)_[A-Z0-9_]+)`", first))
for name in sorted(documented - set(table)):
    problems.append(f"README.md: a table row names {name}, which core/settings.cc does not list")
for name, (_, _, use) in sorted(table.items()):
    if use in ("kHonoured", "kNotHonoured") and name not in documented:
        problems.append(f"README.md: {name} is in core/settings.cc but in no README table row")

for p in problems:
    print(p)
print(f"{len(table)} settings, {len(seen)} read by the library, {len(documented)} in README: "
      f"{'OK' if not problems else str(len(problems)) + ' problem(s)'}")
sys.exit(1 if problems else 0)
