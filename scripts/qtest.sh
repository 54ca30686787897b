#!/usr/bin/env bash
# Run the NVMe qtests (upstream's, inside qos-test, and nvme-io-test) against
# a build; each binary's TAP goes to LOGS/qtest-NAME.tap.
#   qtest.sh [--builddir DIR] [--logs DIR] [-p TESTPATH]
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bdir=$top/build/qemu-build
logs=$top/build/logs
only=()
check=
while [ $# -gt 0 ]; do
	case $1 in
	--check) check=1; shift ;;
	--builddir) bdir=$2; shift 2 ;;
	--logs) logs=$2; shift 2 ;;
	-p) only+=(-p "$2"); shift 2 ;;
	*) echo "qtest: unknown argument $1" >&2; exit 2 ;;
	esac
done
mkdir -p "$logs"
rm -f "$logs"/qtest-*.tap "$logs"/qtest-*.rc
[ -x "$bdir/qemu-system-x86_64" ] || { echo "qtest: no $bdir/qemu-system-x86_64: run make build" >&2; exit 1; }
export QTEST_QEMU_BINARY=$bdir/qemu-system-x86_64

qos=/x86_64/pc/i440FX-pcihost/pci-bus-pc/pci-bus/nvme/nvme-tests
run() { # run NAME BINARY ARGS...
	local name=$1 bin=$2; shift 2
	echo "# qtest: $name"
	timeout 1500 "$bin" --tap -k "$@" >"$logs/qtest-$name.tap" 2>"$logs/qtest-$name.err"
	local rc=$?
	# the exit status, for make check's count: a binary that aborts after
	# its last case (a leak, an assertion at exit) fails
	echo "$rc" >"$logs/qtest-$name.rc"
	grep -E '^(not ok|ok|1\.\.)' "$logs/qtest-$name.tap" | sed 's/^/#   /'
	[ $rc -eq 0 ] || { echo "# qtest: $name exited $rc; stderr:"; tail -n 20 "$logs/qtest-$name.err" | sed 's/^/#   /'; }
}

if [ ${#only[@]} -eq 0 ]; then
	run nvme-qos "$bdir/tests/qtest/qos-test" \
		-p $qos/oob-cmb-access -p $qos/pmr-test-access -p $qos/reg-read
	if [ -x "$bdir/tests/qtest/nvme-io-test" ]; then
		run nvme-io "$bdir/tests/qtest/nvme-io-test"
	else
		echo "# qtest: nvme-io-test not built in $bdir"
		printf '1..1\nnot ok 1 - nvme-io-test: not built in %s\n' "$bdir" \
			>"$logs/qtest-nvme-io.tap"
	fi
	# The AioContext unit tests (scripts/unit_tests.sh); their results
	# count with the qtests'.  One that was not built fails, except the
	# io_uring one in a build without liburing: a skip that says so.
	. "$top/scripts/unit_tests.sh"
	for t in "${NVDP_UNIT_TESTS[@]}"; do
		if [ -x "$bdir/tests/unit/$t" ]; then
			run "unit-$t" "$bdir/tests/unit/$t"
		elif [ "$t" = test-aio-poll-io-uring ] &&
			! grep -q '^#define CONFIG_LINUX_IO_URING' "$bdir/config-host.h" 2>/dev/null; then
			echo "# qtest: unit-$t: this build has no liburing"
			printf '1..1\nok 1 - %s # SKIP no liburing (make deps installs liburing-dev)\n' \
				"$t" >"$logs/qtest-unit-$t.tap"
		else
			echo "# qtest: unit-$t not built in $bdir"
			printf '1..1\nnot ok 1 - %s: not built in %s\n' "$t" "$bdir" \
				>"$logs/qtest-unit-$t.tap"
		fi
	done
else
	run nvme-io "$bdir/tests/qtest/nvme-io-test" "${only[@]}"
fi

# --check: a verdict, for make check-asan
if [ -n "$check" ]; then
	pass=$(cat "$logs"/qtest-*.tap | grep '^ok ' | grep -vc '# SKIP')
	skip=$(cat "$logs"/qtest-*.tap | grep '^ok ' | grep -c '# SKIP')
	fail=$(cat "$logs"/qtest-*.tap | grep -c '^not ok ')
	plan=0
	for f in "$logs"/qtest-*.tap; do
		p=$(grep -E '^1\.\.[0-9]+' "$f" | tail -n 1 | cut -c4-)
		plan=$((plan + ${p:-0}))
	done
	if grep -l -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$logs"/qtest-*.err >/dev/null 2>&1; then
		echo "# sanitizer reports in: $(grep -l -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$logs"/qtest-*.err)"
		fail=$((fail + 1))
	fi
	[ $((pass + skip)) -lt "$plan" ] && fail=$((fail + plan - pass - skip))
	for f in "$logs"/qtest-*.rc; do
		[ -e "$f" ] && [ "$(cat "$f")" != 0 ] || continue
		echo "# $(basename "$f" .rc) exited with status $(cat "$f")"
		fail=$((fail + 1))
	done
	echo "$pass passed, $fail failed, $skip skipped"
	[ "$fail" -eq 0 ]
	exit
fi
exit 0
