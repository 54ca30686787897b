#!/usr/bin/env bash
# make check-guest: the tests that boot a guest under TCG, from patches/
# as committed (make check runs everything else; together they are every
# test).  A full build of the series (TCG, the default devices) in
# build/check/guest-build, then:
#   1. end-to-end tests in a Linux guest (fio verify in each NVMe config,
#      and live migration under fio verify): tests/guest_e2e.py
#   2. a private libvirt daemon runs the guest on nvme.rst's libvirt
#      example: suspend, iothreadset, save/restore, managedsave under fio
#      verify (scripts/libvirt_check.py; a skip where libvirt cannot run)
#   3. the freestanding KVM test guest, under TCG and, where it runs, KVM
#   4. a CI-sized benchmark run and checks of what it writes
# Ends with "N passed, N failed, N skipped", one count per test case,
# counted as make check counts (scripts/tap.sh).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
chk=$top/build/check
tree=$chk/qemu
bdir=$chk/guest-build
logs=$chk/logs/guest
patches=${NVME_DP_PATCHES:-$top/patches}
mkdir -p "$logs"

. "$top/scripts/tap.sh"
. "$top/scripts/series.sh"
step() {
	echo "# $* [$((SECONDS / 60)) min]"
}

step "0. the series from patches/, and a build with TCG"
rm -f "$logs"/*.tap "$logs"/*.log
# build/check/qemu is make check's scratch tree: start it from 'upstream'
if ! check_tree_apply "$tree" "$patches" "$logs/tree.log"; then
	tail -n 20 "$logs/tree.log" | sed 's/^/#   /'
	notok "series: applies to upstream (see $logs/tree.log)"
elif guest_build "$tree" "$bdir" "$logs"; then
	qemu=$bdir/qemu-system-x86_64

	step "1. guest end-to-end tests (Linux guest, TCG)"
	NVME_DP_QEMU=$qemu E2E_LOGS=$logs \
		"$top/tests/guest_e2e.py" >"$logs/e2e.tap" 2>"$logs/e2e.err"
	st=$?
	sed 's/^/#   /' "$logs/e2e.tap"
	count_tap "$logs/e2e.tap" e2e $st

	step "2. libvirt: a private daemon drives the series' QEMU"
	# SIGTERM after 15 min: the script still tears its daemon down
	NVME_DP_QEMU=$qemu \
	NVME_DP_RST=$tree/docs/system/devices/nvme.rst \
	LIBVIRT_LOGS=$logs/libvirt \
		timeout 900 "$top/scripts/libvirt_check.py" \
		>"$logs/libvirt.tap" 2>"$logs/libvirt.err"
	st=$?
	sed 's/^/#   /' "$logs/libvirt.tap"
	count_tap "$logs/libvirt.tap" libvirt $st

	step "3. the freestanding KVM test guest (TCG; KVM where it runs)"
	NVME_DP_QEMU=$qemu \
		"$top/tests/kvm_guest.py" >"$logs/kvm-guest.tap" 2>"$logs/kvm-guest.err"
	st=$?
	sed 's/^/#   /' "$logs/kvm-guest.tap"
	count_tap "$logs/kvm-guest.tap" kvm-guest $st

	step "4. benchmark smoke run (BENCH_QUICK=1)"
	NVME_DP_QEMU=$qemu \
		"$top/tests/bench_smoke.py" >"$logs/bench.tap" 2>"$logs/bench.err"
	st=$?
	sed 's/^/#   /' "$logs/bench.tap"
	count_tap "$logs/bench.tap" bench $st
fi
git -C "$tree" checkout -q main 2>/dev/null

echo
if [ ${#failed[@]} -gt 0 ]; then
	echo "# failed:"
	printf '#   %s\n' "${failed[@]}"
fi
echo "# make check-guest took $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
