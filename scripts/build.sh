#!/usr/bin/env bash
# Configure (once, or when the options change) and build qemu-system-x86_64
# and the qtest binaries the project's tests run.  Incremental.
#   build.sh [--tree DIR] [--builddir DIR] [--asan | --tsan | --fuzz | --valgrind]
#            [--line-tables] [ninja targets...]   ("unit": the unit tests of unit_tests.sh)
# --tsan: clang with ThreadSanitizer (make check-tsan; scripts/tsan.sh).
# --fuzz: clang with libFuzzer, AddressSanitizer and UBSan (qemu-fuzz-x86_64).
# --valgrind: without io_uring, which valgrind 3.19 cannot run QEMU with (a
# thread blocked in io_uring_enter keeps valgrind's lock).
# --qtest-config: only what the qtests run (the accelerator qtest, no TCG;
# the devices of scripts/qtest-devices.mak): make check's builds.  A Linux
# guest does not run on such a build.
# --line-tables: debug information of functions and line tables only (-g1):
# a backtrace still has files and lines, and a compile takes about half the
# time (make check's builds: hw/nvme/ctrl.c 5.0 s with -g, 2.7 s with -g1).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tree=$top/build/qemu
bdir=
extra=()
fuzz=
qtcfg=
tsan=
valgrind=
while [ $# -gt 0 ]; do
	case $1 in
	--tree) tree=$2; shift 2 ;;
	--builddir) bdir=$2; shift 2 ;;
	--asan) extra+=(--enable-asan); shift ;;
	--tsan) tsan=1; extra+=(--enable-tsan); shift ;;
	--fuzz) fuzz=1; extra+=(--enable-fuzzing --enable-asan --enable-ubsan); shift ;;
	--valgrind) valgrind=1; shift ;;
	--line-tables) extra+=(--extra-cflags=-g1); shift ;;
	--qtest-config) qtcfg=1; shift ;;
	*) break ;;
	esac
done
bdir=${bdir:-$top/build/qemu-build}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(qemu-system-x86_64 tests/qtest/qos-test tests/qtest/nvme-io-test
	tests/qtest/blk-bench tests/qtest/nvme-soak unit)
# "unit": the AioContext unit tests of scripts/unit_tests.sh
. "$top/scripts/unit_tests.sh"
expanded=()
for t in "${targets[@]}"; do
	if [ "$t" = unit ]; then
		expanded+=("${NVDP_UNIT_TESTS[@]/#/tests/unit/}")
	else
		expanded+=("$t")
	fi
done
targets=("${expanded[@]}")

die() { echo "build: $*" >&2; exit 1; }
[ -d "$tree" ] || die "no source tree at $tree: run 'make tree' first"
tree=$(cd "$tree" && pwd)  # configure runs in the build directory

if [ -n "$qtcfg" ]; then
	# configure takes a device configuration by name, from the tree
	# (copied only when it differs: a new mtime would make meson reconfigure)
	mak=$tree/configs/devices/x86_64-softmmu/nvdp-qtest.mak
	cmp -s "$top/scripts/qtest-devices.mak" "$mak" || cp "$top/scripts/qtest-devices.mak" "$mak"
	# (untracked, and ignored: git status stays clean)
	if ex=$(git -C "$tree" rev-parse --git-path info/exclude 2>/dev/null); then
		case $ex in /*) ;; *) ex=$tree/$ex ;; esac
		mkdir -p "$(dirname "$ex")"
		grep -qx '/configs/devices/x86_64-softmmu/nvdp-qtest.mak' "$ex" 2>/dev/null ||
			echo /configs/devices/x86_64-softmmu/nvdp-qtest.mak >>"$ex"
	fi
	extra+=(--disable-tcg --without-default-devices --with-devices-x86_64=nvdp-qtest)
fi

cc=cc cxx=c++
[ -z "$fuzz$tsan" ] || { cc=clang; cxx=clang++; }
command -v "$cc" >/dev/null || die "no $cc: run make deps"
if command -v ccache >/dev/null; then
	cc="ccache $cc" cxx="ccache $cxx"
	# Share hits between build trees: the dev tree, the check tree and the
	# bisect steps see the same sources at the same relative paths.
	export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$top} CCACHE_NOHASHDIR=1
fi
uring=--disable-linux-io-uring
pkg-config --atleast-version=0.3 liburing 2>/dev/null && uring=--enable-linux-io-uring
[ -z "$valgrind" ] || uring=--disable-linux-io-uring
fwpath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu

args=(--cc="$cc" --python=/usr/bin/python3 --target-list=x86_64-softmmu
	--without-default-features --enable-kvm --enable-linux-aio "$uring"
	--disable-docs --disable-download --disable-install-blobs
	--firmwarepath="$fwpath" "${extra[@]}")
[ -z "$fuzz$tsan" ] || args+=(--cxx="$cxx")

stamp=$bdir/.nvme-dp-configure
want=$(printf '%s\n' "$tree" "${args[@]}")
if [ ! -f "$bdir/build.ninja" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	rm -rf "$bdir"
	mkdir -p "$bdir"
	echo "build: configuring $bdir"
	(cd "$bdir" && "$tree/configure" "${args[@]}") >"$bdir/configure.log" 2>&1 ||
		{ tail -n 30 "$bdir/configure.log" >&2; die "configure failed: see $bdir/configure.log"; }
	echo "$want" >"$stamp"
fi

# A binary run from the build tree looks for firmware only in qemu-bundle/.
for d in /usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu; do
	l=$bdir/qemu-bundle$d
	[ -e "$l" ] && continue
	mkdir -p "$(dirname "$l")"
	ln -s "$d" "$l"
done

# Only build the test binaries that this tree has (a unit test also needs
# its line in build.ninja: test-aio-poll-io-uring is there with liburing).
have=()
for t in "${targets[@]}"; do
	case $t in
	tests/qtest/nvme-io-test) [ -f "$tree/tests/qtest/nvme-io-test.c" ] || continue ;;
	tests/qtest/blk-bench) [ -f "$tree/tests/qtest/blk-bench.c" ] || continue ;;
	tests/qtest/nvme-soak) [ -f "$tree/tests/qtest/nvme-soak/soak.c" ] || continue ;;
	tests/unit/*)
		[ -f "$tree/$t.c" ] && grep -q "^build $t:" "$bdir/build.ninja" || continue ;;
	esac
	have+=("$t")
done
echo "build: ninja ${have[*]}"
ninja -C "$bdir" "${have[@]}"
