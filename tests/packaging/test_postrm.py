"""The .deb's postrm (packaging/deb/postrm): a purge must not remove the admin's files in /etc/gpuagent
(issue 46). Run against a root of its own through $DPKG_ROOT (dpkg's --root), never the system's."""

from __future__ import annotations

import subprocess
from pathlib import Path

POSTRM = Path(__file__).resolve().parents[2] / "packaging" / "deb" / "postrm"


def test_postrm_never_removes_etc_gpuagent_as_a_whole():
    # Before: `rm -rf ... /etc/gpuagent` took the token_file and TLS keys put beside the conffile.
    # (Checked on the text first: the old script, run, would act on this machine's own root.)
    text = POSTRM.read_text()
    assert "rm -rf" not in "\n".join(line for line in text.splitlines() if "etc/gpuagent" in line)
    assert '"$DPKG_ROOT/var/lib/gpuagent"' in text  # every path is under the root given


def test_purge_keeps_the_admins_files_and_removes_the_state(tmp_path):
    etc, state = tmp_path / "etc" / "gpuagent", tmp_path / "var" / "lib" / "private" / "gpuagent"
    etc.mkdir(parents=True)
    (etc / "influx.token").write_text("secret\n")  # the admin's: dpkg already removed the conffile
    (state / "spool").mkdir(parents=True)
    env = {"DPKG_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["sh", str(POSTRM), "purge"], env=env, capture_output=True, text=True, check=True)
    assert (etc / "influx.token").read_text() == "secret\n" and not state.exists()
    assert proc.stderr.strip() == "gpuagent: /etc/gpuagent kept: it holds files the package did not install"
    (etc / "influx.token").unlink()
    subprocess.run(["sh", str(POSTRM), "purge"], env=env, check=True)
    assert not etc.exists()  # empty: gone, as a purge leaves nothing of its own
    subprocess.run(["sh", str(POSTRM), "remove"], env=env, check=True)
