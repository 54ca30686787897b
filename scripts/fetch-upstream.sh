#!/usr/bin/env bash
# Print the path of a verified copy of the pinned upstream tarball,
# fetching it if needed.  Tried in order:
#   1. $QEMU_TARBALL
#   2. ../shared/upstream/ beside the checkout
#   3. the per-user cache ($XDG_CACHE_HOME or ~/.cache)/nvme-dataplane/
#   4. apt-get source --download-only (adds a deb-src line for sid in a
#      sources file of its own when no configured source offers it)
# Anything found outside the cache is checked and copied into the cache.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "${NVME_DP_CONF:-$top/upstream.conf}"

cache=${NVME_DP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvme-dataplane}
shared=${NVME_DP_SHARED:-$top/../shared/upstream}
name=$QEMU_TARBALL_NAME
tried=()

say() { echo "fetch-upstream: $*" >&2; }

verify() {
	[ -f "$1" ] || return 1
	local sum
	sum=$(sha256sum "$1" | cut -d' ' -f1)
	if [ "$sum" != "$QEMU_TARBALL_SHA256" ]; then
		say "$1: sha256 $sum, expected $QEMU_TARBALL_SHA256: ignored"
		return 1
	fi
}

store() {
	mkdir -p "$cache"
	if [ "$(readlink -f "$1")" != "$(readlink -f "$cache/$name")" ]; then
		cp "$1" "$cache/$name.tmp" && mv "$cache/$name.tmp" "$cache/$name"
	fi
	echo "$cache/$name"
}

try() {
	tried+=("$2: $1")
	if verify "$1"; then
		store "$1"
		exit 0
	fi
}

[ -n "${QEMU_TARBALL:-}" ] && try "$QEMU_TARBALL" '$QEMU_TARBALL'
try "$shared/$name" "shared copy"
try "$cache/$name" "cache"

# apt-get source, into a scratch directory.
apt_try() {
	local dir
	dir=$(mktemp -d)
	( cd "$dir" && apt-get source --download-only "$DEBIAN_SOURCE=$DEBIAN_VERSION" ) >&2 || true
	if verify "$dir/$name"; then
		store "$dir/$name"
		rm -rf "$dir"
		exit 0
	fi
	rm -rf "$dir"
	return 1
}
if [ -z "${NVME_DP_NO_APT:-}" ] && command -v apt-get >/dev/null; then
	tried+=("apt-get source $DEBIAN_SOURCE=$DEBIAN_VERSION")
	apt_try || true
	# No configured source has it: add a deb-src line for sid, of our own.
	src=/etc/apt/sources.list.d/nvme-dataplane-sid-src.sources
	if [ ! -f "$src" ] && [ -z "${NVME_DP_NO_APT_SOURCES:-}" ]; then
		SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
		tried+=("apt-get source after adding $src (deb-src, Debian sid)")
		mirror=$("$(dirname "$0")/debian_mirror.sh") || mirror=
		[ -n "$mirror" ] &&
		printf '%s\n' 'Types: deb-src' "URIs: $mirror" \
			'Suites: sid' 'Components: main' \
			'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' |
			$SUDO tee "$src" >/dev/null &&
			$SUDO apt-get update -qq >&2 || true
		apt_try || true
	fi
fi

say "could not obtain a verified $name (sha256 $QEMU_TARBALL_SHA256)."
say "tried:"
for t in "${tried[@]}"; do say "  - $t"; done
say "supply it with QEMU_TARBALL=/path/to/$name, or copy it to $cache/."
exit 1
