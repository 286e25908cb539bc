"""The wheel and the sdist: `twine check` passes, one version everywhere, and the wheel installed
into a fresh venv gives a working `gpuagent`."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import gpuagent

# Builds the sdist and wheel, installs the wheel into a fresh venv.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    pytest.importorskip("twine", reason="twine (the test extra) checks the built files")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [str(ROOT / "scripts/build-dist.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout  # twine check --strict, both files
    return out


def test_sdist_and_wheel_are_named_after_the_one_version(dist):
    version = gpuagent.__version__
    assert sorted(p.name for p in dist.iterdir()) == [
        f"gpuagent-{version}-py3-none-any.whl",
        f"gpuagent-{version}.tar.gz",
    ]
    top = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert top and top.group(1) == version, "CHANGELOG.md's newest entry is not the package's version"


def test_the_wheel_and_sdist_ship_py_typed_so_plugin_authors_type_check_against_gpuagent(dist):
    names = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
    assert "gpuagent/py.typed" in names  # PEP 561: without it mypy treats gpuagent as untyped
    sdist = next(dist.glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        assert f"{sdist.name.removesuffix('.tar.gz')}/agent/py.typed" in tar.getnames()


def test_the_wheel_in_a_fresh_venv_prints_the_version_and_runs(dist, tmp_path):
    # The dependencies come from the test venv's site-packages, named in a .pth as a plain path (so
    # its own .pth files, the editable gpuagent's finder among them, are not run): no download, and
    # the wheel (--no-deps) is the gpuagent the new venv imports, ahead of that path.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin/python"
    new_site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (new_site / "test-venv-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    wheel = next(dist.glob("*.whl"))
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    exe = env_dir / "bin/gpuagent"
    where = subprocess.run(
        [str(py), "-I", "-c", "import gpuagent; print(gpuagent.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(env_dir)), where.stdout + where.stderr
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"gpuagent, version {gpuagent.__version__}"
    run = subprocess.run(
        [str(exe), "run", "--simulate", "h100-sxm:2", "--once", "--test"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert re.search(r"^gpu_power,.*model=NVIDIA\\ H100", run.stdout, re.M), run.stdout[:500]
