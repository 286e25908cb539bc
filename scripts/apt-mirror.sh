#!/usr/bin/env bash
# Prints the Debian archive this machine's apt uses (the first `deb` source that is not a security
# archive, from /etc/apt/sources.list and /etc/apt/sources.list.d/: one-line and deb822 files),
# for mmdebstrap in scripts/build-image.sh and scripts/test-deb.sh: the build takes the machine's
# mirror (a proxy, a snapshot, a local one) instead of one named here. $APT_MIRROR overrides it.
# Exits 1 in one line when apt names none. Usage: scripts/apt-mirror.sh [APT_DIR]  (default /etc/apt)
set -euo pipefail
if [ -n "${APT_MIRROR:-}" ]; then
  echo "$APT_MIRROR"
  exit 0
fi
dir="${1:-/etc/apt}"
uris() {
  [ ! -f "$dir/sources.list" ] || sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' "$dir/sources.list"
  for f in "$dir"/sources.list.d/*.list; do
    [ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' "$f"
  done
  for f in "$dir"/sources.list.d/*.sources; do
    # deb822 stanzas: the URIs of those whose Types has deb (and that are not Enabled: no)
    [ -f "$f" ] && awk 'BEGIN { RS = ""; FS = "\n" } {
        deb = 0; off = 0; u = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:.*(^|[ \t])deb([ \t]|$)/) deb = 1
          if ($i ~ /^Enabled:[ \t]*no/) off = 1
          if ($i ~ /^URIs:/) { u = $i; sub(/^URIs:[ \t]*/, "", u) }
        }
        if (deb && !off && u != "") { split(u, a, /[ \t]+/); for (k in a) print a[k] }
      }' "$f"
  done
}
mirror="$(uris | grep -v -e '-security/\?$' -e '^cdrom:' | head -n1 || true)"
if [ -z "$mirror" ]; then
  echo "apt-mirror: no Debian archive in $dir/sources.list or $dir/sources.list.d/: set APT_MIRROR=URL" >&2
  exit 1
fi
echo "${mirror%/}"
