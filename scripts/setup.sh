#!/usr/bin/env bash
# Creates .venv and installs gpuagent (editable) with the extras named in $1 (default: none).
# Installs once: .venv/.gpuagent-setup holds the hash of setup.cfg, setup.py and pyproject.toml and the
# extras installed with it; a later call with the same files and extras does nothing. With the
# test extra it also installs examples/gpuagent-infiniband (editable): the suite tests it too
# (testpaths in pyproject.toml), and the fast lane's module check needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
example() {
  case ",$extras," in *,test,*) ;; *) return 0 ;; esac
  .venv/bin/python -c 'import importlib.metadata as m; m.distribution("gpuagent-infiniband")' 2>/dev/null \
    || .venv/bin/python -m pip install -q -e examples/gpuagent-infiniband
}
stamp=.venv/.gpuagent-setup
want="$(cat setup.cfg setup.py pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/gpuagent ] && [ -f "$stamp" ]; then
  read -r have have_extras <"$stamp" || true
  missing=""
  for e in ${extras//,/ }; do
    case ",${have_extras:-}," in *",$e,"*) ;; *) missing=1 ;; esac
  done
  if [ "${have:-}" = "$want" ] && [ -z "$missing" ]; then
    example
    exit 0
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install -q -e ".[$extras]"
else
  .venv/bin/python -m pip install -q -e .
fi
echo "$want $extras" >"$stamp"
example
