"""gpu_info on the simulator: the identity record on built-in profiles and captures, sent at start,
on change and every resend_every; kept on /metrics between sends."""

from __future__ import annotations

import functools

import pytest
from captures import CAPTURES, capture_names, capture_profile

from gpuagent.pipeline.metric import Point
from gpuagent.plugins.gpu_info import GpuInfoCollector
from gpuagent.plugins.prometheus import exposition
from gpuagent.sim.capture_import import facts_from_text, facts_from_xml
from gpuagent.testing import IDENTITY_TAGS, make_collector

collector = functools.partial(make_collector, cls=GpuInfoCollector)


@pytest.mark.parametrize("profile", ["h100-sxm", "rtx4090", "a100-sxm4"])
def test_the_record_on_built_in_profiles(profile, simulated_fleet, recording_accumulator):
    machine = simulated_fleet(f"{profile}:2")
    collector(machine).collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_info")
    assert len(points) == 2 and IDENTITY_TAGS <= set(points[0].tags)
    f = points[0].fields
    assert f["driver_version"] == machine.driver_version.decode()
    assert f["nvml_version"].endswith(f["driver_version"])
    assert f["cuda_driver_version"] == "13.2"  # the simulator's default CUDA for a built-in profile
    assert f["vbios_version"] and f["inforom_image_version"]
    assert f["persistence_mode"] is True


@pytest.mark.parametrize("name", capture_names())
def test_the_record_says_what_the_capture_says(name, tmp_path, simulated_fleet, recording_accumulator):
    path, _ = capture_profile(name, tmp_path)
    raw = (CAPTURES / name).read_text(errors="replace")
    f = facts_from_xml(raw) if raw.lstrip().startswith("<") else facts_from_text(raw)
    machine = simulated_fleet(path)
    collector(machine).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_info")
    got = point.fields
    assert got["driver_version"] == f["driver_version"]
    assert got["cuda_driver_version"] == str(f["cuda_version"]).split("[")[0].strip()
    for field, fact in (("vbios_version", f["vbios_version"]), ("board_part_number", f["board_part_number"])):
        if fact and fact != "N/A":
            assert got[field] == fact
    inforom = f["inforom"]
    for field, key in (
        ("inforom_image_version", "image"),
        ("inforom_oem_version", "oem"),
        ("inforom_ecc_version", "ecc"),
        ("inforom_power_version", "power"),
    ):
        if inforom.get(key) in (None, "N/A"):
            assert field not in got  # N/A in the capture: NOT_SUPPORTED, left out
        else:
            assert got[field] == inforom[key]
    mode = f.get("persistence_mode")
    if mode in ("Enabled", "Disabled"):
        assert got["persistence_mode"] is (mode == "Enabled")


def test_sent_at_start_on_change_and_hourly(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("h100-sxm:1")
    info = collector(machine)
    now = [0.0]
    info.clock = lambda: now[0]
    sent = []
    for t in (0, 300, 600):
        now[0] = t
        info.collect(recording_accumulator)
        sent.append(len(recording_accumulator.by_measurement("gpu_info")))
    assert sent == [1, 1, 1]  # unchanged: not sent again within the hour
    machine.devices[0].vbios = "96.00.A5.00.02"  # a VBIOS flashed
    now[0] = 900
    info.collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_info")
    assert len(points) == 2 and points[-1].fields["vbios_version"] == "96.00.A5.00.02"
    now[0] = 900 + 3600
    info.collect(recording_accumulator)
    assert len(recording_accumulator.by_measurement("gpu_info")) == 3  # hourly again


def test_prometheus_keeps_the_record_between_sends(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(exposition.time, "monotonic", lambda: clock[0])
    values = exposition.LatestValues("gpuagent", expire_after=300.0)
    tags = {"host": "h", "gpu": "0"}
    values.update(
        [
            Point("gpu_info", tags, {"driver_version": "590.48.01"}),
            Point("gpu_power", tags, {"power_w": 70.0}),
        ]
    )
    clock[0] += 3000  # past expire_after, within the hour gpu_info is resent in
    text = values.render().decode()
    assert 'gpuagent_gpu_info_driver_version_info{gpu="0",host="h",driver_version="590.48.01"} 1' in text
    assert "gpuagent_gpu_power_power_w" not in text
