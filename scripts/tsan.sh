#!/usr/bin/env bash
# make check-tsan: the NVMe qtests of the modes with threads against a
# ThreadSanitizer build (clang; build/tsan-build), judged by
# scripts/tsan_report.py.
#
#   tsan.sh [--no-build] [--line-tables] [--builddir DIR] [--logs DIR] [TOPIC...]
#
# TOPIC is a topic of nvme-io-test (iothread, iothreads, poll, coalescing,
# migration, quiesce, shadow, irq, queue, data; errors has no test with
# an iothread); default $TSAN_TOPICS, or all of these.  Of the iothread,
# iothreads and poll topics every test runs; of the others, the tests
# whose mode has an iothread (a path with "iothread" in it): the main loop
# modes have no second thread to race with.  Each topic is one run of
# nvme-io-test, its TAP in LOGS/tsan-TOPIC.tap; the reports of the test
# binary and of every QEMU it starts go to LOGS/tsan-TOPIC.report.PID.
#
# The verdict (tsan_report.py): a qtest that fails fails; a report with a
# frame in hw/nvme or on a line the series added or changed elsewhere
# fails; a report only in upstream code is listed and counted, not failed.
# Upstream races known here are suppressed by scripts/tsan-suppressions.txt
# (each with its reason; none may name hw/nvme).  Ends with
# "N passed, N failed, N skipped" over the qtests and one line for reports.
# --line-tables: build with line tables only (build.sh; make check): a
# report still names each frame's file and line.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tree=$top/build/qemu
bdir=$top/build/tsan-build
logs=$top/build/tsan-logs
build=1
lines=
topics=()
while [ $# -gt 0 ]; do
	case $1 in
	--no-build) build=; shift ;;
	--line-tables) lines=--line-tables; shift ;;
	--builddir) bdir=$2; shift 2 ;;
	--logs) logs=$2; shift 2 ;;
	--tree) tree=$2; shift 2 ;;
	-*) echo "tsan: unknown option $1" >&2; exit 2 ;;
	*) topics+=("$1"); shift ;;
	esac
done
[ ${#topics[@]} -gt 0 ] || read -r -a topics <<<"${TSAN_TOPICS:-quiesce migration iothreads iothread coalescing irq data shadow queue poll}"

# a run that stops early leaves no old results behind to be judged
mkdir -p "$logs"
rm -f "$logs"/tsan-*
if [ -n "$build" ]; then
	# only the qtests run it: no TCG, and only the devices they start
	"$top/scripts/build.sh" --tsan --qtest-config $lines --tree "$tree" --builddir "$bdir" \
		qemu-system-x86_64 tests/qtest/nvme-io-test || exit 1
fi
bin=$bdir/tests/qtest/nvme-io-test
[ -x "$bin" ] && [ -x "$bdir/qemu-system-x86_64" ] ||
	{ echo "tsan: no TSan build in $bdir: run make check-tsan" >&2; exit 1; }

# One suppressions file: upstream's (tests/tsan/, its reasons there) and
# the project's.
supp=$logs/suppressions.txt
rules=$top/scripts/tsan-suppressions.txt
{
	cat "$tree/tests/tsan/suppressions.tsan" 2>/dev/null
	grep -v -E '^(top|mem|pair):' "$rules"
} >"$supp"
if grep -v '^#' "$rules" | sed 's/#.*//' | grep -q -i nvme; then
	echo "tsan: scripts/tsan-suppressions.txt names nvme code: races there are fixed, not suppressed" >&2
	exit 1
fi

export QTEST_QEMU_BINARY=$bdir/qemu-system-x86_64
# QEMU 11.1 as Debian ships it, the peer of the migration tests; they
# report a skip without it (make deps fetches it)
if [ -z "${QTEST_QEMU_BINARY_PEER+set}" ]; then
	QTEST_QEMU_BINARY_PEER=$("$top/scripts/stock_qemu.sh" 2>/dev/null) || QTEST_QEMU_BINARY_PEER=
	export QTEST_QEMU_BINARY_PEER
fi
# glib 2.74's slice allocator hands memory between threads under its own
# (uninstrumented) locks: every GArray looks racy.  Plain malloc instead.
export G_SLICE=always-malloc
# libqtest forks this multi-threaded binary to exec QEMU: die_after_fork=0.
# Reports are collected (log_path) and judged afterwards, not fatal.
base_opts="suppressions=$supp die_after_fork=0 halt_on_error=0 exitcode=0"
base_opts+=" detect_deadlocks=0 history_size=4 second_deadlock_stack=1"

# One topic: LOGS/tsan-TOPIC.{tap,err,rc,planned,report.*}, and what it
# prints in LOGS/tsan-TOPIC.summary
run_topic() {
	local t=$1 p rc start paths=()
	while IFS= read -r p; do
		case $t in
		iothread | iothreads | poll) paths+=(-p "$p") ;;
		*) case $p in *iothread*) paths+=(-p "$p") ;; esac ;;
		esac
	done < <("$bin" -l 2>/dev/null | grep "^/x86_64/nvme-io/$t/")
	if [ ${#paths[@]} -eq 0 ]; then
		echo "tsan: topic $t has no test with an iothread" >&2
		printf '1..1\nnot ok 1 - %s: no test with an iothread\n' "$t" >"$logs/tsan-$t.tap"
		return
	fi
	{
	echo "# tsan: $t ($((${#paths[@]} / 2)) tests)"
	# with -p, glib's plan line grows with each test run: the judge
	# counts against the tests asked for, and the exit status
	echo $((${#paths[@]} / 2)) >"$logs/tsan-$t.planned"
	start=$(date +%s)
	TSAN_OPTIONS="$base_opts log_path=$logs/tsan-$t.report" \
		timeout 3000 "$bin" --tap -k "${paths[@]}" \
		>"$logs/tsan-$t.tap" 2>"$logs/tsan-$t.err"
	rc=$?
	echo "$rc" >"$logs/tsan-$t.rc"
	grep -E '^(not ok|1\.\.)' "$logs/tsan-$t.tap" | sed 's/^/#   /'
	echo "#   $t: exit $rc, $(($(date +%s) - start)) s"
	[ $rc -eq 0 ] || tail -n 20 "$logs/tsan-$t.err" | sed 's/^/#   /'
	} >"$logs/tsan-$t.summary"
}

# The topics run TSAN_JOBS (3) at a time: a run keeps a core about 30 %
# busy, and each topic has files of its own.  Their summaries print in
# order after.
njobs=${TSAN_JOBS:-3}
[ "$njobs" -ge 1 ] 2>/dev/null || njobs=1
start_all=$(date +%s)
for t in "${topics[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do
		wait -n
	done
	run_topic "$t" &
done
wait
for t in "${topics[@]}"; do
	cat "$logs/tsan-$t.summary" 2>/dev/null
done
echo "# tsan: ${#topics[@]} topics, $njobs at a time: $(($(date +%s) - start_all)) s"

exec python3 "$top/scripts/tsan_report.py" --tree "$tree" --builddir "$bdir" --logs "$logs" \
	--rules "$rules"
