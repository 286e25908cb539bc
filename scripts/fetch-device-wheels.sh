#!/usr/bin/env bash
# Fetch, here (with network), every wheel that gpuagent, its tests and the bench
# need on the lent GPU machine (no network there; x86-64 Linux, CPython 3.12).
# They land in .whl/ (ignored by git); scripts/device-check.sh installs them there.
#
#   scripts/fetch-device-wheels.sh              # the default set
#   WITH_CUPY=1 scripts/fetch-device-wheels.sh  # also cupy-cuda12x (~100 MiB: over the 64 MiB
#                                               # a device call carries; the H200 image has CuPy)
#   PYVER=3.11 scripts/fetch-device-wheels.sh   # another target Python
#
# Versions: the ones installed in this checkout's .venv where a package is there
# (tested together), else pip's newest for the target. pip resolves each
# package's dependencies for the target Python and platform.
set -euo pipefail

cd "$(dirname "$0")/.."
DEST=${DEST:-.whl}
PYVER=${PYVER:-3.12}
LOCAL_PY=${LOCAL_PY:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
PIP=${PIP:-$LOCAL_PY -m pip}

# What the package needs (setup.cfg install_requires), its tests, the bench, and
# the build tools for a non-editable install of this tree there (--no-build-isolation).
PACKAGES=(
    nvidia-ml-py click pluggy psutil pydantic pydantic-core rich bcrypt
    pytest jsonschema prometheus-client influxdb-client numpy setuptools wheel blessed wcwidth
)
if [[ "${WITH_CUPY:-0}" == 1 ]]; then PACKAGES+=(cupy-cuda12x); fi
# Pure-Python packages published as source only: built into wheels here. Their
# dependencies are named above (gpustat: nvidia-ml-py, psutil, blessed).
SOURCE_ONLY=(gpustat)

# name==version of the local .venv's copy, where it has one.
pins() {
    "$LOCAL_PY" - "$@" <<'EOF'
import sys
from importlib import metadata
for name in sys.argv[1:]:
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        print(name)
        continue
    # The build backend needs setuptools >= 68 (pyproject.toml); an older local copy is no pin.
    if name == "setuptools" and int(version.split(".")[0]) < 68:
        print("setuptools>=68")
        continue
    print(f"{name}=={version}")
EOF
}
mapfile -t REQS < <(pins "${PACKAGES[@]}")
mapfile -t SOURCE_REQS < <(pins "${SOURCE_ONLY[@]}")

mkdir -p "$DEST"
# Keep the wheels out of git (nothing to do when .gitignore already covers them).
if [[ -d .git ]] && ! git check-ignore -q "$DEST/x.whl" 2>/dev/null; then
    mkdir -p .git/info && echo "/$DEST/" >> .git/info/exclude
fi

PLATFORMS=()
for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
    PLATFORMS+=(--platform "$p")
done

echo "fetching for CPython $PYVER x86-64 into $DEST/: ${REQS[*]}" >&2
$PIP download --quiet --disable-pip-version-check --only-binary=:all: \
    --python-version "$PYVER" --implementation cp --abi "cp${PYVER/./}" --abi abi3 --abi none \
    "${PLATFORMS[@]}" -d "$DEST" "${REQS[@]}" 2>&1 | grep -v "^WARNING: Location" >&2 || true
echo "building pure-Python wheels: ${SOURCE_REQS[*]}" >&2
$PIP wheel --quiet --disable-pip-version-check --no-deps -w "$DEST" "${SOURCE_REQS[@]}" \
    2>&1 | grep -v "^WARNING: Location" >&2 || true

# Every package there, and one version of each: two would stop the whole install there.
"$LOCAL_PY" - "$DEST" "${PACKAGES[@]}" "${SOURCE_ONLY[@]}" <<'EOF'
import collections, pathlib, re, sys
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
seen = collections.defaultdict(list)
for whl in pathlib.Path(sys.argv[1]).glob("*.whl"):
    seen[norm(whl.name.split("-")[0])].append(whl.name)
missing = [n for n in sys.argv[2:] if norm(n) not in seen]
dupes = {k: v for k, v in seen.items() if len(v) > 1}
if missing:
    sys.exit(f"not fetched: {', '.join(missing)}")
if dupes:
    sys.exit(f"more than one version of: {dupes} (delete the older ones from {sys.argv[1]}/)")
EOF

count=$(ls "$DEST"/*.whl | wc -l)
size=$(du -sm "$DEST" | cut -f1)
echo "$count wheels, ${size} MiB in $DEST/ (a device call carries at most 64 MiB, tree included)" >&2
if (( size > 60 )); then
    echo "warning: $DEST/ is over 60 MiB; the tree and the wheels may not fit in one device call" >&2
fi
