"""The XID catalogue (data: xid_catalog.json) and what each recommended action means for a verdict.

The catalogue is NVIDIA's (source and date inside the JSON); the mapping from its "immediate
action" buckets to this agent's verdicts is ours, documented in the README's rule table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOG_PATH = Path(__file__).with_name("xid_catalog.json")

# The verdicts, least to most severe: the worst finding wins. drain outranks reset and reboot:
# a GPU to take out of service is not fixed by either.
VERDICTS = ("ok", "degraded", "reset_required", "reboot_required", "drain", "lost")
SEVERITY = {v: n for n, v in enumerate(VERDICTS)}

# Catalogue action bucket -> (verdict, what the operator does). Application-level buckets never
# go beyond degraded: the GPU itself is fine, the job that hit it is not.
ACTION_VERDICTS: dict[str, tuple[str, str]] = {
    "IGNORE": ("ok", "no action needed"),
    "RESTART_APP": ("degraded", "restart the application"),
    "WORKFLOW_XID_45": ("degraded", "a channel was torn down after an earlier error"),
    "CHECK_UVM": ("degraded", "check the UVM driver"),
    "UPDATE_SWFW": ("degraded", "update the driver or firmware"),
    "SEE_RECOVERY_ACTION": ("degraded", "follow the GPU recovery action"),
    "RESET_GPU": ("reset_required", "reset the GPU"),
    "WORKFLOW_XID_48": ("reset_required", "reset the GPU, then check row remapping"),
    "WORKFLOW_NVLINK_ERR": ("reset_required", "reset the GPU, then check the NVLinks"),
    "WORKFLOW_NVLINK5_ERR": ("reset_required", "reset the GPU, then check the NVLinks"),
    "RESTART_BM": ("reboot_required", "reboot the node"),
    "RESTART_VM": ("reboot_required", "restart the VM"),
    "CHECK_MECHANICALS": ("drain", "check power and cabling"),
    "UNEXPECTED_ERR_REPORT_ISSUE": ("drain", "unexpected for this GPU: drain and report it"),
    "CONTACT_SUPPORT": ("drain", "drain and contact support"),
}
APPLICATION_ACTIONS = frozenset({"IGNORE", "RESTART_APP", "WORKFLOW_XID_45", "CHECK_UVM"})
LOST_XID = 79  # the GPU has fallen off the bus: the `lost` verdict, whatever the catalogue says


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str
    meaning: str
    action: str

    @property
    def application(self) -> bool:
        """An application's XID: it never makes a GPU worse than degraded."""
        return self.action in APPLICATION_ACTIONS


@dataclass(frozen=True)
class Catalog:
    source: str
    retrieved: str
    entries: dict[int, XidEntry]

    def get(self, code: int) -> XidEntry | None:
        return self.entries.get(code)


@lru_cache(maxsize=1)
def load_catalog(path: str = str(CATALOG_PATH)) -> Catalog:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    entries = {
        int(row["code"]): XidEntry(int(row["code"]), row["mnemonic"], row["meaning"], row["action"])
        for row in doc["xids"]
    }
    return Catalog(source=doc["source"], retrieved=doc["retrieved"], entries=entries)


def xid_verdict(code: int) -> tuple[str, str]:
    """(verdict, reason words) for one XID; an unknown code or action is degraded, naming the raw code."""
    if code == LOST_XID:
        return "lost", f"XID {code} (GPU has fallen off the bus)"
    entry = load_catalog().get(code)
    if entry is None:
        return "degraded", f"XID {code} (not in the XID catalogue)"
    verdict, action = ACTION_VERDICTS.get(entry.action, ("degraded", f"unknown catalogue action {entry.action}"))
    if entry.application and SEVERITY[verdict] > SEVERITY["degraded"]:
        verdict = "degraded"  # never reached with the table above; kept as the rule's guard
    return verdict, f"XID {code} ({entry.meaning}: {action})"
