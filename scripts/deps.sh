#!/usr/bin/env bash
# Install exactly the Debian packages listed in scripts/packages.txt.
# Idempotent: when every package is present (and new enough) it does nothing.
# A package marked optional ("name?") that apt cannot install is reported
# and left out: what needs it (make libvirt-check) reports a skip.
# DEPS_LIST=FILE reads another list; DEPS_DRY_RUN=1 says what it would
# install, and does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=${DEPS_LIST:-$here/packages.txt}

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "deps: not root and no sudo: install the packages in $list by hand" >&2; exit 1; }
	SUDO=sudo
fi

. /etc/os-release
codename=${VERSION_CODENAME:-}

pkgs=() bpo=() opt=()
while read -r line; do
	line=${line%%#*}; line=$(echo "$line" | xargs)
	[ -n "$line" ] || continue
	case $line in
	*\?) line=${line%\?}; opt+=("${line%@backports}") ;;
	esac
	case $line in
	*@backports) bpo+=("${line%@backports}") ;;
	*) pkgs+=("$line") ;;
	esac
done <"$list"

optional() {
	local o
	for o in "${opt[@]}"; do
		[ "$o" = "$1" ] && return 0
	done
	return 1
}

installed() {
	[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# meson, pycotap and libvirt need versions that bookworm lacks.
new_enough() {
	case $1 in
	libvirt-daemon-driver-qemu) dpkg --compare-versions "$(dpkg-query -W -f='${Version}' libvirt-daemon-driver-qemu 2>/dev/null || echo 0)" ge 11.3 ;;
	meson) dpkg --compare-versions "$(dpkg-query -W -f='${Version}' meson 2>/dev/null || echo 0)" ge 1.5 ;;
	python3-pycotap) dpkg --compare-versions "$(dpkg-query -W -f='${Version}' python3-pycotap 2>/dev/null || echo 0)" ge 1.1 ;;
	*) true ;;
	esac
}

missing=() missing_opt=()
for p in "${pkgs[@]}" "${bpo[@]}"; do
	installed "$p" && new_enough "$p" && continue
	if optional "$p"; then
		missing_opt+=("$p")
	else
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_opt[@]} -eq 0 ]; then
	echo "deps: all ${#pkgs[@]}+${#bpo[@]} packages present"
	exit 0
fi
what=${missing[*]}
if [ ${#missing_opt[@]} -gt 0 ]; then
	what="${what:+$what }(optional: ${missing_opt[*]})"
fi
echo "deps: installing: $what"
if [ -n "${DEPS_DRY_RUN:-}" ]; then
	exit 0
fi

if [ "$codename" = bookworm ]; then
	# bookworm-backports, for the @backports packages only (pinned).
	src=/etc/apt/sources.list.d/nvme-dataplane-backports.sources
	mirror=$("$here/debian_mirror.sh") || mirror=
	if [ -n "$mirror" ] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ ; then
		$SUDO tee "$src" >/dev/null <<-SRC
		Types: deb
		URIs: $mirror
		Suites: bookworm-backports
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		SRC
	fi
	pin=/etc/apt/preferences.d/nvme-dataplane-backports
	{
		echo "Package: ${bpo[*]}"
		echo "Pin: release n=bookworm-backports"
		echo "Pin-Priority: 990"
	} | $SUDO tee "$pin" >/dev/null
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || [ ${#missing[@]} -eq 0 ]
if [ ${#missing[@]} -gt 0 ]; then
	$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# the optional ones together (libvirt's must be of one version), or none
if [ ${#missing_opt[@]} -gt 0 ] &&
   ! $SUDO apt-get install -y -q --no-install-recommends "${missing_opt[@]}"; then
	echo "deps: optional packages not installed: ${missing_opt[*]}" \
	     "(what needs them reports a skip)" >&2
fi

for p in "${pkgs[@]}" "${bpo[@]}"; do
	if ! installed "$p" || ! new_enough "$p"; then
		if optional "$p"; then
			echo "deps: optional $p is missing or too old" >&2
			continue
		fi
		echo "deps: $p is still missing or too old after apt-get install" >&2
		exit 1
	fi
done
# QEMU 11.1 as Debian ships it, the peer of the migration tests (unpacked
# into a cache, not installed): without it they report a skip
if ! "$here/stock_qemu.sh" >/dev/null; then
	echo "deps: no stock QEMU 11.1 to migrate with (scripts/stock_qemu.sh)" >&2
fi
echo "deps: done"
