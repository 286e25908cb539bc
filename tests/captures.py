"""The real nvidia-smi captures beside the repository (../shared/captures), for tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parents[1].parent / "shared" / "captures"


def capture_names() -> list[str | None]:
    """Capture file names to parametrize over; [None] (a skip) where the folder is absent."""
    names = sorted(p.name for p in CAPTURES.glob("*") if p.suffix in (".txt", ".xml")) if CAPTURES.is_dir() else []
    return names or [None]


def capture_profile(name: str | None, tmp_path: Path) -> tuple[str, dict]:
    """Import one capture into a profile JSON file; returns (path, profile)."""
    if name is None:
        pytest.skip(f"no nvidia-smi captures at {CAPTURES} (they live in ../shared/captures)")
    from gpuagent.sim.capture_import import import_capture

    profile = import_capture(CAPTURES / name)
    path = tmp_path / f"{profile['name']}.json"
    path.write_text(json.dumps(profile))
    return str(path), profile
