"""parabench installed as a package (not editable, not from the checkout): `python -m bench`
and the `parabench` command write results/ and plots/ in the working directory, never
inside the installed package."""
import os
import shutil
import subprocess
import sys

from tests.conftest import REPO


def test_an_installed_parabench_works_in_the_working_directory(tmp_path):
    source = tmp_path / "source"  # a copy: building in the checkout would leave build files there
    for name in ("bench", "strategies"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(site), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed copy only, not the checkout
    where = subprocess.run([sys.executable, "-c", "import bench; print(bench.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True)
    assert where.stdout.strip().startswith(str(site)), where
    run = subprocess.run([sys.executable, "-m", "bench", "run", "--gpus", "", "--strategies", "single",
                          "--batch-sizes", "2", "--warmup", "0", "--steps", "1", "--trials", "1"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    written = list((work / "results").glob("run-*.json"))
    assert len(written) == 1
    report = subprocess.run([str(site / "bin" / "parabench"), "report"], cwd=work, env=env, capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert (work / "plots" / "REPORT.md").exists() and (work / "plots" / "index.html").exists()
    assert not list(site.rglob("run-*.json")) and not list(site.rglob("REPORT.md"))
