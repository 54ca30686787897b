#!/usr/bin/env bash
# The QEMU that distributions ship, as a migration peer: Debian sid's
# qemu-system-x86 (STOCK_QEMU_VERSION, 1:11.1.3+ds-1) and the packages it
# depends on, downloaded from the Debian mirror with an apt configuration
# of its own (the host's apt is not touched) and unpacked, not installed,
# into a cache; the binary runs with sid's own loader and libraries.
#   stock_qemu.sh   prints the path of a wrapper script that runs the
#                   stock qemu-system-x86_64 ("$@" passed on; root: the
#                   wrapper bind-mounts in a mount namespace of its own)
# Exits 2, saying why, where the packages cannot be had (no mirror, no
# such version): a test that needs the peer reports a skip.
set -euo pipefail
want=${STOCK_QEMU_VERSION:-1:11.1.3+ds-1}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nvdp-stock-qemu
root=$cache/root-${want//[:+~]/_}
wrap=$root/qemu-system-x86_64
# the host's own Debian mirror (its apt sources), unless told
mirror=${STOCK_QEMU_MIRROR:-$("$(dirname "$0")/debian_mirror.sh" || true)}
[ -n "$mirror" ] || { echo "stock-qemu: no Debian mirror in the host's apt sources (STOCK_QEMU_MIRROR sets one)" >&2; exit 2; }
if [ -x "$wrap" ] && "$wrap" --version >/dev/null 2>&1; then
	echo "$wrap"
	exit 0
fi
apt=$cache/apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/etc"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" \
	>"$apt/etc/sources.list"
A=(-o "Dir::Etc::sourcelist=$apt/etc/sources.list" -o Dir::Etc::sourceparts=/dev/null
	-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives"
	-o Dir::State::status=/dev/null -o APT::Sandbox::User=root -q)
if ! apt-get "${A[@]}" update >"$apt/update.log" 2>&1; then
	echo "stock-qemu: cannot read Debian sid's package lists (see $apt/update.log)" >&2
	exit 2
fi
have=$(apt-cache "${A[@]}" show "qemu-system-x86=$want" 2>/dev/null | sed -n 's/^Version: //p' | head -n 1)
if [ "$have" != "$want" ]; then
	echo "stock-qemu: Debian sid has no qemu-system-x86 $want (it has $(apt-cache "${A[@]}" policy qemu-system-x86 2>/dev/null | sed -n 's/ *Candidate: //p'))" >&2
	exit 2
fi
# every package qemu-system-x86 needs, recursively (virtual ones resolve
# to the package apt would choose)
mapfile -t pkgs < <(apt-cache "${A[@]}" depends --recurse --no-recommends --no-suggests \
	--no-conflicts --no-breaks --no-replaces --no-enhances --no-pre-depends \
	"qemu-system-x86=$want" 2>/dev/null | grep -v -E '^ |^<' | sort -u)
dl=$apt/debs
rm -rf "$dl"
mkdir -p "$dl"
if ! (cd "$dl" && apt-get "${A[@]}" download "${pkgs[@]}" "qemu-system-x86=$want") \
	>"$apt/download.log" 2>&1; then
	echo "stock-qemu: the packages did not download (see $apt/download.log)" >&2
	exit 2
fi
tmp=$root.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
for d in "$dl"/*.deb; do
	dpkg-deb -x "$d" "$tmp"
done
ld=$(ls "$tmp"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 2>/dev/null ||
	ls "$tmp"/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
# firmware: Debian's qemu links its blobs to other packages' files
# (/usr/share/seabios, /usr/lib/ipxe): resolve them inside the root
for l in "$tmp"/usr/share/qemu/*; do
	[ -L "$l" ] || continue
	t=$(readlink "$l")
	case $t in /*) [ -e "$tmp$t" ] && ln -sfn "$tmp$t" "$l" ;; esac
done
# QEMU also loads modules from the directory it was built for, where the
# host's own QEMU keeps modules of another build (it aborts on them): the
# wrapper runs it in a mount namespace with sid's modules there.
cat >"$tmp/qemu-system-x86_64" <<WRAP
#!/bin/sh
# Debian sid's qemu-system-x86 $want, with sid's loader and libraries
r=$root
m=/usr/lib/x86_64-linux-gnu/qemu
export QEMU_MODULE_DIR=\$r\$m
run() {
	exec "\$r${ld#$tmp}" --library-path "\$r/usr/lib/x86_64-linux-gnu:\$r/lib/x86_64-linux-gnu" \\
		"\$r/usr/bin/qemu-system-x86_64" -L "\$r/usr/share/qemu" "\$@"
}
if [ -d "\$m" ] && [ -z "\${NVDP_STOCK_NS:-}" ]; then
	NVDP_STOCK_NS=1 exec unshare -m sh -c 'mount --bind "\$1" "\$2" && shift 2 && exec "\$0" "\$@"' \\
		"\$0" "\$r\$m" "\$m" "\$@"
fi
run "\$@"
WRAP
chmod +x "$tmp/qemu-system-x86_64"
# the links point into the final root
for l in "$tmp"/usr/share/qemu/*; do
	[ -L "$l" ] || continue
	t=$(readlink "$l")
	case $t in "$tmp"/*) ln -sfn "$root${t#$tmp}" "$l" ;; esac
done
rm -rf "$root"
mv "$tmp" "$root"
if ! out=$("$wrap" --version 2>&1); then
	echo "stock-qemu: the unpacked binary does not run: $out" >&2
	exit 2
fi
echo "$wrap"
