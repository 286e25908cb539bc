#!/usr/bin/env bash
# Builds and tests what ships beyond the wheel: the Debian package (scripts/build-deb.sh, then
# scripts/test-deb.sh in a fresh chroot) and the container image (scripts/build-image.sh, then
# scripts/test-image.sh). Needs root and Debian's dpkg-dev, fakeroot, lintian, mmdebstrap, podman
# and runc (installed here if missing). Not part of pytest: it takes minutes (see README, Deploy).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for pair in dpkg-deb:dpkg-dev fakeroot:fakeroot lintian:lintian mmdebstrap:mmdebstrap podman:podman runc:runc strip:binutils; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -e /usr/lib/python3.11/venv/scripts ] && [ -e /usr/share/python-wheels ] || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p dist
t0=$(date +%s)
deb="$(scripts/build-deb.sh dist | tail -1)"
t1=$(date +%s)
scripts/test-deb.sh "$deb" "${DEB_CHROOT_TARBALL:-}"
t2=$(date +%s)
scripts/build-image.sh
t3=$(date +%s)
scripts/test-image.sh
t4=$(date +%s)
echo "test-packages: ok (deb build $((t1-t0)) s, deb test $((t2-t1)) s, image build $((t3-t2)) s, image test $((t4-t3)) s)"
