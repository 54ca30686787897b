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
rm -f "$logs"/qtest-*.tap "$logs"/qtest-*.rc "$logs"/qtest-*.summary
[ -x "$bdir/qemu-system-x86_64" ] || { echo "qtest: no $bdir/qemu-system-x86_64: run make build" >&2; exit 1; }
export QTEST_QEMU_BINARY=$bdir/qemu-system-x86_64
# QEMU 11.1 as Debian ships it, the peer of the migration tests; they
# report a skip without it (make deps fetches it)
if [ -z "${QTEST_QEMU_BINARY_PEER+set}" ]; then
	QTEST_QEMU_BINARY_PEER=$("$top/scripts/stock_qemu.sh" 2>/dev/null) || QTEST_QEMU_BINARY_PEER=
	export QTEST_QEMU_BINARY_PEER
fi

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

# nvme-io-test, one run per topic (LOGS/qtest-nvme-io-TOPIC.tap),
# QTEST_JOBS at a time (3): a run waits on its QEMU and the disk most of
# the time (alone it keeps a core about 26 % busy).  Each run names its
# tests (-p), so glib's plan line counts only those that ran: the TAP's
# plan is the number of tests the topic has, so that a run that dies
# half way fails for the tests it did not report.
run_topic() { # run_topic BINARY TOPIC
	local bin=$1 t=$2 p rc paths=()
	local tap=$logs/qtest-nvme-io-$t.tap
	while IFS= read -r p; do
		paths+=(-p "$p")
	done < <("$bin" -l 2>/dev/null | grep "^/x86_64/nvme-io/$t/")
	if [ ${#paths[@]} -eq 0 ]; then
		# no -p would run every test: a topic that lists none fails
		printf '1..1\nnot ok 1 - nvme-io-test: topic %s lists no test\n' "$t" >"$tap"
		echo 1 >"${tap%.tap}.rc"
		echo "# qtest: nvme-io $t lists no test" >"${tap%.tap}.summary"
		return
	fi
	timeout 1500 "$bin" --tap -k "${paths[@]}" 2>"${tap%.tap}.err" |
		grep -v -E '^1\.\.[0-9]+' >"$tap"
	rc=${PIPESTATUS[0]}
	echo "1..$((${#paths[@]} / 2))" >>"$tap"
	echo "$rc" >"${tap%.tap}.rc"
	{
		echo "# qtest: nvme-io $t ($((${#paths[@]} / 2)) tests)"
		grep -E '^(not ok|ok|1\.\.)' "$tap" | sed 's/^/#   /'
		[ "$rc" -eq 0 ] || { echo "# qtest: nvme-io $t exited $rc; stderr:"; tail -n 20 "${tap%.tap}.err" | sed 's/^/#   /'; }
	} >"${tap%.tap}.summary"
}
run_topics() { # run_topics BINARY
	local bin=$1 t topics njobs=${QTEST_JOBS:-3}
	[ "$njobs" -ge 1 ] 2>/dev/null || njobs=1
	# the largest first, so that the last to end is a short one
	mapfile -t topics < <("$bin" -l 2>/dev/null | sed -n 's|^/x86_64/nvme-io/\([^/]*\)/.*|\1|p' |
		sort | uniq -c | sort -k1,1nr -k2 | awk '{ print $2 }')
	if [ ${#topics[@]} -eq 0 ]; then
		printf '1..1\nnot ok 1 - nvme-io-test: lists no test (-l)\n' >"$logs/qtest-nvme-io.tap"
		return
	fi
	for t in "${topics[@]}"; do
		while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do
			wait -n
		done
		run_topic "$bin" "$t" &
	done
	wait
	for t in $(printf '%s\n' "${topics[@]}" | sort); do
		cat "$logs/qtest-nvme-io-$t.summary"
		rm -f "$logs/qtest-nvme-io-$t.summary"
	done
}

if [ ${#only[@]} -eq 0 ]; then
	run nvme-qos "$bdir/tests/qtest/qos-test" \
		-p $qos/oob-cmb-access -p $qos/pmr-test-access -p $qos/reg-read
	if [ -x "$bdir/tests/qtest/nvme-io-test" ]; then
		run_topics "$bdir/tests/qtest/nvme-io-test"
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
