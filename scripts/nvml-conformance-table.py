#!/usr/bin/env python3
"""Build agent/gpus/nvml_conformance.json: the return codes nvml.h documents for each NVML function
the agent calls.

    scripts/nvml-conformance-table.py NVML_H [--older OLDER_NVML_H] [--symbols FILE] > agent/gpus/nvml_conformance.json
    scripts/nvml-conformance-table.py --reuse agent/gpus/nvml_conformance.json > new.json   # no header at hand

NVML_H is NVIDIA's header (e.g. gen/nvml/nvml.h of github.com/NVIDIA/go-nvml). The symbols
are the C functions a `gpuagent run --once` over every built-in simulator profile really
calls (traced by the simulator; --symbols FILE gives them one a line instead). For each, the
doc comment's `@return` list is read; a symbol without a doc comment of its own (an older
version kept for compatibility, e.g. nvmlDeviceGetMemoryInfo beside ..._v2) is read from
the documented version of the same function, and says so (`documented_as`). NVML 13 strips
the @return lists of the functions it deprecates (the applications clocks): those are read
from OLDER_NVML_H (e.g. go-nvml's 12.9 header) and say so (`documented_in`).

The codes the conformance test forces are the documented ones other than NVML_SUCCESS and
GPU_IS_LOST (the lost-GPU path, tested on its own). Each function also gets its `role`:
- `init`: the agent cannot start without it (one-line error, tested as such);
- `identity`: opens a GPU (a refusal makes that one GPU unavailable, the others run);
- `feature`: the call that says a feature exists (MIG, vGPU, NVLink, GPM, P2P, processes):
  its measurement may vanish when it is refused;
- `reading`: any other: a refusal costs only the fields it feeds;
- `teardown`: called while the agent stops (errors ignored).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROLES = {
    "init": {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlDeviceGetCount_v2"},
    "identity": {
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetPciInfo_v3",
    },
    "teardown": {"nvmlShutdown", "nvmlEventSetFree", "nvmlGpmSampleFree"},
}
# Feature calls: the measurements they may take with them when refused.
FEATURES = {
    "mig": ("gpu_mig",),
    "vgpu": ("gpu_vgpu",),
    "nvlink": ("gpu_nvlink",),
    "gpm": (),
    "p2p": ("gpu_p2p",),
    "processes": ("gpu_process",),
}
FEATURE_OF = [
    (re.compile(r"^nvmlGpm"), "gpm"),
    (re.compile(r"Mig|GpuInstance|ComputeInstance|nvmlDeviceGetAttributes"), "mig"),
    (re.compile(r"Vgpu|Virtualization"), "vgpu"),
    (re.compile(r"NvLink"), "nvlink"),
    (re.compile(r"P2PStatus|TopologyCommonAncestor"), "p2p"),
    (re.compile(r"RunningProcesses"), "processes"),
]

# Older spellings and fallbacks the agent calls only where the newer call is refused (e.g. by
# an older driver, or by a simulator profile that answers as one): listed so that the table
# stays complete when such a run traces them.
FALLBACKS = (
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlVgpuInstanceGetLicenseStatus",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    # Read in the cycle's field-values batch; called where the driver refuses the field.
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetEnforcedPowerLimit",
)

DECL = re.compile(r"(?:DEPRECATED\(([\d.]+)\)\s+)?nvmlReturn_t\s+DECLDIR\s+(nvml\w+)\s*\(")
CODE = re.compile(r"\\ref\s+(NVML_(?:SUCCESS|ERROR_\w+))")


def documented(header: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Function -> the codes its doc comment's @return list names (functions with a comment),
    and function -> the version that deprecated it (DEPRECATED(x) before the declaration)."""
    out: dict[str, list[str]] = {}
    deprecated: dict[str, str] = {}
    for match in DECL.finditer(header):
        since, name = match.group(1), match.group(2)
        if since:
            deprecated[name] = since
        before = header[: match.start()].rstrip()
        # Group markers (/** @} */) may stand between a declaration and its comment.
        while re.search(r"/\*\*\s*@[{}]\s*\*/$", before):
            before = before[: before.rfind("/**")].rstrip()
        if not before.endswith("*/"):
            continue
        start = before.rfind("/**")
        comment = before[start:]
        at = comment.find("@return")
        if at < 0:
            alias = re.search(r"@deprecated\s+Use\s+\\ref\s+(nvml\w+)", comment)
            if alias:
                out.setdefault(name, ["alias:" + alias.group(1)])  # resolved in main()
            continue
        codes = []
        for code in CODE.findall(comment[at:]):
            if code not in codes:
                codes.append(code)
        if "Nonzero NVML_ERROR_" in comment[at:]:
            codes.append("any")  # "Nonzero NVML_ERROR_? enum on error": the codes are not listed
        out.setdefault(name, codes)
    return out, deprecated


def role(symbol: str) -> tuple[str, str | None]:
    for name, symbols in ROLES.items():
        if symbol in symbols:
            return name, None
    for pattern, feature in FEATURE_OF:
        if pattern.search(symbol):
            return "feature", feature
    return "reading", None


def base(symbol: str) -> str:
    return re.sub(r"(_v\d+|V)$", "", symbol)


def _runs():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from nvml import runs

    return runs


def traced_run():
    """A `run --once` over every built-in profile (in this process), its calls traced."""
    import tempfile

    runs = _runs()
    with tempfile.TemporaryDirectory() as tmp:
        run = runs.run_once(runs.FLEET, Path(tmp))
    if run.error:
        sys.exit(f"the traced run failed: {run.error}")
    return run


def feeds(symbol: str, baseline, may_vanish: set[str]) -> list[str]:
    """The fields (``measurement.field``) a run loses when ``symbol`` does not exist at all
    (FUNCTION_NOT_FOUND everywhere): what the call feeds, for a reviewer to read and for the
    test to hold every other code of the function to."""
    import tempfile

    runs = _runs()
    with tempfile.TemporaryDirectory() as tmp:
        run = runs.run_once(runs.spec_with(symbol, "FUNCTION_NOT_FOUND"), Path(tmp))
    lost = runs.lost_fields(runs.keyed(baseline), runs.keyed(run))
    return sorted(f for f in lost if f.split(".", 1)[0] not in may_vanish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("header", type=Path, nargs="?", help="nvml.h (none: --reuse's codes only)")
    parser.add_argument("--older", type=Path, help="an older nvml.h for functions the newer one no longer documents")
    parser.add_argument("--symbols", type=Path, help="C symbols one a line (default: trace a run)")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="an earlier table: its codes stand for functions it lists (no header needed for them)",
    )
    args = parser.parse_args()
    reused = json.loads(args.reuse.read_text()) if args.reuse else {"functions": {}}
    if args.header is None and not args.reuse:
        parser.error("give nvml.h, or --reuse an earlier table")
    header = args.header.read_text(errors="replace") if args.header else ""
    version = re.search(r"NVML VERSION:\s*([\d.]+)", header)
    docs, deprecated = documented(header)
    older_docs, older_version = {}, None
    if args.older:
        older_header = args.older.read_text(errors="replace")
        older_docs = documented(older_header)[0]
        older_match = re.search(r"NVML VERSION:\s*([\d.]+)", older_header)
        older_version = older_match.group(1) if older_match else str(args.older)
    by_base: dict[str, str] = {}
    for name in docs:
        by_base.setdefault(base(name), name)
        if base(name) != name:
            by_base[base(name)] = name  # the versioned declaration is the current one
    baseline = traced_run()
    traced = {s for s, n in baseline.calls.items() if n}
    symbols = (
        [s.strip() for s in args.symbols.read_text().splitlines() if s.strip()]
        if args.symbols
        else sorted(traced | set(FALLBACKS))
    )
    functions = {}
    for symbol in symbols:
        source = symbol if symbol in docs else by_base.get(base(symbol))
        if source and docs[source][0].startswith("alias:"):  # "@deprecated Use \ref X instead"
            source = docs[source][0].removeprefix("alias:")
        codes, documented_in = (docs[source], None) if source else (None, None)
        if codes is None and symbol in older_docs:
            source, codes, documented_in = symbol, older_docs[symbol], older_version
        earlier = reused["functions"].get(symbol)
        if earlier is not None and (codes is None or args.header is None):
            codes = earlier["codes"]
            for key in ("documented_as", "documented_in", "deprecated_since"):
                if key in earlier:
                    (deprecated if key == "deprecated_since" else {})[symbol] = earlier[key]
            source, documented_in = earlier.get("documented_as", symbol), earlier.get("documented_in")
        if codes is None:
            sys.exit(f"{symbol}: no documented declaration in {args.header or 'the reused table'}")
        kind, feature = role(symbol)
        entry = {"codes": codes, "role": kind}
        if documented_in:
            entry["documented_in"] = documented_in
        if feature:
            entry["feature"] = feature
            entry["may_vanish"] = list(FEATURES[feature])
        if source != symbol:
            entry["documented_as"] = source
        if symbol in deprecated or source in deprecated:
            entry["deprecated_since"] = deprecated.get(symbol) or deprecated[source]
        if symbol not in traced:
            entry["traced"] = False  # a fallback: called only where the newer call is refused
        if kind in ("reading", "feature"):
            entry["feeds"] = feeds(symbol, baseline, set(entry.get("may_vanish", ()))) if symbol in traced else []
        functions[symbol] = entry
    json.dump(
        {
            "about": "Return codes nvml.h documents for every NVML function gpuagent calls; "
            "built by scripts/nvml-conformance-table.py, checked by tests/nvml/test_conformance.py.",
            "header": "nvml.h from github.com/NVIDIA/go-nvml gen/nvml/nvml.h",
            "nvml_version": version.group(1) if version else reused.get("nvml_version"),
            "forced": "every documented code but NVML_SUCCESS and NVML_ERROR_GPU_IS_LOST (the lost-GPU "
            "path has tests of its own), plus NVML_ERROR_FUNCTION_NOT_FOUND for every function (what "
            "pynvml answers when the driver lacks the symbol), NVML_ERROR_DEPRECATED for functions "
            "the header marks DEPRECATED (what drivers from 590 answer for the applications clocks), "
            "and NOT_SUPPORTED, NO_PERMISSION and UNKNOWN where the header says only 'any' (\"Nonzero "
            'NVML_ERROR_? enum on error", the GPM calls)',
            "functions": functions,
        },
        sys.stdout,
        indent=1,
        sort_keys=False,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
