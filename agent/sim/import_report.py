"""What `gpuagent sim import` read from a capture, and what it could not, per fact class.

Each fact is in one of four states: ``read`` (the capture states it; the simulated card answers
it as stated), ``n/a`` (the capture says N/A, Not Supported or deprecated; the card answers the
NVML code a real one gives), ``masked`` (zeros or REDACTED in place of the value) and
``not stated`` (the capture has no such line, or one the importer cannot read: the profile's
written model answers, and ``not_in_capture`` names it).
"""

from __future__ import annotations

import re
from typing import Any

from gpuagent.sim.capture_import import not_available

STATES = ("read", "n/a", "masked", "not stated")
CLOCKS = ("graphics", "sm", "memory", "video")


def _state(value: Any) -> str:
    if value is None:
        return "not stated"
    if isinstance(value, str):
        text = value.strip()
        if not_available(text):
            return "n/a"
        if "REDACTED" in text.upper() or (re.fullmatch(r"[0-]+|GPU-[0-]+", text) and len(text) > 1):
            return "masked"
    return "read"


def _run_state(run: dict[str, Any], key: str, util_na: list[str] | None = None) -> str:
    """A parsed reading of the idle run (a number, or None where N/A or absent)."""
    if util_na is not None and key in util_na:
        return "n/a"
    value = (run.get("util") or {}).get(key) if util_na is not None else run.get(key)
    return "read" if value is not None else "not stated"


def report(facts: dict[str, Any], profile: dict[str, Any]) -> list[dict[str, Any]]:
    """[{"class", "read", "n/a", "masked", "not stated"}] (fact names per state), in a fixed order."""
    idle = facts.get("idle") or {}
    clocks = idle.get("clocks") or {}
    util_na = idle.get("util_na") or []
    counters = facts.get("reason_counters_us") or {}
    classes: list[tuple[str, list[tuple[str, str]]]] = [
        (
            "identity",
            [
                ("name", _state(facts.get("product_name"))),
                ("UUID", _state(facts.get("uuid"))),
                ("serial", _state(facts.get("serial"))),
                ("board id", _state(facts.get("board_id"))),
                ("board part number", _state(facts.get("board_part_number"))),
                ("VBIOS", _state(facts.get("vbios_version"))),
                ("PCI device id", _state(facts.get("pci_device_id"))),
                ("PCI bus id", _state(facts.get("bus_id"))),
            ],
        ),
        (
            "memory",
            [
                ("total", _state(facts.get("memory_total"))),
                ("reserved", _state(facts.get("memory_reserved"))),
                ("in use", _run_state(idle, "memory_used_mib")),
                ("BAR1 total", _state(facts.get("bar1_total"))),
                ("BAR1 in use", _run_state(idle, "bar1_used_mib")),
            ],
        ),
        (
            "power",
            [
                ("draw", "read" if profile["captured"]["idle"].get("power_w") is not None else "not stated"),
                ("limit", _state(facts.get("power_limit"))),
                ("default limit", _state(facts.get("power_default"))),
                ("min limit", _state(facts.get("power_min"))),
                ("max limit", _state(facts.get("power_max"))),
            ],
        ),
        (
            "clocks",
            [(k, "read" if clocks.get(k) is not None else "not stated") for k in CLOCKS]
            + [(f"max {k}", _state(facts.get(f"max_{k}"))) for k in CLOCKS]
            + [("P-state", _run_state(idle, "pstate"))],
        ),
        (
            "clock-event reasons",
            [("active reasons", _run_state(idle, "reasons"))]
            + [(f"{name} time", "read" if value is not None else "n/a") for name, value in counters.items()]
            + ([] if counters else [("reason times", "not stated")]),
        ),
        (
            "temperatures",
            [
                ("GPU", _run_state(idle, "temp_c")),
                ("memory", _run_state(idle, "memory_temp_c")),
                ("slowdown", _state(facts.get("temp_slowdown") or (facts.get("tlimit") or {}).get("slowdown"))),
                ("shutdown", _state(facts.get("temp_shutdown") or (facts.get("tlimit") or {}).get("shutdown"))),
                ("target", _state(facts.get("temp_target"))),
            ],
        ),
        (
            "utilisation",
            [(k, _run_state(idle, k, util_na)) for k in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")],
        ),
        (
            "PCIe",
            [
                ("generation", _state(facts.get("pcie_current_gen"))),
                ("width", _state(facts.get("pcie_current_width"))),
                ("Tx throughput", _run_state(idle, "pcie_tx_kbps")),
                ("Rx throughput", _run_state(idle, "pcie_rx_kbps")),
                ("replays", _state(facts.get("pcie_replays"))),
            ],
        ),
        (
            "processes",
            [
                (
                    f"list ({len(idle.get('processes') or [])})",
                    "read" if idle.get("processes_read", True) else "not stated",
                )
            ],
        ),
    ]
    if facts.get("mig_devices"):
        used = idle.get("mig_used_mib") or []
        classes.insert(
            -1,
            (
                "MIG",
                [(f"devices ({len(facts['mig_devices'])})", "read")]
                + [
                    (f"device {n} memory in use", "read" if v is not None else "not stated") for n, v in enumerate(used)
                ],
            ),
        )
    out = []
    for name, entries in classes:
        row: dict[str, Any] = {"class": name}
        for state in STATES:
            row[state] = [fact for fact, s in entries if s == state]
        out.append(row)
    return out


def lines(rows: list[dict[str, Any]], not_in_capture: list[str]) -> list[str]:
    """The report as a few lines: one per class, then what the profile's model answers."""
    out = ["read from the capture (n/a: answered as the card answers it, NOT_SUPPORTED; masked: zeros or REDACTED):"]
    for row in rows:
        parts = [f"read {', '.join(row['read'])}" if row["read"] else "read nothing"]
        for state in ("n/a", "masked", "not stated"):
            if row[state]:
                parts.append(f"{state}: {', '.join(row[state])}")
        out.append(f"  {row['class']:<20} " + "; ".join(parts))
    if not_in_capture:
        out.append("not in the capture, answered from the profile's model: " + "; ".join(not_in_capture))
    return out
