#!/usr/bin/env bash
# mypy over agent/ and plugins/ as the package they install as: setup.cfg's package_dir maps
# gpuagent -> agent/ and gpuagent.plugins -> plugins/, which mypy cannot read, so a tree of
# symlinks in .mypy_cache/tree/gpuagent stands for the installed package (rebuilt each run, so a
# new module is checked at once) and the report names the files in the repository
# (agent/..., plugins/...). Settings: [tool.mypy] in pyproject.toml. The errors not fixed yet are
# listed in .ci/mypy-baseline.txt: an error not in it fails, and so does one listed that is gone
# (scripts/mypy-baseline.py; `--write` after the arguments to mypy rewrites the list).
set -euo pipefail
cd "$(dirname "$0")/.."
tree=.mypy_cache/tree
rm -rf "$tree"
mkdir -p "$tree/gpuagent"
for entry in agent/*; do
  case "$entry" in */__pycache__) continue ;; esac
  ln -s "$PWD/$entry" "$tree/gpuagent/"
done
ln -s "$PWD/plugins" "$tree/gpuagent/plugins"
write=()
args=()
for arg in "$@"; do
  if [ "$arg" = --write ]; then write=(--write); else args+=("$arg"); fi
done
status=0
MYPYPATH="$tree" .venv/bin/mypy -p gpuagent "${args[@]}" >"$tree/raw" 2>&1 || status=$?
sed -e "s#^$tree/gpuagent/plugins/#plugins/#" -e "s#^$tree/gpuagent/#agent/#" "$tree/raw" >"$tree/report"
if [ "$status" -gt 1 ]; then cat "$tree/report"; exit "$status"; fi  # mypy itself failed (2): no report to judge
.venv/bin/python scripts/mypy-baseline.py "$tree/report" "${write[@]}"
