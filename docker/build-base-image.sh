#!/usr/bin/env bash
# Build the agent image of sandbox=docker offline: a minimal Debian root file system made
# by debootstrap from this machine's own apt mirror, turned into an image by `docker import`
# (no registry pull). The root file system is kept as a tarball in a cache folder, so a
# machine builds it once; an existing image tag is left alone.
#
#   docker/build-base-image.sh [TAG]          # default TAG: spu-agent:latest
#
# Environment:
#   SPU_IMAGE_CACHE      cache folder (default: ${XDG_CACHE_HOME:-~/.cache}/spu/images)
#   SPU_DEBIAN_MIRROR    mirror URL (default: the first one of /etc/apt/sources.list*)
#   SPU_DEBIAN_SUITE     suite (default: this machine's VERSION_CODENAME)
#   SPU_IMAGE_PACKAGES   comma-separated packages (default below)
#   SPU_IMAGE_REBUILD=1  rebuild the tarball and the image even when they exist
# Needs root (debootstrap), debootstrap and a running Docker engine.
set -euo pipefail

tag=${1:-spu-agent:latest}
cache=${SPU_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spu/images}
packages=${SPU_IMAGE_PACKAGES:-python3,python3-venv,ca-certificates,curl,procps,nodejs}
rebuild=${SPU_IMAGE_REBUILD:-0}
say() { echo "build-base-image: $*" >&2; }

if [ "$rebuild" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  say "image $tag exists"
  exit 0
fi

suite=${SPU_DEBIAN_SUITE:-}
if [ -z "$suite" ]; then
  # shellcheck disable=SC1091
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
[ -n "$suite" ] || { say "cannot tell the Debian suite; set SPU_DEBIAN_SUITE"; exit 2; }

# The first mirror of this machine that carries $suite itself (not -updates, -security):
# one-line "deb URI SUITE COMPONENTS" files and deb822 "URIs:/Suites:" stanzas.
find_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk -v s="$suite" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" } {
        uri = ""; ok = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { split($i, a, " "); uri = a[2] }
          if ($i ~ /^Suites:/) { n = split($i, b, " "); for (j = 2; j <= n; j++) if (b[j] == s) ok = 1 }
        }
        if (ok && uri != "") { print uri; exit } }' "$f"
  done
}
mirror=${SPU_DEBIAN_MIRROR:-$(find_mirror | head -n 1)}
[ -n "$mirror" ] || { say "no apt mirror for $suite in /etc/apt/sources.list*; set SPU_DEBIAN_MIRROR"; exit 2; }

mkdir -p "$cache"
tarball="$cache/$(echo "$tag" | tr '/:' '__')-$suite.tar.gz"
if [ "$rebuild" = 1 ] || [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { say "debootstrap is not installed (Debian package debootstrap)"; exit 2; }
  [ "$(id -u)" = 0 ] || { say "debootstrap needs root"; exit 2; }
  rootfs=$(mktemp -d "${TMPDIR:-/tmp}/spu-rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  say "debootstrap $suite from $mirror with $packages (once per machine)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" \
    > "$cache/debootstrap.log" 2>&1 || { say "debootstrap failed, see $cache/debootstrap.log"; exit 1; }
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  mkdir -p "$rootfs/task" "$rootfs/workspace" "$rootfs/output"
  tar --numeric-owner -C "$rootfs" -c . | gzip -1 > "$tarball.part"
  mv "$tarball.part" "$tarball"
fi

say "importing $tarball as $tag"
docker import \
  --change 'ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 HOME=/workspace' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["/bin/bash"]' \
  "$tarball" "$tag" >/dev/null
say "image $tag ready"
