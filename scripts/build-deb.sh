#!/usr/bin/env bash
# Builds dist/gpuagent_<version>_<arch>.deb with Debian's own tools (python3-venv, dpkg-deb, and
# lintian to check it): the agent in its own virtualenv under /usr/lib/gpuagent, built from the wheel
# with pip from PyPI on Debian's python3.11, /usr/bin/gpuagent, the systemd unit,
# /etc/gpuagent/gpuagent.toml as a conffile. Why a virtualenv and not Debian's python3 modules:
# Debian 12 has pydantic 1 (the agent needs 2) and no nvidia-ml-py.
# Depends (packaging/deb/control): python3.11, libc6 for the wheels' extensions, procps for the
# unit's ExecReload=/bin/kill (systemd-analyze verify refuses the unit without it).
# The state directory is the unit's StateDirectory= (systemd makes it at start, with
# DynamicUser); purge removes it. Usage: scripts/build-deb.sh [OUTDIR]  (default dist)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
version="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' agent/__init__.py)"
arch="$(dpkg --print-architecture)"
python=/usr/bin/python3.11  # Debian 12's python3; the venv links to it, so the package depends on it
prefix=/usr/lib/gpuagent  # private to the package (FHS: /usr/lib/PACKAGE); not /opt: lintian refuses it, and dpkg would own and remove a bare /opt
for tool in dpkg-deb fakeroot strip "$python"; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (apt install dpkg-dev fakeroot binutils python3-venv)" >&2; exit 1; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
stage="$work/gpuagent_${version}_${arch}"

PYTHON="${PYTHON:-.venv/bin/python}" scripts/build-dist.sh "$work/dist" >/dev/null
"$python" -m venv "$stage$prefix/venv"
"$stage$prefix/venv/bin/python" -m pip install -q --no-compile --disable-pip-version-check \
    --no-warn-script-location "$work"/dist/gpuagent-*.whl
"$stage$prefix/venv/bin/python" -m pip uninstall -q -y pip setuptools 2>/dev/null || true
rm -f "$stage$prefix"/venv/bin/activate* "$stage$prefix"/venv/bin/pip*
find "$stage$prefix/venv" -name direct_url.json -delete   # names the build's temporary wheel
find "$stage$prefix/venv" -name __pycache__ -prune -exec rm -rf {} +
# Wheels ship their extensions with symbols and some modules with an executable bit: as Debian does.
find "$stage$prefix/venv" -name '*.so' -exec strip --strip-unneeded --remove-section=.comment --remove-section=.note {} +
find "$stage$prefix/venv/lib" -type f -name '*.py' -perm /111 -exec chmod a-x {} +
# The venv was made in the staging tree: its scripts and pyvenv.cfg name the final place instead.
grep -rlI --null "$stage" "$stage$prefix/venv" | xargs -0 -r sed -i "s|$stage||g"

install -d "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/etc/gpuagent" "$stage/usr/share/doc/gpuagent" "$stage/DEBIAN"
ln -s "$prefix/venv/bin/gpuagent" "$stage/usr/bin/gpuagent"
sed "s|^ExecStart=/usr/local/bin/gpuagent |ExecStart=/usr/bin/gpuagent |" config/gpuagent.service > "$stage/lib/systemd/system/gpuagent.service"
grep -q '^ExecStart=/usr/bin/gpuagent ' "$stage/lib/systemd/system/gpuagent.service"
install -m 0644 config/gpuagent.toml "$stage/etc/gpuagent/gpuagent.toml"
install -m 0644 packaging/deb/copyright "$stage/usr/share/doc/gpuagent/copyright"
sed "s/@VERSION@/$version/; s/@DATE@/$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")/" \
    packaging/deb/changelog | gzip -9n > "$stage/usr/share/doc/gpuagent/changelog.gz"
install -d "$stage/usr/share/lintian/overrides"
install -m 0644 packaging/deb/lintian-overrides "$stage/usr/share/lintian/overrides/gpuagent"
for script in postinst prerm postrm; do
  install -m 0755 "packaging/deb/$script" "$stage/DEBIAN/$script"
done
echo /etc/gpuagent/gpuagent.toml > "$stage/DEBIAN/conffiles"
size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
sed "s/@VERSION@/$version/; s/@ARCH@/$arch/; s/@SIZE@/$size/" packaging/deb/control > "$stage/DEBIAN/control"
find "$stage" -path "$stage/DEBIAN" -prune -o -type f -exec chmod go-w {} +
deb="$out/gpuagent_${version}_${arch}.deb"
fakeroot dpkg-deb --build -Zxz --root-owner-group "$stage" "$deb" >/dev/null
echo "$deb"
if command -v lintian >/dev/null; then
  # No errors allowed; warnings are printed (tags overridden in lintian-overrides say why).
  lintian --fail-on error --no-tag-display-limit "$deb" >&2
fi
