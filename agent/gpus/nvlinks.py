"""A GPU's NVLinks as the nvlink and p2p collectors read them: which links the card has (probed
once) and their states in one nvmlDeviceGetFieldValues call (NVML_FI_DEV_NVLINK_GET_STATE, scope
= the link; drivers without that field fall back to nvmlDeviceGetNvLinkState per link)."""

from __future__ import annotations

import pynvml

from gpuagent.gpus.gpu import Gpu, current_collector
from gpuagent.gpus.nvml_read import Field, FieldReader


def card_links(gpu: Gpu) -> list[int]:
    """The link numbers this card has (probed once: past the last link NVML says INVALID_ARGUMENT)."""

    def probe() -> list[int]:
        links = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            # probe: INVALID_ARGUMENT past the card's last link is an answer, not a refusal.
            state = gpu.probe(pynvml.nvmlDeviceGetNvLinkState, link)
            if state is None:
                if link == 0:
                    break  # no NVLink, or NVLink queries refused (as under MIG)
                continue
            links.append(link)
        return links

    # Per collector (nvlink, p2p): each meets a refused probe itself, so the refusal counts do
    # not depend on which collector's thread probed first (gpuagent.gpus.gpu: the error policy).
    return gpu.remember(f"nvlink_links:{current_collector.get()}", probe)


_READERS: dict[tuple[int, ...], FieldReader] = {}


def _reader(links: tuple[int, ...]) -> FieldReader:
    reader = _READERS.get(links)
    if reader is None:
        reader = _READERS.setdefault(
            links,
            FieldReader(
                {
                    str(link): Field(
                        pynvml.NVML_FI_DEV_NVLINK_GET_STATE,
                        pynvml.nvmlDeviceGetNvLinkState,
                        (link,),
                        scope=link,
                    )
                    for link in links
                }
            ),
        )
    return reader


def link_states(gpu: Gpu, links: list[int]) -> dict[int, int | float]:
    """Link -> NVML_FEATURE_ENABLED / DISABLED for the links that answered this time."""
    if not links:
        return {}
    return {int(name): state for name, state in _reader(tuple(links)).read(gpu).items()}
