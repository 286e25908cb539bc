"""gpuagent-infiniband: InfiniBand / RoCE port counters from sysfs, as a gpuagent collector.

RDMA traffic is what feeds multi-node training, so the HCA ports sit beside
the GPU readings: one ``infiniband`` point per (device, port), read from
``/sys/class/infiniband/<device>/ports/<port>/`` (``state``, ``phys_state``,
``rate``, ``link_layer``, ``counters/*`` and the driver's ``hw_counters/*``).
No NVML, no GPU and no extra dependency.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pydantic import field_validator

import gpuagent
from gpuagent.schema.fields import Measurement, counter, gauge

try:
    __version__ = version("gpuagent-infiniband")
except PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0.0.0"

MEASUREMENT = "infiniband"
INT64_MAX = 2**63 - 1

# What the collector writes (its README's field tables are generated from it, as a built-in's are).
SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        MEASUREMENT,
        (
            gauge("state", str, source="`state` (`4: ACTIVE` → `ACTIVE`; `DOWN`, `INIT`, `ARMED`)"),
            gauge("state_code", int, source="`state` (`4: ACTIVE` → 4)"),
            gauge("active", bool, source="`state` is ACTIVE"),
            gauge("phys_state", str, source="`phys_state` (`5: LinkUp` → `LinkUp`; `Disabled`, `Polling`)"),
            gauge("rate_gbps", float, unit="Gb/s", source="`rate` (`200 Gb/sec (4X HDR)` → 200.0)"),
        ),
        tags=("device", "port", "link_layer"),
        part="port",
        source_column="source",
    ),
    Measurement(
        MEASUREMENT,
        (
            counter(
                "xmit_bytes_total", int, unit="bytes", source="`port_xmit_data` **× 4**: the file counts 4-byte words"
            ),
            counter(
                "rcv_bytes_total", int, unit="bytes", source="`port_rcv_data` **× 4**: the file counts 4-byte words"
            ),
            counter("xmit_packets_total", int, unit="packets", source="`port_xmit_packets`"),
            counter("rcv_packets_total", int, unit="packets", source="`port_rcv_packets`"),
            counter("unicast_xmit_packets_total", int, unit="packets", source="`unicast_xmit_packets`"),
            counter("unicast_rcv_packets_total", int, unit="packets", source="`unicast_rcv_packets`"),
            counter("multicast_xmit_packets_total", int, unit="packets", source="`multicast_xmit_packets`"),
            counter("multicast_rcv_packets_total", int, unit="packets", source="`multicast_rcv_packets`"),
            counter("xmit_discards_total", int, unit="packets", source="`port_xmit_discards`"),
            counter(
                "xmit_wait_ticks_total",
                int,
                unit="ticks",
                source="`port_xmit_wait`: time with data to send but no credit (congestion)",
            ),
            counter("xmit_constraint_errors_total", int, unit="packets", source="`port_xmit_constraint_errors`"),
            counter("rcv_errors_total", int, unit="packets", source="`port_rcv_errors`"),
            counter(
                "rcv_remote_physical_errors_total", int, unit="packets", source="`port_rcv_remote_physical_errors`"
            ),
            counter("rcv_switch_relay_errors_total", int, unit="packets", source="`port_rcv_switch_relay_errors`"),
            counter("rcv_constraint_errors_total", int, unit="packets", source="`port_rcv_constraint_errors`"),
            counter("symbol_errors_total", int, unit="errors", source="`symbol_error`"),
            counter("link_error_recoveries_total", int, unit="events", source="`link_error_recovery`"),
            counter("link_downed_total", int, unit="events", source="`link_downed`"),
            counter("local_link_integrity_errors_total", int, unit="errors", source="`local_link_integrity_errors`"),
            counter(
                "excessive_buffer_overrun_errors_total", int, unit="errors", source="`excessive_buffer_overrun_errors`"
            ),
            counter("vl15_dropped_total", int, unit="packets", source="`VL15_dropped`"),
        ),
        part="counters",
        source_column="source (`counters/`)",
    ),
)

# counters/<file> -> (field, multiplier). port_xmit_data / port_rcv_data count
# 4-byte words (the IBA PortCounters octets divided by 4): multiplied by 4 here
# so that the fields are bytes.
COUNTERS: dict[str, tuple[str, int]] = {
    "port_xmit_data": ("xmit_bytes_total", 4),
    "port_rcv_data": ("rcv_bytes_total", 4),
    "port_xmit_packets": ("xmit_packets_total", 1),
    "port_rcv_packets": ("rcv_packets_total", 1),
    "unicast_xmit_packets": ("unicast_xmit_packets_total", 1),
    "unicast_rcv_packets": ("unicast_rcv_packets_total", 1),
    "multicast_xmit_packets": ("multicast_xmit_packets_total", 1),
    "multicast_rcv_packets": ("multicast_rcv_packets_total", 1),
    "port_xmit_discards": ("xmit_discards_total", 1),
    "port_xmit_wait": ("xmit_wait_ticks_total", 1),
    "port_xmit_constraint_errors": ("xmit_constraint_errors_total", 1),
    "port_rcv_errors": ("rcv_errors_total", 1),
    "port_rcv_remote_physical_errors": ("rcv_remote_physical_errors_total", 1),
    "port_rcv_switch_relay_errors": ("rcv_switch_relay_errors_total", 1),
    "port_rcv_constraint_errors": ("rcv_constraint_errors_total", 1),
    "symbol_error": ("symbol_errors_total", 1),
    "link_error_recovery": ("link_error_recoveries_total", 1),
    "link_downed": ("link_downed_total", 1),
    "local_link_integrity_errors": ("local_link_integrity_errors_total", 1),
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total", 1),
    "VL15_dropped": ("vl15_dropped_total", 1),
}

# hw_counters/ files that are settings, not counters.
HW_NOT_COUNTERS = frozenset({"lifespan"})

_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
_FIELD_NAME = re.compile(r"[^a-z0-9_]+")


class InfinibandConfig(gpuagent.CollectorConfig):
    # The directory that holds class/infiniband; tests point it at a fake tree.
    sysfs_root: str = "/sys"
    # Devices to read (e.g. ["mlx5_0", "mlx5_1"]); empty: every device.
    devices: list[str] = []
    # Also read the driver's hw_counters/ (RoCE congestion, retransmits, …).
    hw_counters: bool = True

    @field_validator("sysfs_root")
    @classmethod
    def _is_directory(cls, value: str) -> str:
        if not Path(value).is_dir():
            raise ValueError(f'"{value}" is not a directory')
        return value


class InfinibandCollector(gpuagent.Collector):
    name = "infiniband"
    Config = InfinibandConfig
    schema = SCHEMA

    def __init__(self, config: InfinibandConfig, context):
        super().__init__(config, context)
        self.class_dir = Path(config.sysfs_root) / "class" / "infiniband"
        self._said_absent = False

    def collect(self, acc: gpuagent.Accumulator) -> None:
        if not self.class_dir.is_dir():
            if not self._said_absent:  # a node without an HCA: nothing to read, not an error
                self.log.debug("%s does not exist: no RDMA devices on this machine", self.class_dir)
                self._said_absent = True
            return
        wanted = set(self.config.devices)
        for device in sorted(self.class_dir.iterdir(), key=lambda p: p.name):
            if wanted and device.name not in wanted:
                continue
            ports = device / "ports"
            if not ports.is_dir():
                continue
            for port in sorted(ports.iterdir(), key=lambda p: _port_number(p.name)):
                self.collect_port(acc, device.name, port)

    def collect_port(self, acc: gpuagent.Accumulator, device: str, port: Path) -> None:
        link_layer = _read(port / "link_layer") or "InfiniBand"
        state_code, state = _split_state(_read(port / "state"))
        _, phys_state = _split_state(_read(port / "phys_state"))
        fields: dict[str, int | float | bool | str | None] = {
            "state": state,
            "active": None if state is None else state == "ACTIVE",
            "state_code": state_code,
            "phys_state": phys_state,
            "rate_gbps": _rate_gbps(_read(port / "rate")),
        }
        for fname, value in _counters(port / "counters"):
            mapped = COUNTERS.get(fname)
            if mapped is not None:
                field, factor = mapped
            else:  # a counter this plugin does not know by name: kept, named after its file
                field, factor = _field_name(fname.removeprefix("port_")) + "_total", 1
            fields[field] = _int64(value * factor)
        if self.config.hw_counters:
            for fname, value in _counters(port / "hw_counters"):
                if fname in HW_NOT_COUNTERS:
                    continue
                field = _field_name(fname) + "_total"
                fields.setdefault(field, _int64(value))  # counters/ wins a name clash
        acc.add_fields(MEASUREMENT, fields, tags={"device": device, "port": port.name, "link_layer": link_layer})


def _read(path: Path) -> str | None:
    """A sysfs attribute's text; None when absent or unreadable (some drivers answer EINVAL)."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _counters(directory: Path):
    """(file name, integer value) for every readable counter file in ``directory``."""
    if not directory.is_dir():
        return
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        text = _read(path)
        if text is None:
            continue
        try:
            yield path.name, int(text, 0)
        except ValueError:
            continue


def _split_state(text: str | None) -> tuple[int | None, str | None]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); 'LinkUp' -> (None, 'LinkUp')."""
    if not text:
        return None, None
    code, sep, name = text.partition(":")
    if not sep:
        return None, text
    try:
        return int(code), name.strip()
    except ValueError:
        return None, text


def _rate_gbps(text: str | None) -> float | None:
    """'200 Gb/sec (4X HDR)' -> 200.0."""
    m = _RATE.match(text or "")
    return float(m.group(1)) if m else None


def _field_name(name: str) -> str:
    return _FIELD_NAME.sub("_", name.lower()).strip("_")


def _int64(value: int) -> int | None:
    # Line protocol integers are signed 64-bit; a value past that is left out, not wrapped.
    return value if 0 <= value <= INT64_MAX else None


def _port_number(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(InfinibandCollector)
