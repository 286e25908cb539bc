#!/usr/bin/env bash
# Installs dist/gpuagent_<version>_<arch>.deb into a fresh Debian 12 chroot made by mmdebstrap and
# checks it as piuparts would, without touching this machine: `apt install ./gpuagent_*.deb`,
# `systemd-analyze verify` of the installed unit, the installed entry point run once on a
# simulated fleet, an upgrade over itself that keeps an edited conffile and the spool, and a
# purge that leaves nothing behind. systemd does not run in a chroot: the unit is verified, not
# started, and the maintainer scripts skip systemctl there (no /run/systemd/system).
# Usage: scripts/test-deb.sh DEB [CHROOT_TARBALL]   (a tarball from an earlier run is reused)
set -euo pipefail
deb="$(realpath "$1")"
tarball="${2:-}"
[ "$(id -u)" = 0 ] || { echo "test-deb: needs root (mmdebstrap and chroot)" >&2; exit 1; }
work="$(mktemp -d)"
chroot="$work/root"
cleanup() {
  for m in proc dev; do umount -R -l "$chroot/$m" 2>/dev/null || true; done
  # --one-file-system: were an unmount to fail, the host's /dev is never reached.
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
mkdir "$chroot"
if [ -n "$tarball" ] && [ -s "$tarball" ]; then
  tar -xf "$tarball" -C "$chroot"
else
  mmdebstrap --quiet --variant=apt --include=python3.11,systemd,ca-certificates bookworm "$work/base.tar" \
      "$("$(dirname "$0")"/apt-mirror.sh)"  # this machine's apt mirror
  tar -xf "$work/base.tar" -C "$chroot"
  [ -z "$tarball" ] || cp "$work/base.tar" "$tarball"
fi
mount -t proc proc "$chroot/proc"
mount --rbind /dev "$chroot/dev"
in_root() { chroot "$chroot" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
snapshot() {  # every path outside the package manager's own records, caches and logs
  (cd "$chroot" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./tmp -o -path ./var/lib/dpkg \
      -o -path ./etc/resolv.conf \
      -o -path ./var/cache -o -path ./var/log -o -path ./var/lib/apt -o -path ./run \) -prune -o -print | sort)
}
step() { echo "== $*"; }

cp "$deb" "$chroot/tmp/"
name="$(basename "$deb")"
mkdir -p -m 0700 "$chroot/var/lib/private"  # systemd makes it for any DynamicUser= service
snapshot > "$work/before"

step "apt install ./$name"
cp /etc/resolv.conf "$chroot/etc/resolv.conf"
in_root apt-get update -qq  # as on any installed system: its dependencies come from Debian
in_root apt-get install -y -qq "/tmp/$name" >/dev/null
in_root dpkg-query -W -f='${Status} ${Version}\n' gpuagent | grep -q "install ok installed"
step "systemd-analyze verify the installed unit"
in_root systemd-analyze verify /lib/systemd/system/gpuagent.service
step "the installed entry point"
in_root gpuagent --version
in_root gpuagent run --simulate h100-sxm:2 --once --test > "$work/out.lp"
grep -q '^gpu_power,.*model=NVIDIA\\ H100' "$work/out.lp"
echo "$(wc -l < "$work/out.lp") lines of line protocol"
[ -n "$(find "$chroot/usr/lib/gpuagent/venv/lib" -name '*.pyc' -print -quit)" ]  # postinst compiled it

step "upgrade over itself keeps an edited conffile and the spool"
echo '# edited by the operator' >> "$chroot/etc/gpuagent/gpuagent.toml"
mkdir -p "$chroot/var/lib/private/gpuagent/spool/influxdb"  # where systemd's StateDirectory= keeps it
echo 'gpu_power,host=x power_w=1 1' > "$chroot/var/lib/private/gpuagent/spool/influxdb/00000001.lp"
ln -s private/gpuagent "$chroot/var/lib/gpuagent"
in_root dpkg -i "/tmp/$name" >/dev/null
tail -1 "$chroot/etc/gpuagent/gpuagent.toml" | grep -qx '# edited by the operator'
[ -s "$chroot/var/lib/gpuagent/spool/influxdb/00000001.lp" ]
in_root gpuagent --version >/dev/null

step "purge leaves nothing behind but the admin's own files in /etc/gpuagent"
echo 'secret' > "$chroot/etc/gpuagent/influx.token"  # the admin's, beside the conffile
in_root apt-get purge -y -qq --autoremove gpuagent >/dev/null  # and the dependencies it pulled in
! in_root dpkg-query -W -f='${Status}\n' gpuagent 2>/dev/null | grep -q installed
[ "$(cat "$chroot/etc/gpuagent/influx.token")" = secret ]
[ ! -e "$chroot/etc/gpuagent/gpuagent.toml" ]  # dpkg purged the conffile
rm "$chroot/etc/gpuagent/influx.token" && rmdir "$chroot/etc/gpuagent"
snapshot > "$work/after"
if ! diff -u "$work/before" "$work/after"; then
  echo "test-deb: the purge left the paths above" >&2
  exit 1
fi
echo "test-deb: ok"
