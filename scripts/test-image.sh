#!/usr/bin/env bash
# Checks localhost/gpuagent:latest (scripts/build-image.sh): run with no --user it is its
# non-root user, prints line protocol for a simulated fleet and exits 0; `gpuagent inspect`
# works as a one-off; run as a daemon it serves /metrics, /healthz and /readyz and its
# HEALTHCHECK passes. Usage: scripts/test-image.sh  (PODMAN_ROOT as for build-image.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(pwd)/packaging/container/containers.conf}"
podman=(podman --runtime runc --cgroup-manager cgroupfs --storage-driver vfs)
[ -z "${PODMAN_ROOT:-}" ] || podman+=(--root "$PODMAN_ROOT/storage" --runroot "$PODMAN_ROOT/run")
image=localhost/gpuagent:latest
name="gpuagent-test-$$"
work="$(mktemp -d)"
trap '"${podman[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
step() { echo "== $*"; }

# No systemd here to time the HEALTHCHECK: it is run by hand below (podman healthcheck run).
nohc=(--health-interval disable)
step "the image's user"
user="$("${podman[@]}" inspect --format '{{.Config.User}}' "$image")"
uid="$("${podman[@]}" run --rm "${nohc[@]}" --entrypoint id "$image" -u)"
echo "USER $user, uid $uid"
[ "$uid" != 0 ]

step "run --simulate h100-sxm:2 --once --test (no --user)"
"${podman[@]}" run --rm "${nohc[@]}" "$image" run --simulate h100-sxm:2 --once --test > "$work/out.lp" 2> "$work/err"
grep -q '^gpu_power,.*model=NVIDIA\\ H100' "$work/out.lp"
echo "$(wc -l < "$work/out.lp") lines of line protocol"

step "inspect as a one-off"
"${podman[@]}" run --rm "${nohc[@]}" "$image" inspect --simulate l40s:1 --json > "$work/inspect.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d, d' "$work/inspect.json"

step "the daemon serves /metrics, /healthz, /readyz; the HEALTHCHECK passes"
"${podman[@]}" run -d "${nohc[@]}" --name "$name" --network=host "$image" run --simulate h100-sxm:2 >/dev/null
get() { python3 -c 'import sys, urllib.request as u; r=u.urlopen(sys.argv[1], timeout=3); sys.stdout.write(r.read().decode())' "$1"; }
for _ in $(seq 60); do get http://127.0.0.1:9847/readyz >/dev/null 2>&1 && break; sleep 0.5; done
get http://127.0.0.1:9847/readyz | grep -qx ok
get http://127.0.0.1:9847/healthz | grep -qx ok
get http://127.0.0.1:9847/metrics | grep -q '^gpuagent_gpu_power_power_watts{'
"${podman[@]}" healthcheck run "$name"
"${podman[@]}" stop -t 20 "$name" >/dev/null
echo "size: $("${podman[@]}" image ls --format '{{.Size}}' "$image" | head -1)"
echo "test-image: ok"
