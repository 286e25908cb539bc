"""nvlink: per NVLink state, version, remote end and capabilities; GPM throughput on Hopper (gpu_nvlink)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import pynvml

import gpuagent
from gpuagent.gpus.gpm import GPM_WARMUP_S, GpmSamplers, gpm_supported, whole_gpus
from gpuagent.gpus.gpu import Gpu, as_str
from gpuagent.gpus.nvlinks import card_links, link_states
from gpuagent.plugins.nvlink.schema import SCHEMA
from gpuagent.schema.measurements import GPU_NVLINK

MEASUREMENT = GPU_NVLINK

MIB = 1024 * 1024

CAPABILITIES = {
    "cap_p2p_supported": pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED,
    "cap_sysmem_access": pynvml.NVML_NVLINK_CAP_SYSMEM_ACCESS,
    "cap_p2p_atomics": pynvml.NVML_NVLINK_CAP_P2P_ATOMICS,
    "cap_sysmem_atomics": pynvml.NVML_NVLINK_CAP_SYSMEM_ATOMICS,
    "cap_sli_bridge": pynvml.NVML_NVLINK_CAP_SLI_BRIDGE,
    "cap_valid": pynvml.NVML_NVLINK_CAP_VALID,
}

REMOTE_TYPES = {
    pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: "gpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: "ibmnpu",
    pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: "switch",
    pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN: "unknown",
}

# nvmlDeviceGetNvLinkVersion answers an enum, not the NVLink generation (6 is NVLink 4.0).
VERSION_NAMES = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}

# GPM per-link metric ids: link N receive is L0_RX + 2N, transmit one more (links 0..17).
GPM_LINKS = 18
GPM_TOTAL = {
    "total_rx_bytes_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    "total_tx_bytes_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
}


def gpm_link_metrics(link: int) -> tuple[int, int]:
    rx = pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC + 2 * link
    return rx, rx + 1


# Per link, worked out once (a run builds 18 points a GPU): the GPM ids, the tag, the facts' key.
_GPM_IDS = [gpm_link_metrics(link) for link in range(GPM_LINKS)]
_LINK_TAGS = [str(link) for link in range(64)]
_FACTS_KEYS = [f"nvlink_link:{link}" for link in range(64)]


def link_facts(gpu: Gpu, link: int) -> dict[str, object]:
    """Version, far end and capabilities of an active link (they hold while the link stays up)."""
    version = gpu.query(pynvml.nvmlDeviceGetNvLinkVersion, link)
    facts: dict[str, object] = {"version": version, "version_name": VERSION_NAMES.get(version)}
    remote = gpu.query(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, link)
    if remote is not None:
        facts["remote_pci_bus_id"] = as_str(remote.busId)
    remote_type = gpu.query(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, link)
    if remote_type is not None:
        facts["remote_device_type"] = REMOTE_TYPES.get(remote_type, "unknown")
    for field, cap in CAPABILITIES.items():
        value = gpu.query(pynvml.nvmlDeviceGetNvLinkCapability, link, cap)
        facts[field] = bool(value) if value is not None else None
    return facts


# Without GPM (Ampere): nvml.h's throughput counters, KiB since the driver loaded, per link
# (scopeId = link) and summed over all links (scopeId = UINT_MAX); rates between two runs.
THROUGHPUT_FIELDS = {
    "rx": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    "tx": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
}
ALL_LINKS = 0xFFFFFFFF


def read_counters(gpu: Gpu, links: list[int]) -> tuple[float, dict[tuple[str, int], int]] | None:
    """(seconds of the driver's timestamp, (direction, link or ALL_LINKS) -> KiB) in one
    field-values call; None when the card refuses it."""
    keys = [(d, link) for link in [*links, ALL_LINKS] for d in THROUGHPUT_FIELDS]
    values = gpu.query(pynvml.nvmlDeviceGetFieldValues, [(THROUGHPUT_FIELDS[d], link) for d, link in keys])
    if values is None:
        return None
    out, stamp = {}, None
    for key, fv in zip(keys, values, strict=False):
        if fv.nvmlReturn == pynvml.NVML_SUCCESS:
            out[key] = int(fv.value.ullVal)
            stamp = fv.timestamp / 1e6
    return (stamp, out) if out and stamp is not None else None


def counter_rates(before, after) -> dict[tuple[str, int], float]:
    """Bytes/s per counter between two read_counters results (a counter that went back: none)."""
    (t0, c0), (t1, c1) = before, after
    dt = t1 - t0
    if dt <= 0:
        return {}
    return {k: (v - c0[k]) * 1024 / dt for k, v in c1.items() if k in c0 and v >= c0[k]}


def read_gpu(
    gpu: Gpu,
    gpm_read: Callable[[Gpu, Iterable[int]], dict[int, float]] | None = None,
    counter_rate: dict[tuple[str, int], float] | None = None,
) -> list[tuple[dict[str, str], dict[str, object]]]:
    """(tags, fields) of one GPU's gpu_nvlink points: one per link, then the GPU's summary.

    A card without NVLink gives none. ``gpm_read(gpu, metric_ids)`` gives GPM
    throughput since the previous sample (the collector's samplers); None: no
    throughput (a one-off read has no earlier sample), the fields are None.
    """
    links = card_links(gpu)
    if not links:
        return []
    throughput: dict[int, float] = {}
    if gpm_read is not None:
        ids = list(GPM_TOTAL.values())
        for link in links:
            if link < GPM_LINKS:
                ids.extend(_GPM_IDS[link])
        throughput = gpm_read(gpu, ids)
    points: list[tuple[dict[str, str], dict[str, object]]] = []
    active = 0
    states = link_states(gpu, links)  # one field-values call for every link
    enabled, gpu_tags = pynvml.NVML_FEATURE_ENABLED, gpu.tags
    for link in links:
        state = states.get(link)
        if state is None:
            continue
        is_active = state == enabled
        active += is_active
        fields: dict[str, object] = {"active": is_active, "state": "active" if is_active else "inactive"}
        known = link < 64
        if is_active:
            # Version, far end and capabilities hold while the link stays up: read once.
            key = _FACTS_KEYS[link] if known else f"nvlink_link:{link}"
            fields.update(gpu.remember(key, functools.partial(link_facts, gpu, link)))
        if counter_rate is not None:
            fields["rx_bytes_per_sec"] = counter_rate.get(("rx", link))
            fields["tx_bytes_per_sec"] = counter_rate.get(("tx", link))
        elif link < GPM_LINKS:
            rx_id, tx_id = _GPM_IDS[link]
            rx, tx = throughput.get(rx_id), throughput.get(tx_id)  # MiB/s: written as bytes/s
            fields["rx_bytes_per_sec"] = None if rx is None else rx * MIB
            fields["tx_bytes_per_sec"] = None if tx is None else tx * MIB
        points.append(({**gpu_tags, "link": _LINK_TAGS[link] if known else str(link)}, fields))
    summary: dict[str, object] = {"links": len(links), "links_active": active}
    for field, metric in GPM_TOTAL.items():
        summary[field] = _bytes(throughput.get(metric))
    if counter_rate is not None:
        summary["total_rx_bytes_per_sec"] = counter_rate.get(("rx", ALL_LINKS))
        summary["total_tx_bytes_per_sec"] = counter_rate.get(("tx", ALL_LINKS))
    points.append((dict(gpu.tags), summary))
    return points


class NvlinkCollector(gpuagent.Collector):
    """One gpu_nvlink point per NVLink, plus a per-GPU summary; nothing for cards without NVLink."""

    name = "nvlink"
    schema = SCHEMA
    requires_gpus = True
    # 18 links a GPU on an HGX board: per-link points are for diagnosis, not a 1 s chart;
    # link state and far ends change rarely. A table's `interval` overrides this.
    default_interval = 30.0

    class Config(gpuagent.CollectorConfig):
        # RX/TX throughput from GPM (Hopper and newer).
        gpm: bool = True
        # GPM reports between two samples: the first run takes one, waits this long, takes the next.
        gpm_warmup: gpuagent.Duration = GPM_WARMUP_S
        # Without GPM: throughput from NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_* between two runs.
        throughput_counters: bool = True

    def read_gpu(self, gpu: Gpu) -> dict:
        from gpuagent.commands.facts import arrange

        return {MEASUREMENT: arrange(gpu, read_gpu(gpu), summary_last=True)}

    def __init__(self, config, context):
        super().__init__(config, context)
        self._gpm = GpmSamplers()
        self._counters: dict[str, tuple] = {}  # uuid -> the previous run's throughput counters

    def _uses_gpm(self, gpu: Gpu) -> bool:
        return self.config.gpm and bool(card_links(gpu)) and gpm_supported(gpu)

    def collect(self, acc: gpuagent.Accumulator) -> None:
        # A new GPU's earlier GPM sample first (one wait for all of them), a lost GPU's sampler freed.
        self._gpm.start_run(whole_gpus(self.gpus, self._uses_gpm), self.config.gpm_warmup)
        super().collect(acc)

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: Gpu) -> None:
        gpm_read = self._gpm.read if self._uses_gpm(gpu) else None
        rates = None
        if gpm_read is None and self.config.throughput_counters and card_links(gpu):
            # No GPM (Ampere and older): the throughput counters, one field-values call a run.
            now = read_counters(gpu, card_links(gpu))
            before = self._counters.get(gpu.uuid)
            if now is not None:
                self._counters[gpu.uuid] = now
                rates = counter_rates(before, now) if before is not None else {}
        for tags, fields in read_gpu(gpu, gpm_read, rates):
            acc.add_fields(MEASUREMENT, fields, tags=tags)

    def close(self) -> None:
        self._gpm.close()


def _bytes(mib_per_sec: float | None) -> float | None:
    return None if mib_per_sec is None else mib_per_sec * MIB


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(NvlinkCollector)
