"""The build scripts on a fresh clone: without a .venv they say in one line what to run, and the
image and chroot builds take this machine's apt mirror (scripts/apt-mirror.sh), not one named here."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO


def _bare_clone_script(tmp_path, name: str):
    """scripts/NAME in a checkout-like folder without .venv (each script runs from its parent folder)."""
    (tmp_path / "scripts").mkdir()
    for script in (name, "apt-mirror.sh"):
        shutil.copy2(REPO / "scripts" / script, tmp_path / "scripts" / script)
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__init__.py").write_text('__version__ = "0.0.0"\n')
    return tmp_path / "scripts" / name


@pytest.mark.parametrize("name", ["build-dist.sh", "build-image.sh"])
def test_without_a_venv_a_build_script_says_what_to_run_in_one_line(tmp_path, name):
    script = _bare_clone_script(tmp_path, name)
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "./scripts/setup.sh test" in done.stderr, done.stderr
    assert "No such file" not in done.stderr


def _mirror(apt_dir, env=None):
    return subprocess.run(
        [str(REPO / "scripts" / "apt-mirror.sh"), str(apt_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def test_the_mirror_is_the_machines_first_debian_archive(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://proxy.example:3142/debian/\nSuites: bookworm\nComponents: main\n"
    )
    done = _mirror(tmp_path)
    assert done.returncode == 0 and done.stdout == "http://proxy.example:3142/debian\n", done.stderr
    (tmp_path / "sources.list").write_text("# a comment\ndeb [arch=amd64] http://one.example/debian bookworm main\n")
    assert _mirror(tmp_path).stdout == "http://one.example/debian\n"
    assert _mirror(tmp_path, {"APT_MIRROR": "http://mine.example/debian"}).stdout == "http://mine.example/debian\n"


def test_no_mirror_is_one_line(tmp_path):
    done = _mirror(tmp_path)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "APT_MIRROR" in done.stderr


def test_no_build_script_names_a_package_mirror():
    for name in ("build-image.sh", "test-deb.sh"):
        text = (REPO / "scripts" / name).read_text()
        assert "deb.debian.org" not in text and "apt-mirror.sh" in text, name
