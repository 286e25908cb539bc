"""pcie collector -> gpu_pcie: link generation and width, throughput, replay and byte counters.

nvmlDeviceGetPcieThroughput samples the link for about 20 ms per direction
per GPU on real hardware (40 ms per GPU, 320 ms on an 8-GPU machine), so this
collector runs every 30 s unless its table says otherwise, and the throughput
read can be turned off (``throughput = false``). Max link generation and
width are static and read once per GPU.
"""

from __future__ import annotations

import pynvml

import gpuagent
from gpuagent.gpus.nvml_read import CYCLE, Field, FieldReader, valid
from gpuagent.plugins.pcie.schema import SCHEMA
from gpuagent.schema.measurements import GPU_PCIE

# NVML reports throughput in KB/s, KB being 1024 bytes as everywhere in nvidia-smi.
KIB = 1024

MEASUREMENT = GPU_PCIE

FIELDS = FieldReader(
    {
        "replays_total": Field(pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, pynvml.nvmlDeviceGetPcieReplayCounter),
        "replay_rollovers_total": Field(pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER),
        # Byte counters (recent drivers): exact, and free of the 20 ms sampling.
        "tx_bytes_total": Field(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
        "rx_bytes_total": Field(pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
    },
    # On the ticks it shares with the cycle's collectors (every 30 s), in the cycle's one call.
    group=CYCLE,
)


# nvml.h on NVML_FI_DEV_PCIE_COUNT_TX_BYTES / _RX_BYTES: "Value can be wrapped" (at 2**32).
COUNTER_WRAP = 1 << 32
WRAPPING_COUNTERS = ("tx_bytes_total", "rx_bytes_total")


class WrappedCounters:
    """Turns the driver's wrapping byte counters into totals that only grow: each time a
    reading is below the last one, the counter wrapped and 2**32 is added from then on.
    More than one wrap between two reads cannot be seen (the total then undercounts)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (GPU, field) -> (raw, offset)

    def total(self, uuid: str, name: str, raw: float) -> float:  # float: NVML's counters come as int or float
        last, offset = self._last.get((uuid, name), (raw, 0))
        if raw < last:
            offset += COUNTER_WRAP
        self._last[(uuid, name)] = (raw, offset)
        return raw + offset


class PcieConfig(gpuagent.CollectorConfig):
    # Read TX/RX throughput (about 20 ms of link sampling per direction per GPU).
    throughput: bool = True


def link_value(value: int | None) -> int | None:
    # Generation and width 0 mean "not reported" (e.g. a GPU behind a passthrough bridge).
    return valid(value, zero=False)


def read_gpu(gpu: gpuagent.Gpu, throughput: bool = True) -> dict[str, int | float | None]:
    """One GPU's gpu_pcie fields; ``throughput`` samples the link (about 20 ms per direction)."""
    fields: dict[str, int | float | None] = {
        "link_gen": link_value(gpu.query(pynvml.nvmlDeviceGetCurrPcieLinkGeneration)),
        "link_width": link_value(gpu.query(pynvml.nvmlDeviceGetCurrPcieLinkWidth)),
        "max_link_gen": link_value(gpu.static("pcie.max_gen", pynvml.nvmlDeviceGetMaxPcieLinkGeneration)),
        "max_link_width": link_value(gpu.static("pcie.max_width", pynvml.nvmlDeviceGetMaxPcieLinkWidth)),
    }
    if throughput:
        for counter, name in (
            (pynvml.NVML_PCIE_UTIL_TX_BYTES, "tx_bytes_per_s"),
            (pynvml.NVML_PCIE_UTIL_RX_BYTES, "rx_bytes_per_s"),
        ):
            kib = valid(gpu.query(pynvml.nvmlDeviceGetPcieThroughput, counter))
            fields[name] = None if kib is None else kib * KIB
    fields.update(FIELDS.read(gpu))
    return fields


class PcieCollector(gpuagent.Collector):
    name = "pcie"
    schema = SCHEMA
    requires_gpus = True
    Config = PcieConfig
    default_interval = 30.0

    def read_gpu(self, gpu: gpuagent.Gpu) -> dict:
        return {MEASUREMENT: read_gpu(gpu, throughput=False)}  # throughput samples the link for 20 ms

    def __init__(self, config: PcieConfig, context) -> None:
        super().__init__(config, context)
        self._byte_counters = WrappedCounters()

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        fields = read_gpu(gpu, self.config.throughput)
        for name in WRAPPING_COUNTERS:
            raw = fields.get(name)
            if raw is not None:
                fields[name] = self._byte_counters.total(gpu.uuid, name, raw)
        acc.add_fields(MEASUREMENT, fields, tags=gpu.tags)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(PcieCollector)
