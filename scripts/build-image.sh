#!/usr/bin/env bash
# Builds localhost/gpuagent:<version> and localhost/gpuagent:latest with podman from nothing but
# Debian's packages (from this machine's apt mirror: scripts/apt-mirror.sh) and PyPI: a Debian 12
# base with python3.11 made by mmdebstrap and imported as
# localhost/gpuagent-base:bookworm (the Containerfile's BASE), the wheel of this checkout
# (scripts/build-dist.sh), pip reaching PyPI from `podman build --network=host`.
# Podman is run as this machine needs it (and as works in most CI containers): runtime runc,
# cgroupfs, the vfs storage driver, and a containers.conf with no default ulimits.
# Usage: scripts/build-image.sh   (REBUILD_BASE=1 makes the base again; PODMAN_ROOT=DIR keeps
# images in DIR instead of podman's default store)
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' agent/__init__.py)"
base=localhost/gpuagent-base:bookworm
python="${PYTHON:-.venv/bin/python}"  # builds the wheel (scripts/build-dist.sh): before minutes of base
"$python" -c 'import setuptools, wheel, twine' 2>/dev/null || {
  echo "build-image: $python lacks setuptools, wheel or twine: run ./scripts/setup.sh test (or set PYTHON)" >&2; exit 1; }
for tool in podman mmdebstrap runc; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool is missing (apt install podman mmdebstrap runc)" >&2; exit 1; }
done
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(pwd)/packaging/container/containers.conf}"
podman=(podman --runtime runc --cgroup-manager cgroupfs --storage-driver vfs)
[ -z "${PODMAN_ROOT:-}" ] || podman+=(--root "$PODMAN_ROOT/storage" --runroot "$PODMAN_ROOT/run")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -n "${REBUILD_BASE:-}" ] || ! "${podman[@]}" image exists "$base"; then
  mirror="$(scripts/apt-mirror.sh)"
  echo "build-image: making $base with mmdebstrap from $mirror" >&2
  # Documentation, man pages and translations are left out (the copyright files stay).
  mmdebstrap --quiet --variant=minbase --include=python3.11,ca-certificates \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
      bookworm "$work/base.tar" "$mirror"
  "${podman[@]}" import --quiet "$work/base.tar" "$base" >/dev/null
fi

# The wheel goes into the build context's dist/ (the Containerfile copies dist/gpuagent-*.whl).
PYTHON="$python" scripts/build-dist.sh "$work/dist" >/dev/null
mkdir -p "$work/context/dist"
cp "$work"/dist/gpuagent-*.whl "$work/context/dist/"
cp -r Containerfile packaging "$work/context/"
# docker format: OCI images have no HEALTHCHECK.
# The CA bundle pip uses on this host (PIP_CERT, SSL_CERT_FILE, else Debian's) for pip in the build.
ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
"${podman[@]}" build --quiet --network=host --format docker --build-arg "BASE=$base" --secret "id=pip-ca,src=$ca" \
    -t "localhost/gpuagent:$version" -t localhost/gpuagent:latest -f "$work/context/Containerfile" "$work/context" >/dev/null
"${podman[@]}" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' localhost/gpuagent
