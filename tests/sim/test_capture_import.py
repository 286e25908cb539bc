"""Importing each real capture gives a profile whose simulated device reports what the capture shows."""

import json

import pynvml
import pytest
from captures import CAPTURES, capture_names

from gpuagent.errors import AgentError
from gpuagent.sim.capture_import import (
    DEPRECATED_ANSWER,
    first_q_section,
    import_capture,
    parse_text_tree,
)
from gpuagent.sim.faults import error_code

ALL_CAPTURES = CAPTURES
NA = None  # the call answers NOT_SUPPORTED

# Values read off the captures by hand (first `nvidia-smi -q` section / the XML).
EXPECTED = {
    "linux-x86_64__nvidia-l40s__595.80.txt": dict(
        name="NVIDIA L40S",
        total_mib=46068,
        power=(350, 350, 100, 350),
        clocks=(2520, 2520, 9001, 1965),
        pcie=(4, 4, 16, 16),
        ecc=[1, 1],
        mig=NA,
        virt=pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
        mig_gis=[],
    ),
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt": dict(
        name="NVIDIA H100 80GB HBM3",
        total_mib=81559,
        power=(700, 700, 200, 700),
        clocks=(1980, 1980, 2619, 1545),
        pcie=(5, 5, 16, 16),
        ecc=[1, 1],
        mig=[0, 0],
        virt=pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
        mig_gis=[],
    ),
    "linux-x86_64__nvidia-h100-mig__590.48.01.txt": dict(
        name="NVIDIA H100 80GB HBM3",
        total_mib=81559,
        power=(700, 700, 200, 700),
        clocks=(1980, 1980, 2619, 1545),
        pcie=(5, 5, 16, 16),
        ecc=[1, 1],
        mig=[1, 1],
        virt=pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
        mig_gis=[(2, 40448, 60), (3, 20096, 32), (9, 9984, 16), (10, 9984, 16)],
    ),
    "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt": dict(
        name="NVIDIA GeForce RTX 4080 SUPER",
        total_mib=16376,
        power=(320, 320, 150, 400),
        clocks=(3165, 3165, 11501, 2415),
        pcie=(4, 1, 16, 16),
        ecc=NA,
        mig=NA,
        virt=pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
        mig_gis=[],
    ),
    "telegraf-a100-sxm4-v12.xml": dict(
        name="NVIDIA A100-SXM4-80GB",
        total_mib=81920,
        power=(500, 500, 100, 500),
        clocks=(1410, 1410, 1593, 1290),
        pcie=(4, 4, 16, 16),
        ecc=[1, 1],
        mig=[1, 1],
        virt=pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
        mig_gis=[(3, 19968, 14), (4, 19968, 14), (5, 19968, 14), (6, 19968, 14)],
    ),
    "telegraf-rtx-4000-sff-ada-v13.xml": dict(
        name="NVIDIA RTX 4000 SFF Ada Generation",
        total_mib=20475,
        power=(70, 70, 30, 70),
        clocks=(3105, 3105, 7001, 2415),
        pcie=(4, 1, 16, 16),
        ecc=[0, 0],
        mig=NA,
        virt=pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
        mig_gis=[],
    ),
}


def or_na(fn, *args):
    try:
        return fn(*args)
    except pynvml.NVMLError_NotSupported:
        return NA


@pytest.mark.parametrize("capture", sorted(EXPECTED))
def test_imported_capture_through_pynvml(capture, tmp_path, simulated_fleet):
    path = CAPTURES / capture
    if not path.exists():
        pytest.skip(f"capture {capture} not available (expected under {CAPTURES})")
    want = EXPECTED[capture]
    profile = import_capture(path)
    out = tmp_path / "profile.json"
    out.write_text(json.dumps(profile))
    simulated_fleet(str(out), scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(h) == want["name"]
    assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).total == want["total_mib"] << 20
    power = (
        pynvml.nvmlDeviceGetPowerManagementLimit(h),
        pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h),
        *pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h),
    )
    assert power == tuple(w * 1000 for w in want["power"])
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == want["power"][0] * 1000
    clocks = tuple(
        pynvml.nvmlDeviceGetMaxClockInfo(h, c)
        for c in (
            pynvml.NVML_CLOCK_GRAPHICS,
            pynvml.NVML_CLOCK_SM,
            pynvml.NVML_CLOCK_MEM,
            pynvml.NVML_CLOCK_VIDEO,
        )
    )
    assert clocks == want["clocks"]
    pcie = (
        pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
        pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
        pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
        pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
    )
    assert pcie == want["pcie"]
    assert or_na(pynvml.nvmlDeviceGetEccMode, h) == want["ecc"]
    assert or_na(pynvml.nvmlDeviceGetMigMode, h) == want["mig"]
    assert pynvml.nvmlDeviceGetVirtualizationMode(h) == want["virt"]
    gis = []
    if want["mig"] == [1, 1]:
        for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except pynvml.NVMLError_NotFound:
                break
            gis.append(
                (
                    pynvml.nvmlDeviceGetGpuInstanceId(m),
                    pynvml.nvmlDeviceGetMemoryInfo(m).total >> 20,
                    pynvml.nvmlDeviceGetAttributes(m).multiprocessorCount,
                )
            )
    assert gis == want["mig_gis"]


def test_h100_mig_capture_names_its_instances():
    path = CAPTURES / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
    if not path.exists():
        pytest.skip("H100 MIG capture not available")
    profile = import_capture(path)
    assert [i["profile"] for i in profile["mig"]["instances"]] == [
        "3g.40gb",
        "2g.20gb",
        "1g.10gb",
        "1g.10gb",
    ]
    assert profile["gpm"] is True and profile["nvlink"]["links"] == 18  # filled from the built-in h100-sxm


def test_geforce_capture_marks_na_calls():
    path = CAPTURES / "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"
    if not path.exists():
        pytest.skip("RTX 4080 SUPER capture not available")
    profile = import_capture(path)
    assert profile["ecc"] is None and profile["mig"] is None and profile["remapped_rows"] is False
    assert "nvmlDeviceGetSerial" in profile["unsupported"]
    assert profile["memory"]["bus_width_bits"] == 256 and profile["fan_pct"] is not None


def test_text_parser_handles_plain_q_output():
    text = """
==============NVSMI LOG==============
Driver Version                            : 550.1
Attached GPUs                             : 1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA X
    MIG Device
        GPU Instance ID                   : 1
    MIG Device
        GPU Instance ID                   : 2
    PCI
        Bus Id                            : 00000000:01:00.0
"""
    assert first_q_section(text) == text
    tree = parse_text_tree(text)
    gpu = tree["GPU 00000000:01:00.0"]
    assert tree["Driver Version"] == "550.1"
    assert [m["GPU Instance ID"] for m in gpu["MIG Device"]] == ["1", "2"]
    assert gpu["PCI"]["Bus Id"] == "00000000:01:00.0"


def test_garbage_capture_is_one_line_error(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    with pytest.raises(AgentError, match="notes.txt: no GPU section"):
        import_capture(bad)
    bad_xml = tmp_path / "x.xml"
    bad_xml.write_text("<?xml version='1.0'?><nvidia_smi_log><gpu>")
    with pytest.raises(AgentError, match="not valid nvidia-smi XML"):
        import_capture(bad_xml)


# Every capture beside the repository imports, whatever its layout (text 590-610, XML v12/v13).


@pytest.mark.parametrize("capture", capture_names())
def test_every_capture_imports(capture, tmp_path, simulated_fleet):
    if capture is None:
        pytest.skip(f"no nvidia-smi captures at {ALL_CAPTURES} (they live in ../shared/captures)")
    profile = import_capture(ALL_CAPTURES / capture)
    assert isinstance(profile["not_in_capture"], list)
    out = tmp_path / "p.json"
    out.write_text(json.dumps(profile))
    simulated_fleet(str(out), scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(h) == profile["product_name"]
    if "power limit" not in profile["not_in_capture"]:
        assert pynvml.nvmlDeviceGetPowerManagementLimit(h) == profile["power_w"]["limit"] * 1000


def test_driver_610_power_limits_under_ceiling():
    path = CAPTURES / "windows-x86_64__nvidia-geforce-rtx-2080-super__610.62.txt"
    if not path.exists():
        pytest.skip("driver 610 capture not available")
    profile = import_capture(path)
    # "GPU Ceiling Power Limit" / "Current Power Limit : 250.00 W", Min 105 W, Max 350 W.
    assert profile["power_w"]["limit"] == 250 and profile["power_w"]["default"] == 250
    assert (profile["power_w"]["min"], profile["power_w"]["max"]) == (105, 350)
    # "Driver Version : 610.62 [Deprecated; ...]": the version is the KMD version.
    assert profile["driver_version"] == "610.62" and profile["not_in_capture"] == []


def test_missing_facts_are_listed_not_fatal(tmp_path, simulated_fleet):
    text = """
==============NVSMI LOG==============
Driver Version                            : 595.1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA Test Card
    PCI
        Device Id                         : 0x270210DE
    FB Memory Usage
        Total                             : 8192 MiB
"""
    cap = tmp_path / "bare.txt"
    cap.write_text(text)
    profile = import_capture(cap)
    # Each idle clock the capture lacks is named with what answers it (not silently 10 % of max).
    assert profile["not_in_capture"] == [
        "power limit",
        "idle power draw",
        "max clocks",
        "idle clocks",
        "idle graphics clock (answered from a share of max)",
        "idle sm clock (answered from a share of max)",
        "idle memory clock (answered from a share of max)",
        "idle video clock (answered from a share of max)",
        "GPU temperature",
        "loaded run",
        "BAR1 in use",
        "PCIe throughput",
        "clock-event reasons",
        "board id",
    ]
    out = tmp_path / "p.json"
    out.write_text(json.dumps(profile))
    simulated_fleet(str(out), scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerManagementLimit(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_GRAPHICS)
    assert pynvml.nvmlDeviceGetMemoryInfo(h).total == 8192 << 20


def test_deprecated_applications_clocks_answer_deprecated(tmp_path, simulated_fleet):
    path = CAPTURES / "linux-x86_64__nvidia-l40s__595.80.txt"
    if not path.exists():
        pytest.skip("L40S capture not available")
    profile = import_capture(path)
    out = tmp_path / "p.json"
    out.write_text(json.dumps(profile))
    simulated_fleet(str(out), scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    # The capture: "Applications Clocks / Graphics : Requested functionality has been deprecated".
    want = pynvml.NVMLError.__new__(pynvml.NVMLError, error_code(DEPRECATED_ANSWER)).__class__
    with pytest.raises(want):
        pynvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS)
    with pytest.raises(want):
        pynvml.nvmlDeviceGetDefaultApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS)


SMALL_MIG_CAPTURE = """\
################################################################################
# capabilities :: list (-L)
# $ nvidia-smi -L
################################################################################
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)
  MIG 1c.3g.40gb  Device  0: (UUID: MIG-00000000-0000-0000-0000-000000000000)
  MIG 2c.3g.40gb  Device  1: (UUID: MIG-00000001-0000-0000-0000-000000000001)

################################################################################
# idle :: query (-q)
# $ nvidia-smi -q
################################################################################
Driver Version                            : 590.48.01
GPU 00000000:01:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    MIG Mode
        Current                           : Enabled
    MIG Device
        GPU Instance ID                   : 1
        Compute Instance ID               : 0
        Shared FB Memory Usage
            Total                         : 40448 MiB
    MIG Device
        GPU Instance ID                   : 1
        Compute Instance ID               : 1
        Shared FB Memory Usage
            Total                         : 40448 MiB
    PCI
        Device Id                         : 0x233010DE
    FB Memory Usage
        Total                             : 81559 MiB
    GPU Power Readings
        Current Power Limit               : 700.00 W
    Max Clocks
        Graphics                          : 1980 MHz
        Memory                            : 2619 MHz
"""


def test_mig_names_from_the_capture_list_section(tmp_path, invoke):
    # `nvidia-smi -L` names each MIG device; compute instances smaller than their GPU
    # instance ("1c.3g.40gb") become one GPU instance with two compute instances.
    cap = tmp_path / "small-mig.txt"
    cap.write_text(SMALL_MIG_CAPTURE)
    profile = import_capture(cap)
    got = [(i["gi_id"], i["ci_id"], i["profile"], i.get("ci_slices")) for i in profile["mig"]["instances"]]
    assert got == [(1, 0, "3g.40gb", 1), (1, 1, "3g.40gb", 2)]
    out = tmp_path / "p.json"
    out.write_text(json.dumps(profile))
    for modifier in ("", "@unprivileged"):
        result = invoke("inspect", "--json", "--simulate", str(out) + modifier)
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        names = [i["mig_profile"] for g in doc["gpus"] if g["gpu_mig"] for i in g["gpu_mig"]["points"]]
        assert names == ["1c.3g.40gb", "2c.3g.40gb"], modifier
