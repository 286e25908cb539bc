"""SPEC parsing and the node's topology / P2P matrix."""

import itertools

import pynvml
import pytest

from gpuagent.errors import AgentError
from gpuagent.sim.fleet import parse_spec


def handles():
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


CAPS = (
    pynvml.NVML_P2P_CAPS_INDEX_WRITE,
    pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
    pynvml.NVML_P2P_CAPS_INDEX_ATOMICS,
    pynvml.NVML_P2P_CAPS_INDEX_PROP,
    0,
)


def p2p(a, b):
    return {c: pynvml.nvmlDeviceGetP2PStatus(a, b, c) for c in CAPS}


def test_spec_items_and_counts():
    items = parse_spec("l40s:2, rtx4090 ,h100-pcie:1")
    assert [(i.name, i.count, i.first_index) for i in items] == [
        ("l40s", 2, 0),
        ("rtx4090", 1, 2),
        ("h100-pcie", 1, 3),
    ]


@pytest.mark.parametrize(
    "spec, bad",
    [
        ("l40s:2,bogus:1", "'bogus:1'"),
        ("l40s:x", "'l40s:x'"),
        ("l40s:0", "'l40s:0'"),
        ("h100-sxm:2@xid=5:79:1s", "'h100-sxm:2@xid=5:79:1s'"),
        ("h100-sxm:2@boom", "'h100-sxm:2@boom'"),
        ("", "SPEC"),
        ("/nonexistent/profile.json", "not found"),
    ],
)
def test_bad_spec_is_one_line_error_naming_the_item(spec, bad):
    with pytest.raises(AgentError) as info:
        parse_spec(spec)
    msg = str(info.value)
    assert bad in msg and "\n" not in msg
    assert "l40s" in msg and "h100-sxm-mig" in msg  # the known profile names


def test_profile_json_path_in_spec(tmp_path):
    import json

    from gpuagent.sim.profile import load_profile

    p = load_profile("l40s")
    p["product_name"] = "NVIDIA L40S custom"
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(p))
    items = parse_spec(f"{path}:3")
    assert items[0].count == 3 and items[0].profile["product_name"] == "NVIDIA L40S custom"


def test_rtx4090_pair_has_no_p2p(simulated_fleet):
    simulated_fleet("rtx4090:2")
    a, b = handles()
    statuses = p2p(a, b)
    assert statuses[pynvml.NVML_P2P_CAPS_INDEX_NVLINK] == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    for caps in (0, 1, 3, 4):
        assert statuses[caps] == pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b) == pynvml.NVML_TOPOLOGY_HOSTBRIDGE


def test_l40s_behind_switches(simulated_fleet):
    simulated_fleet("l40s:8")
    hs = handles()
    a, b = hs[0], hs[1]
    statuses = p2p(a, b)
    assert statuses[pynvml.NVML_P2P_CAPS_INDEX_NVLINK] == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    assert all(statuses[c] == pynvml.NVML_P2P_STATUS_OK for c in (0, 1, 3, 4))
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(hs[0], hs[1]) == pynvml.NVML_TOPOLOGY_SINGLE  # PIX
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(hs[0], hs[2]) == pynvml.NVML_TOPOLOGY_MULTIPLE  # PXB
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(hs[0], hs[5]) == pynvml.NVML_TOPOLOGY_SYSTEM  # other socket
    assert p2p(hs[0], hs[5])[0] == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
    near = pynvml.nvmlDeviceGetTopologyNearestGpus(hs[0], pynvml.NVML_TOPOLOGY_MULTIPLE)
    assert sorted(pynvml.nvmlDeviceGetIndex(h) for h in near) == [1, 2, 3]
    assert len(pynvml.nvmlSystemGetTopologyGpuSet(1)) == 4
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetNvLinkState(a, 0)


def test_h100_sxm_nvlink_between_all_pairs(simulated_fleet):
    simulated_fleet("h100-sxm:8")
    hs = handles()
    for a, b in itertools.combinations(hs, 2):
        assert pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK) == pynvml.NVML_P2P_STATUS_OK
        assert pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ[0]) == pynvml.NVML_P2P_STATUS_OK
    for h in hs:
        assert [pynvml.nvmlDeviceGetNvLinkState(h, link) for link in range(18)] == [1] * 18
        assert pynvml.nvmlDeviceGetNvLinkVersion(h, 0) == pynvml.NVML_NVLINK_VERSION_4_0
        assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        assert pynvml.nvmlDeviceGetNvLinkCapability(h, 0, pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED) == 1


def test_h100_pcie_nvlink_bridge_pairs(simulated_fleet):
    simulated_fleet("h100-pcie:4")
    hs = handles()
    nvl = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    assert pynvml.nvmlDeviceGetP2PStatus(hs[0], hs[1], nvl) == pynvml.NVML_P2P_STATUS_OK
    assert pynvml.nvmlDeviceGetP2PStatus(hs[2], hs[3], nvl) == pynvml.NVML_P2P_STATUS_OK
    assert pynvml.nvmlDeviceGetP2PStatus(hs[1], hs[2], nvl) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(hs[0], 0).busId
    assert remote == pynvml.nvmlDeviceGetPciInfo_v3(hs[1]).busId
    assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(hs[2], 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU


def test_odd_h100_pcie_has_inactive_bridge(simulated_fleet):
    simulated_fleet("h100-pcie:1")
    (h,) = handles()
    assert pynvml.nvmlDeviceGetNvLinkState(h, 0) == pynvml.NVML_FEATURE_DISABLED


def test_mixed_models_have_no_p2p(simulated_fleet):
    simulated_fleet("l40s:2,h100-sxm:1")
    a, b, c = handles()
    assert set(p2p(a, c).values()) == {pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED}
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(a, c) in (
        pynvml.NVML_TOPOLOGY_NODE,
        pynvml.NVML_TOPOLOGY_SYSTEM,
    )
    assert p2p(a, b)[0] == pynvml.NVML_P2P_STATUS_OK


def test_pci_bus_ids_unique(simulated_fleet):
    simulated_fleet("l40s:4,rtx4090:2,h100-sxm:8")
    ids = [pynvml.nvmlDeviceGetPciInfo_v3(h).busId for h in handles()]
    assert len(set(ids)) == len(ids) == 14
