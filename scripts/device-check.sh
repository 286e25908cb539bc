#!/usr/bin/env bash
# gpuagent on a machine with a real NVIDIA GPU: one run, under five minutes, results in $OUT.
#
#   scripts/device-check.sh                  # from the repository root; OUT defaults to ./device-out
#   OUT=/tmp/out scripts/device-check.sh
#
# Writes at most 8 flat files to $OUT (docs/device-check.md says what each holds):
#   summary.log          one line per step (ok / FAILED / skipped, seconds, why) and the figures
#   details.log          every step's command and stderr
#   nvidia-smi-q.txt     `nvidia-smi -q`, to check the profile importer against
#   inspect.json         `gpuagent inspect --json`, validated against the shipped schema
#   <model>-profile.json `gpuagent sim record` of GPU 0 (e.g. h200-profile.json)
#   bench.json           `python -m bench --quick --json --only cycle --only nvidia_smi` on real NVML
#   probe-l2.json        `python -m gpuagent.probe --json` (CuPy or PyTorch)
#   pytest-gpu.txt       `pytest -m gpu -q -rs`
#
# The machine has no network: Python packages come only from the wheels carried in
# .whl/ (scripts/fetch-device-wheels.sh fetches them), installed into $DEVICE_SITE
# when the interpreter lacks them or has an older version; gpuagent itself is built
# from this tree into the same folder. A failing step is logged and the rest still run.
# Without a driver every step that needs one is skipped and the summary says so.
#
# Environment: OUT, PYTHON (default python3), WHEELS (default .whl), DEVICE_SITE
# (default /tmp/gpuagent-site), DEVICE_CHECK_BUDGET (seconds, default 285),
# GPUAGENT_DEVICE_CHECK_NO_GPU=1 (behave as on a machine without a driver: for tests).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
OUT=${OUT:-./device-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${DEVICE_SITE:-/tmp/gpuagent-site}
BUDGET=${DEVICE_CHECK_BUDGET:-285}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 REPO OUT PY WHEELS SITE WORK
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export NO_COLOR=1

# Only our own files: a stale profile or log from an earlier run must not pass for this one's.
rm -f "$OUT"/summary.log "$OUT"/details.log "$OUT"/nvidia-smi-q.txt "$OUT"/inspect.json \
      "$OUT"/*-profile.json "$OUT"/bench.json "$OUT"/probe-l2.json "$OUT"/pytest-gpu.txt
SUMMARY=$OUT/summary.log
DETAILS=$OUT/details.log
: >"$SUMMARY"
: >"$DETAILS"
START=$(date +%s)
FAILED=()

say() { printf '%s\n' "$*" | tee -a "$SUMMARY" >&2; }
row() { printf '%-16s %-8s %6ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUMMARY" >&2; }
skip() { row "$1" skipped 0 "$2"; }
note() { printf '%s' "$*" >"$WORK/note"; }  # a step's one-line result, for its summary row

# run_step NAME LIMIT_S STDOUT_FILE COMMAND...: time-boxed, stderr to details.log, a row in the summary.
run_step() {
    local name=$1 limit=$2 outfile=${3:-/dev/null}
    shift 3
    local left=$((BUDGET - ($(date +%s) - START)))
    if ((left < 10)); then
        skip "$name" "out of time (the whole check stays under ${BUDGET}s)"
        return 1
    fi
    ((limit > left)) && limit=$left
    : >"$WORK/note"
    printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >>"$DETAILS"
    local t0 t1 rc
    t0=$(date +%s.%N)
    # Through bash -c, so that a step may be one of the exported functions below.
    timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" >"$outfile" 2>"$WORK/stderr"
    rc=$?
    t1=$(date +%s.%N)
    cat "$WORK/stderr" >>"$DETAILS"
    local secs note
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    note=$(cat "$WORK/note")
    if ((rc == 0)); then
        row "$name" ok "$secs" "$note"
    else
        if ((rc == 124 || rc == 137)); then
            note="timed out after ${limit}s${note:+; $note}"
        else
            local last
            last=$(grep -v '^\s*$' "$WORK/stderr" | tail -n 1 | cut -c1-160)
            note="exit $rc${last:+: $last}${note:+; $note}"
        fi
        row "$name" FAILED "$secs" "$note (details.log)"
        FAILED+=("$name")
    fi
    return $rc
}

# --- steps (functions, so that run_step can time-box them) ------------------------------------

step_install() {
    mkdir -p "$SITE" || return 1
    local wheel_note
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        # Install a carried wheel only where this Python lacks the package or has an older one:
        # the machine's own numpy, pytest, click … stay, so torch and CuPy keep theirs.
        "$PY" - "$WHEELS" >"$WORK/to-install" 2>"$WORK/wheel-note" <<'EOF' || return 1
import pathlib, sys
from importlib import metadata
try:
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.tags import sys_tags
    from pip._vendor.packaging.utils import parse_wheel_filename
    from pip._vendor.packaging.version import InvalidVersion, Version
supported = set(sys_tags())
install, there, foreign = [], [], []
for whl in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name, version, _, tags = parse_wheel_filename(whl.name)
    if not tags & supported:
        foreign.append(whl.name)
        continue
    try:
        have = Version(metadata.version(name))
    except (metadata.PackageNotFoundError, InvalidVersion):
        have = None
    if have is not None and have >= version:
        there.append(f"{name} {have}")
        continue
    install.append(str(whl))
for path in install:
    print(path)
msg = f"{len(install)} wheels installed, {len(there)} packages already there"
if foreign:
    msg += f", {len(foreign)} wheels not for this Python ({', '.join(foreign)})"
print(msg, file=sys.stderr)
EOF
        wheel_note=$(cat "$WORK/wheel-note")
        if [[ -s "$WORK/to-install" ]]; then
            xargs -d '\n' -a "$WORK/to-install" "$PY" -m pip install -q --no-index --no-deps --no-compile \
                --no-cache-dir --disable-pip-version-check --upgrade --target "$SITE" || return 1
        fi
    else
        wheel_note="no wheels in $WHEELS/ (scripts/fetch-device-wheels.sh): using the packages installed"
    fi
    # gpuagent itself: already this tree (an editable install), or built from a copy of it.
    local where
    where=$("$PY" -c 'import gpuagent, os; print(os.path.dirname(os.path.realpath(gpuagent.__file__)))' 2>/dev/null)
    if [[ "$where" == "$REPO/agent" ]]; then
        note "$wheel_note; gpuagent: this tree, already installed"
        return 0
    fi
    mkdir -p "$WORK/src"
    tar -C "$REPO" --exclude=./.whl --exclude=./.venv --exclude=./.git --exclude=./device-out \
        --exclude=./build --exclude='*.egg-info' -cf - . | tar -C "$WORK/src" -xf - || return 1
    if "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
        --disable-pip-version-check --upgrade --target "$SITE" "$WORK/src" >&2; then
        note "$wheel_note; gpuagent: built from this tree into $SITE"
        return 0
    fi
    # No build backend: link the two packages into place (no entry points: pytest gets -p gpuagent.testing).
    echo "building gpuagent failed; linking agent/ and plugins/ into $SITE/gpuagent instead" >&2
    rm -rf "$SITE/gpuagent" && mkdir -p "$SITE/gpuagent" || return 1
    ln -s "$REPO"/agent/* "$SITE/gpuagent/" && ln -s "$REPO/plugins" "$SITE/gpuagent/plugins" || return 1
    touch "$WORK/linked"
    note "$wheel_note; gpuagent: agent/ and plugins/ linked into $SITE (the build failed)"
}

step_detect() {
    "$PY" - <<'EOF'
import os
import pynvml
import gpuagent
if os.environ.get("GPUAGENT_DEVICE_CHECK_NO_GPU") == "1":
    print("none\tno NVIDIA driver (GPUAGENT_DEVICE_CHECK_NO_GPU=1 says to behave as without one)")
    raise SystemExit
try:
    pynvml.nvmlInit()
except (pynvml.NVMLError, OSError) as exc:
    print(f"none\tno NVIDIA driver (NVML: {exc})")
    raise SystemExit
as_str = lambda v: v.decode() if isinstance(v, bytes) else str(v)
def name(i):  # a GPU that refuses its handle or name is listed with the code, not fatal
    try:
        return as_str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
    except pynvml.NVMLError as exc:
        return f"GPU {i} unavailable ({exc})"
def driver():
    try:
        return as_str(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as exc:
        return f"unknown ({exc})"
count = pynvml.nvmlDeviceGetCount()
names = [name(i) for i in range(count)]
print(f"{count}\t{count} GPU(s): {', '.join(names) or '-'}; driver {driver()}; gpuagent {gpuagent.__version__}")
EOF
}

step_inspect_schema() {
    "$PY" - "$OUT/inspect.json" <<'EOF'
import json, os, sys
import jsonschema
from gpuagent import facts
doc = json.load(open(sys.argv[1]))
jsonschema.validate(doc, facts.schema())
with open(f"{os.environ['WORK']}/note", "w") as fh:
    fh.write(f"{len(doc['gpus'])} GPU(s), valid against gpuagent/schemas/inspect.schema.json")
EOF
}

step_sim_record() {
    "$PY" -m gpuagent sim record -o "$WORK/profile.json" || return 1
    local slug
    slug=$("$PY" -c 'import json, re, sys; print(re.sub(r"[^A-Za-z0-9._-]+", "-", json.load(open(sys.argv[1]))["name"]))' "$WORK/profile.json") || return 1
    cp "$WORK/profile.json" "$OUT/${slug:-gpu}-profile.json" || return 1
    echo "${slug:-gpu}-profile.json" >"$WORK/profile-name"
    note "${slug:-gpu}-profile.json"
}

# The recording loads in the simulator, and its simulated GPU 0 records back to the same static facts.
step_sim_replay() {
    "$PY" - "$1" <<'EOF'
import json, sys
from gpuagent import sim
from gpuagent.sim.clock import ManualClock
from gpuagent.sim.record import record
real = json.load(open(sys.argv[1]))
sim.install(sys.argv[1], clock=ManualClock(), scenario="idle")
try:
    again = record(0)
finally:
    sim.uninstall()
keys = ("product_name", "architecture", "pci_device_id", "memory", "clocks_mhz", "power_w", "pcie",
        "ecc", "gpm", "nvlink", "unsupported")
def facts(p, k):
    v = p.get(k)
    if k == "clocks_mhz":
        return {"max": v["max"], "applications": v["applications"]}
    if k == "power_w":
        return {x: float(v[x]) for x in ("limit", "default", "min", "max")}
    if k == "pcie":
        return {x: v[x] for x in ("max_gen", "max_width", "current_width")}
    return v
differ = [k for k in keys if facts(real, k) != facts(again, k)]
for k in differ:
    print(f"{k}: recorded {facts(real, k)!r}, simulated {facts(again, k)!r}", file=sys.stderr)
if differ:
    sys.exit(f"the simulated device differs in: {', '.join(differ)}")
EOF
    local rc=$?
    ((rc == 0)) && note "the simulator loads it; its GPU 0 reports the same static facts"
    return $rc
}

# The nvidia-smi -q importer against what NVML itself reported.
step_sim_import() {
    "$PY" - "$OUT/nvidia-smi-q.txt" "$1" <<'EOF'
import json, sys
from gpuagent.sim.capture_import import import_capture
imported = import_capture(sys.argv[1])
real = json.load(open(sys.argv[2]))
pairs = {
    "product_name": (imported["product_name"], real["product_name"]),
    "pci_device_id": (int(imported["pci_device_id"], 16), int(real["pci_device_id"], 16)),
    "memory.total_mib": (imported["memory"]["total_mib"], real["memory"]["total_mib"]),
    "power_w.limit": (round(float(imported["power_w"]["limit"])), round(float(real["power_w"]["limit"]))),
    "clocks_mhz.max.sm": (imported["clocks_mhz"]["max"].get("sm"), real["clocks_mhz"]["max"].get("sm")),
    "clocks_mhz.max.memory": (imported["clocks_mhz"]["max"].get("memory"), real["clocks_mhz"]["max"].get("memory")),
    "l2_cache_bytes": (imported.get("l2_cache_bytes"), None),
}
differ = [k for k, (a, b) in pairs.items() if b is not None and a != b]
for k, (a, b) in pairs.items():
    print(f"{k}: imported {a!r}, recorded {b!r}", file=sys.stderr)
if differ:
    sys.exit(f"the nvidia-smi -q import differs from the NVML recording in: {', '.join(differ)}")
EOF
    local rc=$?
    ((rc == 0)) && note "nvidia-smi -q imports to the recording's product, PCI id, memory, power limit and max clocks"
    return $rc
}

step_bench() {
    "$PY" -m bench --quick --json "$@"
}

step_bench_real() {
    GPUAGENT_BENCH_REAL=1 "$PY" -m bench --quick --json "$@"
}

step_pytest() {
    local extra=()
    [[ -f "$WORK/linked" ]] && extra=(-p gpuagent.testing)
    "$PY" -m pytest -m gpu -q -rs --continue-on-collection-errors "${extra[@]}" "$@" 2>&1
    local rc=$?
    note "$(grep -E '[0-9]+ (passed|failed|skipped|error|deselected)' "$OUT/pytest-gpu.txt" | tail -n 1 | tr -d '=' | sed 's/^ *//')"
    # pytest: 0 all passed, 5 nothing collected (every gpu test deselected): not a failure of the step.
    ((rc == 5)) && return 0
    return $rc
}

# A line of figures per bench row, and the probe's knee, under their summary rows.
bench_figures() {
    "$PY" - "$OUT/bench.json" <<'EOF' 2>>"$DETAILS" | tee -a "$SUMMARY" >&2
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    holds = {True: "holds", False: "MISSED", None: "not measured"}[r.get("holds")]
    figure = r.get("error") or f"{r.get('figure')} {r.get('unit', '')}".strip()
    reason = (r.get("detail") or {}).get("reason")
    print(f"    {r['name']}: {figure} (goal {r.get('goal', '?')}: {holds}){f'; {reason}' if reason else ''}")
EOF
}

probe_figures() {
    "$PY" - "$OUT/probe-l2.json" <<'EOF' 2>>"$DETAILS" | tee -a "$SUMMARY" >&2
import json, sys
d = json.load(open(sys.argv[1]))
mib = lambda b: f"{b / 2**20:.1f} MiB" if b else "none"
l2 = d.get("reported_cache_bytes", {}).get("L2")
print(f"    {d['device']} ({d['method']}): knee {mib(d.get('knee_bytes'))} (reported L2 {mib(l2)}, "
      f"{d.get('reported_source') or '?'}); {d.get('bw_below_gbps')} GB/s below, {d.get('bw_above_gbps')} GB/s above, "
      f"ratio {d.get('ratio')}")
EOF
}

export -f step_install step_detect step_inspect_schema step_sim_record step_sim_replay step_sim_import \
    step_bench step_bench_real step_pytest note

# --- the run -----------------------------------------------------------------------------------

say "gpuagent device check: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname 2>/dev/null || cat /etc/hostname), $(uname -sm)"
say "python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])' 2>&1)"
commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null) && say "tree: commit $commit$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
say "$(printf '%-16s %-8s %7s  %s' step status time note)"

run_step install 150 "" step_install

HAVE_GPU=0
GPU_WHY="no NVIDIA driver"
if run_step detect 60 "$WORK/detect" step_detect; then
    IFS=$'\t' read -r count GPU_WHY <"$WORK/detect"
    [[ "$count" =~ ^[0-9]+$ ]] && ((count > 0)) && HAVE_GPU=1
    say "gpus: $GPU_WHY"
else
    GPU_WHY="NVML could not be checked (see details.log)"
fi
SMI=$(command -v nvidia-smi || true)
if [[ "${GPUAGENT_DEVICE_CHECK_NO_GPU:-0}" == 1 ]]; then SMI=""; fi

if [[ -n "$SMI" ]]; then
    run_step nvidia-smi-q 60 "$OUT/nvidia-smi-q.txt" "$SMI" -q
else
    skip nvidia-smi-q "no nvidia-smi on PATH$( ((HAVE_GPU)) || echo " ($GPU_WHY)")"
fi

if ((HAVE_GPU)); then
    run_step inspect 60 "$OUT/inspect.json" "$PY" -m gpuagent inspect --json &&
        run_step inspect-schema 30 "" step_inspect_schema
    if run_step sim-record 60 "" step_sim_record; then
        profile="$OUT/$(cat "$WORK/profile-name")"
        run_step sim-replay 60 "" step_sim_replay "$profile"
        if [[ -s "$OUT/nvidia-smi-q.txt" ]]; then
            run_step sim-import 60 "" step_sim_import "$profile"
        else
            skip sim-import "no nvidia-smi -q capture to import"
        fi
    fi
    run_step bench 120 "$OUT/bench.json" step_bench_real --only cycle --only nvidia_smi
    [[ -s "$OUT/bench.json" ]] && bench_figures
    if "$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("cupy") or u.find_spec("torch")))' 2>/dev/null; then
        run_step probe-l2 150 "$OUT/probe-l2.json" "$PY" -m gpuagent.probe --json
        [[ -s "$OUT/probe-l2.json" ]] && probe_figures
    else
        skip probe-l2 "neither CuPy nor PyTorch is installed for $PY"
    fi
    # Only the modules that hold gpu-marked tests: collecting the whole suite would import what
    # only the development machine has (test servers, the example plugin) for nothing.
    mapfile -t gpu_tests < <(grep -rlE --include='*.py' 'mark\.gpu\b' tests plugins | sort)
    run_step pytest-gpu 200 "$OUT/pytest-gpu.txt" step_pytest "${gpu_tests[@]}"
else
    for step in inspect sim-record bench-cycle probe-l2; do skip "$step" "$GPU_WHY"; done
    # What can run without a driver still runs: the nvidia_smi row (it says what is missing) and
    # the real-GPU tests of tests/gpu (each skips with its reason).
    run_step bench-nvidia-smi 60 "$OUT/bench.json" step_bench --only nvidia_smi
    [[ -s "$OUT/bench.json" ]] && bench_figures
    run_step pytest-gpu 120 "$OUT/pytest-gpu.txt" step_pytest tests/gpu
fi

# Empty outputs of failed steps are noise, not results.
find "$OUT" -maxdepth 1 -type f -empty ! -name details.log ! -name summary.log -delete
files=$(cd "$OUT" && ls | tr '\n' ' ')
say "done in $(($(date +%s) - START))s; ${#FAILED[@]} step(s) failed${FAILED[*]:+: ${FAILED[*]}}; files in $OUT: $files"
((${#FAILED[@]} == 0))
