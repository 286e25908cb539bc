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

log = logging.getLogger("gpuagent.collector.health")

REMEMBERED = "expected_gpus.json"
AT_FIRST_START = "at_first_start"


def expected_count(setting: int | str | None, state_dir: Path, present: int) -> int | None:
    """The number of GPUs this node should have, or None when nothing is expected."""
    if setting is None or isinstance(setting, int):
        return setting
    path = Path(state_dir) / REMEMBERED
    try:
        return int(json.loads(path.read_text())["gpus"])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AgentError(f"{path} is unreadable ({exc}); delete it to count the GPUs again") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gpus": present, "first_start": time.time()}) + "\n")
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
