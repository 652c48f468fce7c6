#!/usr/bin/env bash
# Creates the virtual environment that the torch.distributed backend (python/) builds and
# tests against: PyTorch from PyPI in <repository>/.venv. tools/setup-deps.sh runs it; the
# build finds the venv there (or -DCHORUS_TORCH_PYTHON=<python with torch 2.x>).
# Safe to run again: a venv that already imports the wanted torch is left as it is.
#
#   CHORUS_VENV           where the venv goes (default: <repository>/.venv)
#   CHORUS_TORCH_VERSION  the PyTorch release (default: 2.15.0)
#   CHORUS_TORCH_DEPS     "subset" (default) or "full" (every dependency torch declares)
#   CHORUS_VENV_PYTHON    the interpreter the venv is made from (default: /usr/bin/python3)
#
# What it downloads. PyPI's Linux torch wheels are CUDA builds (there is no CPU-only wheel
# on PyPI, and PyTorch's own CPU index is another host); `pip install torch` pulls about
# 2.8 GB of NVIDIA wheels that a CPU backend never calls. The libraries must still load, so
# "subset" installs torch without its dependencies, then:
#   - torch's pure-Python dependencies, numpy, and expecttest (which PyTorch's own test
#     suite, tests/torch/upstream_suite.py, imports);
#   - for each CUDA library that torch's libraries link and this machine cannot load
#     (ldconfig), the pinned NVIDIA wheel torch declares for it;
#   - always NCCL (nvidia-nccl-cu13, torch links the API of the version it pins).
# On Debian 12 with /usr/local/cuda-13.0 (CI's machine) that is torch (539 MB) plus NCCL,
# cuSPARSELt, NVSHMEM and cuFile (523 MB): about 1.07 GB, 2.0 GB on disk. Without a CUDA 13
# toolkit it is every library torch links (about 2.4 GB). If torch still does not import, it
# falls back to "full".
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${CHORUS_VENV:-$root/.venv}
version=${CHORUS_TORCH_VERSION:-2.15.0}
deps=${CHORUS_TORCH_DEPS:-subset}
base_python=${CHORUS_VENV_PYTHON:-/usr/bin/python3}
[[ -x $base_python ]] || base_python=$(command -v python3)

say() { echo "setup-torch: $*"; }

# torch imports, is the wanted release, and has torch.distributed; numpy and expecttest are there.
torch_ok() {
  "$venv/bin/python" - "$version" >/dev/null 2>&1 <<'PY'
import sys, warnings
warnings.simplefilter("ignore")
import torch, torch.distributed as dist, numpy, expecttest
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] and dist.is_available() else 1)
PY
}

if [[ -x $venv/bin/python ]] && torch_ok; then
  say "$venv already has torch $version"
  exit 0
fi

started=$SECONDS
if ! "$venv/bin/python" -c 'import pip' >/dev/null 2>&1; then
  say "creating $venv with $base_python"
  "$base_python" -m venv --clear "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# pip's complaints about torch's dependencies that this script leaves out on purpose.
quiet_pip() {
  "${pip[@]}" "$@" 2> >(grep -v -E "dependency resolver does not currently take|^torch .* requires .*, which is not installed" >&2)
}

if [[ $deps == full ]]; then
  say "installing torch==$version with every dependency it declares (about 2.8 GB)"
  "${pip[@]}" install "torch==$version" numpy expecttest
else
  say "installing torch==$version without its dependencies"
  quiet_pip install --no-deps "torch==$version"

  # torch's requirements: the pure-Python ones to install, the CUDA ones to choose from.
  mapfile -t python_deps < <("$venv/bin/python" - <<'PY'
from importlib.metadata import requires
for req in requires("torch") or []:
    spec, _, marker = req.partition(";")
    name = spec.strip().split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("~")[0].lower()
    if "extra ==" in marker or name.startswith(("nvidia-", "cuda-", "triton")):
        continue
    print(spec.strip())
PY
)
  quiet_pip install "${python_deps[@]}" numpy expecttest

  # The CUDA libraries torch's own libraries link, and which of them this machine lacks.
  mapfile -t wheels < <("$venv/bin/python" - <<'PY'
import glob, os, re, subprocess
from importlib.metadata import requires, files

lib = os.path.join(os.path.dirname(__import__("importlib.util").util.find_spec("torch").origin), "lib")
needed = set()
for so in glob.glob(os.path.join(lib, "*.so*")):
    out = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
    needed |= set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
loadable = set(re.findall(r"^\s*(\S+) \(", subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True,
                                                          text=True).stdout, re.M))
ours = set(os.listdir(lib))

# soname prefix -> (requirement of torch that provides it, extra of cuda-toolkit or None)
providers = {
    "libcudart.so": ("cuda-toolkit", "cudart"), "libcublas.so": ("cuda-toolkit", "cublas"),
    "libcublasLt.so": ("cuda-toolkit", "cublas"), "libcufft.so": ("cuda-toolkit", "cufft"),
    "libcufile.so": ("cuda-toolkit", "cufile"), "libcupti.so": ("cuda-toolkit", "cupti"),
    "libcusolver.so": ("cuda-toolkit", "cusolver"), "libcusparse.so": ("cuda-toolkit", "cusparse"),
    "libnvJitLink.so": ("cuda-toolkit", "nvjitlink"), "libnvrtc.so": ("cuda-toolkit", "nvrtc"),
    "libnvToolsExt.so": ("cuda-toolkit", "nvtx"),
    "libcudnn.so": ("nvidia-cudnn", None), "libcusparseLt.so": ("nvidia-cusparselt", None),
    "libnccl.so": ("nvidia-nccl", None), "libnvshmem_host.so": ("nvidia-nvshmem", None),
}
pins = {}
for req in requires("torch") or []:
    spec = req.split(";")[0].strip()
    m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", spec)
    pins[m.group(1).lower()] = m.group(3)

def requirement(soname):
    for prefix, (dist, extra) in providers.items():
        if soname.startswith(prefix + ".") or soname == prefix:
            for name, version in pins.items():
                if name == dist or name.startswith(dist + "-"):
                    return f"{name}[{extra}]{version}" if extra else f"{name}{version}"
    return None

wanted = set()
for soname in sorted(needed - ours):
    # NCCL: always torch's pinned release (an older system NCCL lacks API torch links).
    if soname in loadable and not soname.startswith("libnccl."):
        continue
    req = requirement(soname)
    if req:
        wanted.add(req)
for req in sorted(wanted):
    print(req)
PY
)
  if ((${#wheels[@]})); then
    say "installing the CUDA libraries torch links that this machine lacks: ${wheels[*]}"
    # cuda-toolkit[extra] pulls the one NVIDIA wheel of that extra; the others have no deps torch needs here.
    for w in "${wheels[@]}"; do
      if [[ $w == cuda-toolkit* ]]; then quiet_pip install "$w"; else quiet_pip install --no-deps "$w"; fi
    done
  fi
  if ! torch_ok; then
    say "torch does not import with the subset; installing every dependency torch declares"
    "${pip[@]}" install "torch==$version"
  fi
fi

if ! torch_ok; then
  say "FAILED: $venv/bin/python cannot import torch $version:"
  "$venv/bin/python" -c 'import torch' || true
  exit 1
fi
say "torch $version ready in $venv ($(du -sh "$venv" | cut -f1) on disk, $((SECONDS - started)) s)"
