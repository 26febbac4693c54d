#!/usr/bin/env bash
# Fetches DPDK's IPv4 fragmentation library sources (lib/ip_frag of Debian's
# own dpdk source package, the same version as the installed libdpdk-dev)
# into .cache/dpdk-src/<version>/lib/ip_frag, for ffi/dpdk-sys to build
# librte_ip_frag with a larger fragment limit.
#
# Why: Debian builds DPDK with RTE_LIBRTE_IP_FRAG_MAX_FRAG = 8, so its
# librte_ip_frag drops any datagram of more than 8 fragments; a 64 KiB UDP
# datagram at MTU 1500 is 45. The limit is compiled into the library (and
# into the layout of its death row), so dpdk-sys compiles these sources with
# the limit raised (64) and links them instead of the system library.
# Nothing is copied into the repository; without this cache dpdk-sys links
# the system library and the 8-fragment limit applies (it says so).
#
# Uses apt itself with a private state directory under .cache (no change to
# the host's apt sources), verifies the tarball's sha256, keeps only
# lib/ip_frag. Idempotent: with the sources in place it only checks.
#
#   scripts/setup-dpdk-src.sh        prints the lib/ip_frag directory
set -euo pipefail

die() { echo "setup-dpdk-src: $*" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The installed DPDK and the pinned source tarball that matches it.
DEB_VERSION="22.11.11-0+deb12u1"
UPSTREAM="22.11.11"
ORIG_SHA256="27a3bb1f57e02eb68c7c0a6f8bbf9fb74ec198c5aab74ed602da5b71c492a476"

have=$(pkg-config --modversion libdpdk 2>/dev/null) || die "DPDK not installed (apt-get install libdpdk-dev pkg-config)"
[ "$have" = "$UPSTREAM" ] || die "installed DPDK is $have but this script pins $UPSTREAM; update DEB_VERSION, UPSTREAM and ORIG_SHA256"

dest="$root/.cache/dpdk-src/$UPSTREAM"
if [ -f "$dest/lib/ip_frag/rte_ipv4_reassembly.c" ] && [ -f "$dest/.sha256" ] &&
    [ "$(cat "$dest/.sha256")" = "$ORIG_SHA256" ]; then
    echo "$dest/lib/ip_frag"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
cat >"$work/sources.list" <<EOF
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
EOF
apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list"
    -o "Dir::Etc::SourceParts=$work/none"
    -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
)
echo "setup-dpdk-src: fetching dpdk $DEB_VERSION sources (apt, about 16 MB)" >&2
apt-get -qq "${apt_opts[@]}" update >/dev/null
(cd "$work" && apt-get -qq "${apt_opts[@]}" source --download-only "dpdk=$DEB_VERSION" >/dev/null)
orig="$work/dpdk_$UPSTREAM.orig.tar.xz"
[ -f "$orig" ] || die "apt did not fetch $orig"
[ "$(sha256sum "$orig" | cut -d' ' -f1)" = "$ORIG_SHA256" ] || die "sha256 of $orig does not match the pinned one"
tar -xJf "$orig" -C "$work" --wildcards "*/lib/ip_frag/*" "*/license/*" "*/VERSION"
src=$(find "$work" -maxdepth 1 -type d -name "dpdk-*" | head -1)
[ -n "$src" ] || die "unexpected tarball layout"
rm -rf "$dest"
mkdir -p "$dest/lib"
cp -r "$src/lib/ip_frag" "$dest/lib/"
cp -r "$src/license" "$src/VERSION" "$dest/"
echo "$ORIG_SHA256" >"$dest/.sha256"
echo "$dest/lib/ip_frag"
