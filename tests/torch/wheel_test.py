"""The wheel (python/pyproject.toml) from this build: pip builds it from the extension in
the build tree (CHORUS_BUILD_DIR), installs it into a directory of its own, and two ranks
that only have that directory on their path run init_process_group("chorus") without
importing chorus_torch (torch.distributed finds it through the package's entry point).

argv: the build directory."""
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def rank_main(rank, world, store, site):
    import torch
    import torch.distributed as dist

    assert "chorus_torch" not in sys.modules
    dist.init_process_group("chorus", init_method=f"file://{store}", rank=rank, world_size=world)
    import chorus_torch  # loaded by the entry point already: from the installed wheel

    assert chorus_torch.__file__.startswith(site), chorus_torch.__file__
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), 3.0)), t
    dist.destroy_process_group()


def main(build_dir):
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "python")  # a copy: pip builds in the source tree
        shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns("csrc", "build", "*.egg-info"))
        env = dict(os.environ, CHORUS_BUILD_DIR=os.path.abspath(build_dir))
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run(pip + ["wheel", "--no-build-isolation", "--no-deps", "-w", os.path.join(tmp, "dist"), source],
                       check=True, env=env, timeout=300)
        wheels = os.listdir(os.path.join(tmp, "dist"))
        assert len(wheels) == 1 and wheels[0].startswith("chorus_torch-") and "linux" in wheels[0], wheels
        print(f"built {wheels[0]}", flush=True)
        site = os.path.join(tmp, "site")
        subprocess.run(pip + ["install", "--no-deps", "--target", site, os.path.join(tmp, "dist", wheels[0])],
                       check=True, timeout=300)
        # The ranks see the installed package only, not a build tree's (spawn hands them this sys.path).
        os.environ["PYTHONPATH"] = site
        sys.path[:] = [site] + [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "chorus_torch"))]
        ctx = mp.get_context("spawn")
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=rank_main, args=(r, 2, store, site)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        codes = [p.exitcode for p in procs]
        for p in procs:
            if p.is_alive():
                p.kill()
        assert codes == [0, 0], f"ranks exited with {codes}"
    print("ok: the wheel installs, and init_process_group('chorus') finds it by its entry point", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
