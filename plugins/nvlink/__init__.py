"""nvlink: per NVLink state, version, remote end and capabilities; GPM throughput on Hopper (gpu_nvlink)."""

from __future__ import annotations

import pynvml

import gpuagent
from gpuagent.gpu import Gpu, as_str
from gpuagent.plugins.mig.gpm import GpmSamplers, gpm_supported

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

# GPM per-link metric ids: link N receive is L0_RX + 2N, transmit one more (links 0..17).
GPM_LINKS = 18
GPM_TOTAL = {
    "total_rx_bytes_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    "total_tx_bytes_per_sec": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
}


def gpm_link_metrics(link: int) -> tuple[int, int]:
    rx = pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC + 2 * link
    return rx, rx + 1


def card_links(gpu: Gpu) -> list[int]:
    """The link numbers this card has (probed once: past the last link NVML says INVALID_ARGUMENT)."""

    def probe() -> list[int]:
        links = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                state = gpu.query(pynvml.nvmlDeviceGetNvLinkState, link)
            except pynvml.NVMLError_InvalidArgument:
                break
            if state is None:
                if link == 0:
                    break  # no NVLink (or not under MIG)
                continue
            links.append(link)
        return links

    return gpu.remember("nvlink_links", probe)


class NvlinkCollector(gpuagent.Collector):
    """One gpu_nvlink point per NVLink, plus a per-GPU summary; nothing for cards without NVLink."""

    name = "nvlink"
    requires_gpus = True

    def __init__(self, config, context):
        super().__init__(config, context)
        self._gpm = GpmSamplers()

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: Gpu) -> None:
        links = card_links(gpu)
        if not links:
            return
        throughput: dict[int, float] = {}
        if gpm_supported(gpu):
            ids = list(GPM_TOTAL.values())
            for link in links:
                if link < GPM_LINKS:
                    ids.extend(gpm_link_metrics(link))
            throughput = self._gpm.read(gpu, ids)
        active = 0
        for link in links:
            state = gpu.query(pynvml.nvmlDeviceGetNvLinkState, link)
            if state is None:
                continue
            is_active = state == pynvml.NVML_FEATURE_ENABLED
            active += is_active
            fields: dict[str, object] = {"active": is_active, "state": "active" if is_active else "inactive"}
            fields["version"] = gpu.query(pynvml.nvmlDeviceGetNvLinkVersion, link)
            remote = gpu.query(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, link)
            if remote is not None:
                fields["remote_pci_bus_id"] = as_str(remote.busId)
            remote_type = gpu.query(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, link)
            if remote_type is not None:
                fields["remote_device_type"] = REMOTE_TYPES.get(remote_type, "unknown")
            for field, cap in CAPABILITIES.items():
                value = gpu.query(pynvml.nvmlDeviceGetNvLinkCapability, link, cap)
                fields[field] = bool(value) if value is not None else None
            if link < GPM_LINKS:
                rx_id, tx_id = gpm_link_metrics(link)
                fields["rx_bytes_per_sec"] = _bytes(throughput.get(rx_id))
                fields["tx_bytes_per_sec"] = _bytes(throughput.get(tx_id))
            acc.add_fields("gpu_nvlink", fields, tags={**gpu.tags, "link": str(link)})
        summary: dict[str, object] = {"links": len(links), "links_active": active}
        for field, metric in GPM_TOTAL.items():
            summary[field] = _bytes(throughput.get(metric))
        acc.add_fields("gpu_nvlink", summary, tags=gpu.tags)

    def close(self) -> None:
        self._gpm.close()


def _bytes(mib_per_sec: float | None) -> float | None:
    return None if mib_per_sec is None else mib_per_sec * MIB


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(NvlinkCollector)
