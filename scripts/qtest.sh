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
rm -f "$logs"/qtest-*.tap
[ -x "$bdir/qemu-system-x86_64" ] || { echo "qtest: no $bdir/qemu-system-x86_64: run make build" >&2; exit 1; }
export QTEST_QEMU_BINARY=$bdir/qemu-system-x86_64

qos=/x86_64/pc/i440FX-pcihost/pci-bus-pc/pci-bus/nvme/nvme-tests
run() { # run NAME BINARY ARGS...
	local name=$1 bin=$2; shift 2
	echo "# qtest: $name"
	timeout 1500 "$bin" --tap -k "$@" >"$logs/qtest-$name.tap" 2>"$logs/qtest-$name.err"
	local rc=$?
	grep -E '^(not ok|ok|1\.\.)' "$logs/qtest-$name.tap" | sed 's/^/#   /'
	[ $rc -eq 0 ] || { echo "# qtest: $name exited $rc; stderr:"; tail -n 20 "$logs/qtest-$name.err" | sed 's/^/#   /'; }
}

if [ ${#only[@]} -eq 0 ]; then
	run nvme-qos "$bdir/tests/qtest/qos-test" \
		-p $qos/oob-cmb-access -p $qos/pmr-test-access -p $qos/reg-read
	[ -x "$bdir/tests/qtest/nvme-io-test" ] && run nvme-io "$bdir/tests/qtest/nvme-io-test"
	# The AioContext unit tests (scripts/unit_tests.sh); their results
	# count with the qtests'.  One that build.sh did not build is a skip
	# that says so, not a silence.
	. "$top/scripts/unit_tests.sh"
	for t in "${NVDP_UNIT_TESTS[@]}"; do
		if [ -x "$bdir/tests/unit/$t" ]; then
			run "unit-$t" "$bdir/tests/unit/$t"
		else
			echo "# qtest: unit-$t not built in $bdir"
			printf '1..1\nok 1 - %s # SKIP not built in %s (no liburing, or a tree without it)\n' \
				"$t" "$bdir" >"$logs/qtest-unit-$t.tap"
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
	echo "$pass passed, $fail failed, $skip skipped"
	[ "$fail" -eq 0 ]
	exit
fi
exit 0
