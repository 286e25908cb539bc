#!/usr/bin/env bash
# The fast lane, under coverage.py: `pytest -m "not slow"` (what a developer runs between edits,
# under 2 minutes on 2 cores), then scripts/lane-coverage.py, which fails naming every module
# under agent/ and plugins/ of which the lane ran no function. Subprocesses the tests start
# (`gpuagent ...`) are measured too ([tool.coverage.run] in pyproject.toml). CI runs the whole
# suite instead (scripts/test.sh); this is the check that the fast lane still reaches everything.
# Arguments go to pytest. Installs what it needs first, as scripts/test.sh does (the extras and the
# example plugin, once: scripts/setup.sh), but none of the test servers: the fast lane starts none.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh "test,testing,probe,bench"   # the same extras as scripts/test.sh
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
export COVERAGE_FILE="$data/coverage"
status=0
.venv/bin/python -m coverage run -m pytest -m "not slow" -q --durations=10 "$@" || status=$?
[ "$status" = 4 ] && exit 4  # pytest's usage error (a bad argument): nothing was run to check
.venv/bin/python -m coverage combine -q || true  # no data: lane-coverage.py says so
.venv/bin/python scripts/lane-coverage.py "$COVERAGE_FILE" || status=$?
exit "$status"
