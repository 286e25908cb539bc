"""Expected GPUs: a GPU that fell off the bus before the agent started, or a node that lost one
across a reboot, is a `lost`-grade finding rather than a smaller fleet.

`expected_gpus` is a count, or "at_first_start": the count the agent saw the first time it
started on this machine, remembered in <state_dir>/expected_gpus.json (delete the file after a
planned change of hardware).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from gpuagent.errors import AgentError
from gpuagent.service import safe_files
from gpuagent.service.state_file import trusted_writers

log = logging.getLogger("gpuagent.collector.health")

REMEMBERED = "expected_gpus.json"
AT_FIRST_START = "at_first_start"
MAX_BYTES = 4096


def expected_count(setting: int | str | None, state_dir: Path, present: int) -> int | None:
    """The number of GPUs this node should have, or None when nothing is expected."""
    if setting is None or isinstance(setting, int):
        return setting
    path = Path(state_dir) / REMEMBERED
    try:
        # Bounded, not through a symlink, and only the agent's own file (a 0777 emptyDir as state dir).
        data, _ = safe_files.read_bounded(path, MAX_BYTES, trusted_writers(Path(state_dir)))
        return int(json.loads(data)["gpus"])
    except FileNotFoundError:
        pass
    except safe_files.Refused as exc:
        # Not the agent's own file (planted in a state dir others may write, a FIFO, a symlink):
        # counted again and replaced, never followed; refusing to start would let them stop the agent.
        log.warning("expected_gpus: %s: not trusted; counting the GPUs again", exc)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise AgentError(f"{path} is unreadable ({str(exc)[:200]}); delete it to count the GPUs again") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Exclusively created, then renamed: a dangling symlink planted as the file is replaced, not followed.
        safe_files.write_replace(path, (json.dumps({"gpus": present, "first_start": time.time()}) + "\n").encode())
    except OSError as exc:
        raise AgentError(
            f'expected_gpus = "at_first_start" cannot remember the count in {path}: {exc.strerror}'
        ) from None
    log.info("expected_gpus: %d GPUs at first start, remembered in %s", present, path)
    return present


def inventory_fields(expected: int | None, present: int) -> dict:
    """The gpu_inventory point's fields (present counts every GPU NVML lists, lost ones too)."""
    fields: dict = {"gpus_present": present}
    if expected is None:
        return fields
    missing = max(0, expected - present)
    fields.update(gpus_expected=expected, gpus_missing=missing)
    if missing:
        fields["reason"] = (
            f"{missing} of {expected} expected GPUs missing: NVML lists {present} (expected_gpus = {expected})"
        )
    return fields
