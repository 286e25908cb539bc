"""NVML conformance: every NVML function a run calls, forced to each code nvml.h documents for it.

agent/gpus/nvml_conformance.json lists the functions and their documented codes (built from
nvml.h by scripts/nvml-conformance-table.py; it names the header version). Here:

- the table covers exactly the C symbols a `run --once` over every built-in profile calls
  (traced by the simulator at the libnvidia-ml boundary);
- for each function x each code, one in-process `run --once` over the same fleet with that
  single fault forced (SPEC `force=SYMBOL:CODE`) must finish without an exception or a
  traceback, keep every measurement of every GPU that the fault-free run had (a measurement
  may vanish only where the call is what says the feature exists: MIG, vGPU, NVLink, GPM,
  P2P, the process list), and count the refusal in the `gpuagent` measurement.

GPU identity calls are forced on one GPU (that GPU is reported unavailable, the others run);
the calls without which the agent cannot start (nvmlInit, the device count) must give the
one-line error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nvml.runs import FLEET, Run, base_symbol, keyed, lost_fields, run_once, spec_with

from gpuagent.sim.profile import BUILTIN_NAMES

REPO = Path(__file__).resolve().parents[2]
TABLE = json.loads((REPO / "agent" / "gpus" / "nvml_conformance.json").read_text())
FUNCTIONS: dict[str, dict] = TABLE["functions"]

NOT_FORCED = {"NVML_SUCCESS", "NVML_ERROR_GPU_IS_LOST", "any"}  # GPU_IS_LOST: the lost-GPU tests
UNSPECIFIED = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_UNKNOWN")
# Called by the health collector's XID watcher directly, outside the access layer (it owns the
# event set and handles their codes itself): a refusal is logged there, not counted.
NOT_COUNTED = {"nvmlDeviceRegisterEvents", "nvmlEventSetCreate", "nvmlEventSetWait_v2"}
# NOT_FOUND is an answer ("no such object now": an empty MIG slot), not a refusal.
ANSWERS = {"NVML_ERROR_NOT_FOUND"}
# Where NOT_FOUND is nvml.h's "no sample newer than lastSeenTimeStamp": the readings it would
# have given are rightly absent (there is nothing new to report), not lost.
NO_NEW_SAMPLES = {
    "nvmlDeviceGetProcessesUtilizationInfo": {
        f"gpu_process.{f}" for f in ("sm_util_pct", "mem_util_pct", "enc_util_pct", "dec_util_pct")
    },
}
# Calls the agent probes along a range (Gpu.probe): INVALID_ARGUMENT is NVML's "past the card's
# last link / profile", the end of the probe, so it is an answer there too.
PROBED = {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetGpuInstanceProfileInfoV"}


def forced_codes(entry: dict) -> list[str]:
    codes = [c for c in entry["codes"] if c not in NOT_FORCED]
    if "any" in entry["codes"]:
        codes += UNSPECIFIED
    codes.append("NVML_ERROR_FUNCTION_NOT_FOUND")
    if "deprecated_since" in entry:
        codes.append("NVML_ERROR_DEPRECATED")
    return list(dict.fromkeys(codes))


def traced() -> set[str]:
    """The C symbols one fault-free `run --once` over every built-in profile calls (~0.3 s)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run = run_once(FLEET, Path(tmp))
    return {symbol for symbol, n in run.calls.items() if n}


CALLED = traced()
# Every function a run calls, forced to each of its codes (one not in the table fails below).
CASES = [(symbol, code) for symbol, entry in FUNCTIONS.items() if symbol in CALLED for code in forced_codes(entry)]


def _fast_lane_cases() -> set[tuple[str, str]]:
    """The first case of each role (init, identity, feature, reading, teardown): every branch of
    the test in the fast lane; the ~460 cases in all (~2 min) run in the whole suite."""
    first: dict[str, tuple[str, str]] = {}
    for symbol, code in CASES:
        first.setdefault(FUNCTIONS[symbol]["role"], (symbol, code))
    return set(first.values())


FAST = _fast_lane_cases()


def short(code: str) -> str:
    return code.removeprefix("NVML_ERROR_")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Run:
    run = run_once(FLEET, tmp_path_factory.mktemp("baseline"))
    assert run.error is None, run.error
    assert not run.collector_errors(), run.collector_errors()
    return run


def test_table_names_its_header_and_every_function_has_codes():
    assert TABLE["nvml_version"] and "nvml.h" in TABLE["header"]
    for symbol, entry in FUNCTIONS.items():
        assert entry["role"] in ("init", "identity", "feature", "reading", "teardown"), symbol
        assert entry["codes"], f"{symbol}: no documented return code"
        if entry["role"] == "feature":
            assert "may_vanish" in entry, symbol


def test_table_covers_every_function_a_run_calls(baseline):
    called = {symbol for symbol, n in baseline.calls.items() if n}
    assert called == CALLED
    missing = sorted(called - set(FUNCTIONS))
    assert not missing, (
        f"called but not in agent/gpus/nvml_conformance.json (scripts/nvml-conformance-table.py): {missing}"
    )
    # Rows no run calls are only the fallbacks (older spellings tried where the newer is refused).
    assert {s for s in FUNCTIONS if s not in called} == {s for s, e in FUNCTIONS.items() if e.get("traced") is False}


def test_every_gpu_of_the_fleet_reports_in_the_baseline(baseline):
    gpus = {p.tags["gpu"] for p in baseline.points if p.measurement == "gpu_power"}
    assert gpus == {str(i) for i in range(len(BUILTIN_NAMES))}


@pytest.mark.parametrize(
    ("symbol", "code"),
    [pytest.param(s, c, id=f"{s}:{short(c)}", marks=() if (s, c) in FAST else pytest.mark.slow) for s, c in CASES],
)
def test_one_forced_fault(symbol, code, baseline, tmp_path):
    entry = FUNCTIONS[symbol]
    role = entry["role"]
    run = run_once(spec_with(symbol, code, 0 if role == "identity" else None), tmp_path)
    assert not run.tracebacks(), run.tracebacks()
    if role == "init":
        # The agent cannot start: the one-line error, never a traceback.
        assert run.error and "\n" not in run.error, run.error
        return
    assert run.error is None, run.error
    assert not run.collector_errors(), f"a collector failed: {run.collector_errors()}"

    before, after = keyed(baseline), keyed(run)
    may_vanish = set(entry.get("may_vanish", ()))
    if role == "identity":
        # GPU 0 cannot be opened: reported unavailable, and every other GPU reports as before.
        unavailable = [p for p in run.own(gpu="0") if p.fields.get("gpu_available") is False]
        assert unavailable and base_symbol(symbol) in unavailable[0].fields["gpu_unavailable_reason"]
        before = {k: v for k, v in before.items() if ("gpu", "0") not in k[1] and ("peer_gpu", "0") not in k[1]}
    missing = sorted(k for k in before if k not in after and k[0] not in may_vanish)
    assert not missing, f"measurements lost: {missing[:5]}"
    # Only the fields the call feeds (the table's `feeds`, read from the run where the function
    # does not exist at all): a transient answer costs no more than an absent function.
    lost = {f for f in lost_fields(before, after) if f.split(".", 1)[0] not in may_vanish}
    if code == "NVML_ERROR_NOT_FOUND":
        lost -= NO_NEW_SAMPLES.get(symbol, set())
    assert lost <= set(entry.get("feeds", ())), (
        f"fields lost beyond what {symbol} feeds: {sorted(lost - set(entry.get('feeds', ())))}"
    )

    if code in ANSWERS or role == "teardown" or symbol in NOT_COUNTED:
        return
    if symbol in PROBED and code == "NVML_ERROR_INVALID_ARGUMENT":
        return
    counted = [
        p
        for p in run.nvml_errors()
        if base_symbol(p.tags["nvml_call"]) == base_symbol(symbol) and p.tags["nvml_error"] == short(code)
    ]
    assert counted, f"no gpuagent point counts {symbol} answering {short(code)}"
    assert all(p.fields["nvml_errors_total"] >= 1 for p in counted)
