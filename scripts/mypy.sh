#!/usr/bin/env bash
# mypy over agent/ and plugins/, as .ci/run runs it; arguments go to mypy. Settings, and how the
# folders are read as the gpuagent package they install as: [tool.mypy] in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/mypy agent plugins "$@"
