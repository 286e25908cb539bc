"""The GPU path on a real card: `pytest -m gpu` (skips with the reason where there is none)."""

import pytest

pytestmark = pytest.mark.gpu


def _gpu_backend_available():
    import pynvml

    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:
        return f"no NVIDIA driver ({exc})"
    if count == 0:
        return "NVML reports no GPU"
    for module in ("cupy", "torch"):
        try:
            __import__(module)
            return None
        except ImportError:
            continue
    return "neither CuPy nor PyTorch is installed (pip install cupy-cuda12x or torch)"


def test_gpu_probe_finds_the_l2_knee():
    reason = _gpu_backend_available()
    if reason:
        pytest.skip(reason)
    from gpuagent.probe.cli import ProbeOptions, probe_l2

    result, session = probe_l2(ProbeOptions(gpu=0, max_util=100.0))
    try:
        doc = result.as_json()
        print(doc)  # the curve, for bench/RESULTS.md (pytest -s)
        assert result.method in ("cupy", "torch")
        assert result.gpu_tags["uuid"].startswith(("GPU-", "MIG-"))
        l2 = result.reported_cache_bytes["L2"]
        knee = result.knee
        assert knee is not None, doc
        # The partitioned L2 of A100/H100/H200 may give an effective size well below the reported one.
        assert l2 / 8 <= knee.bytes <= 2 * l2, doc
        assert knee.ratio > 1.3, doc
        assert len(result.to_points({"host": "t"})) == len(result.sweep.sizes) + 1
    finally:
        session.close()
