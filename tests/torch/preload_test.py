"""Chorus' libnccl.so.2 preloaded under PyPI's PyTorch (the drop-in way for CUDA programs).

torch's libraries link NCCL 2.30.7's entry points, device-API ones among them; the dynamic
linker must resolve every one of them in Chorus, or `import torch` fails. Here (no GPU) it
checks that torch imports and that NCCL's names, looked up as torch's libraries look them
up, are Chorus': ncclGetVersion answers Chorus' version, not the 2.30.7 of torch's wheel.
Usage: preload_test.py <libnccl.so.2>  (re-runs itself with LD_PRELOAD set)
"""
import ctypes
import os
import subprocess
import sys


def child():
    import torch  # noqa: F401  fails with "undefined symbol" if an entry point is missing

    loaded = [line.split()[-1] for line in open("/proc/self/maps") if "libnccl" in line]
    assert any(os.path.realpath(sys.argv[1]) == os.path.realpath(p) for p in loaded), loaded
    everything = ctypes.CDLL(None)
    version = ctypes.c_int(0)
    assert everything.ncclGetVersion(ctypes.byref(version)) == 0
    wheel_version = 23007
    assert version.value != wheel_version, "ncclGetVersion resolved to NVIDIA's NCCL, not Chorus"
    # One of the device-API entry points torch links: Chorus' answer is a refusal.
    out = ctypes.c_void_p(1)
    get_peer = everything.ncclGetPeerDevicePointer
    get_peer.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    assert get_peer(None, 0, 1, ctypes.byref(out)) == 5, "ncclInvalidUsage"
    assert out.value is None
    print(f"torch {torch.__version__} imports with Chorus {version.value} preloaded")


if __name__ == "__main__":
    if os.environ.get("CHORUS_PRELOAD_CHILD") == "1":
        child()
    else:
        env = dict(os.environ, LD_PRELOAD=os.path.realpath(sys.argv[1]), CHORUS_PRELOAD_CHILD="1")
        sys.exit(subprocess.run([sys.executable, __file__, sys.argv[1]], env=env).returncode)
