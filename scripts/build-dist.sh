#!/usr/bin/env bash
# Builds dist/gpuagent-<version>.tar.gz (sdist) and dist/gpuagent-<version>-py3-none-any.whl (the
# wheel, built from the sdist so the sdist is proved complete) and checks both with `twine check`.
# Needs setuptools, wheel and twine in the Python that runs it (PYTHON, default .venv/bin/python:
# the test extra has them). Usage: scripts/build-dist.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
if ! "$python" -c 'import setuptools, wheel, twine' 2>/dev/null; then
  echo "build-dist: $python lacks setuptools, wheel or twine: run ./scripts/setup.sh test first (or set PYTHON to one that has them)" >&2
  exit 1
fi
py="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Build from a copy: the checkout keeps no build/ or egg-info of this build.
tar --exclude=.venv --exclude=.git --exclude=dist --exclude=build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=device-out -cf - . | (mkdir "$work/src" && tar -xf - -C "$work/src")
(cd "$work/src" && "$py" -c 'import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))' "$work/sdist") >/dev/null
sdist="$(ls "$work"/sdist/gpuagent-*.tar.gz)"
tar -xzf "$sdist" -C "$work"
(cd "$work"/gpuagent-*/ && "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel" .) >/dev/null
cp "$sdist" "$work"/wheel/gpuagent-*.whl "$out/"
"$py" -m twine check --strict "$out/$(basename "$sdist")" "$out"/"$(basename "$work"/wheel/gpuagent-*.whl)"
ls -1 "$out/$(basename "$sdist")" "$out"/"$(basename "$work"/wheel/gpuagent-*.whl)"
