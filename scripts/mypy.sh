#!/usr/bin/env bash
# mypy over agent/ and plugins/ as the package they install as: setup.cfg's package_dir maps
# gpuagent -> agent/ and gpuagent.plugins -> plugins/, which mypy cannot read, so a tree of
# symlinks in .mypy_cache/tree/gpuagent stands for the installed package (rebuilt each run, so a
# new module is checked at once) and the report names the files in the repository
# (agent/..., plugins/...). Settings: [tool.mypy] in pyproject.toml. Arguments go to mypy.
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
status=0
MYPYPATH="$tree" .venv/bin/mypy -p gpuagent "$@" >"$tree/report" 2>&1 || status=$?
sed -e "s#^$tree/gpuagent/plugins/#plugins/#" -e "s#^$tree/gpuagent/#agent/#" "$tree/report"
exit "$status"
