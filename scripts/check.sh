#!/usr/bin/env bash
# make check: the tests from patches/ as committed; one guest (step 7),
# the others in make check-guest (scripts/check_guest.sh).
#   1. the project's tests of its own tooling
#   2. the series applies to pristine upstream (fresh check tree)
#   3. checkpatch.pl on every patch: 0 errors (warnings listed); every
#      message and cover letter as QEMU wants them (check_messages.py)
#   4. bisectability: every prefix of the series builds hw/nvme, the
#      emulator and the nvme qtests, in the configuration the qtests need
#      (build.sh --qtest-config: no TCG, scripts/qtest-devices.mak)
#   5. the nvme qtests, upstream's and ours, against the full series, and
#      the libvirt example of nvme.rst (tests/docs_examples.py)
#   5b. the qtests of every topic with threads under ThreadSanitizer
#      (scripts/tsan.sh; CHECK_TSAN_TOPICS to choose fewer)
#   5c. a short run of the seeded soak over every data-plane mode
#      (scripts/soak.sh; CHECK_SOAK_SECONDS per mode, CHECK_SOAK_SEED)
#   6. the guest-less device benchmark's short run (tests/bench_device_smoke.py)
#   7. a Linux guest under fio verify live-migrated in turns to QEMU 11.1
#      (Debian's, scripts/stock_qemu.sh) and back (tests/guest_peer.py),
#      on a build with TCG in build/check/guest-build
# Ends with "N passed, N failed, N skipped", one count per test case.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
chk=$top/build/check
tree=$chk/qemu
bdir=$chk/qemu-build
logs=$chk/logs
patches=${NVME_DP_PATCHES:-$top/patches}
mkdir -p "$logs"
# Debug information of line tables only: a backtrace keeps its files and
# lines, and each of the bisect's compiles takes about half the time.  The
# ThreadSanitizer build takes as long either way (689 s against 650 s
# here): its instrumentation, not its debug information, is its cost.
lines=--line-tables

. "$top/scripts/tap.sh"
check() { # check NAME CMD...
	local name=$1; shift
	if "$@"; then ok "$name"; else notok "$name"; fi
}

# A step's header, with the minutes since make check began (CI has 90)
step() {
	echo "# $* [$((SECONDS / 60)) min]"
}

. "$top/scripts/series.sh"
mapfile -t plist < <(series_patches "$patches")
# the last patch of each topic series: "INDEX DIR", INDEX counted from 1
mapfile -t ends < <(series_counts "$patches" | awk '{ n += $2; print n, $1 }')

step "1. tooling tests"
rm -f "$logs/tooling.tap"
"$top/tests/tooling.sh" >"$logs/tooling.tap" 2>"$logs/tooling.err"
count_tap "$logs/tooling.tap" tooling $?

step "2. the series applies to pristine upstream"
# build/check/qemu is the check's own scratch tree: start it from 'upstream'
if check_tree_apply "$tree" "$patches" "$logs/tree.log"; then
	ok "series: ${#plist[@]} patch(es) in ${#ends[@]} series apply to upstream $(. "$top/upstream.conf"; echo "$QEMU_VERSION")"
	applied=1
else
	cat "$logs/tree.log" | sed 's/^/# /'
	notok "series: applies to upstream (see $logs/tree.log)"
	applied=
fi

if [ -n "$applied" ]; then
	step "3. checkpatch, and the messages and cover letters"
	rm -f "$logs"/checkpatch-*.log
	for p in "${plist[@]}"; do
		out=$logs/checkpatch-$(echo "${p%.patch}" | tr / -).log
		(cd "$tree" && perl scripts/checkpatch.pl --no-color "$patches/$p") >"$out" 2>&1
		total=$(grep -E '^total: [0-9]+ errors' "$out" | tail -n 1)
		errs=$(echo "$total" | sed -nE 's/^total: ([0-9]+) errors.*/\1/p')
		warns=$(echo "$total" | sed -nE 's/.* ([0-9]+) warnings.*/\1/p')
		if [ -n "$errs" ] && [ "$errs" -eq 0 ]; then
			ok "checkpatch: $p (${warns:-0} warnings)"
			if [ "${warns:-0}" -gt 0 ]; then
				grep -E -A3 '^WARNING' "$out" | sed 's/^/#   /'
			fi
		else
			grep -E -A3 '^ERROR' "$out" | sed 's/^/#   /'
			notok "checkpatch: $p (${errs:-?} errors; see $out)"
		fi
	done

	# subjects and lines within 76 columns, no word of the queue's own
	# tooling, a cover letter for each series (scripts/check_messages.py)
	rm -f "$logs/messages.tap"
	"$top/scripts/check_messages.py" "$patches" >"$logs/messages.tap" 2>"$logs/messages.err"
	st=$?
	grep -E '^(not ok|# )' "$logs/messages.tap" | sed 's/^/#   /'
	count_tap "$logs/messages.tap" messages $st

	step "4. bisectability"
	mapfile -t commits < <(git -C "$tree" rev-list --reverse upstream..main)
	series_end() { # the series a patch ends, as a note
		local e
		for e in "${ends[@]}"; do
			[ "${e%% *}" = "$1" ] && echo " (end of ${e#* })"
		done
		return 0
	}
	for ((i = 0; i < ${#commits[@]}; i++)); do
		c=${commits[$i]}
		subj=$(git -C "$tree" log -1 --format=%s "$c")
		git -C "$tree" checkout -q --detach "$c"
		if "$top/scripts/build.sh" $lines --qtest-config --tree "$tree" --builddir "$bdir" \
			>"$logs/bisect-$((i + 1)).log" 2>&1; then
			ok "bisect: builds at patch $((i + 1))/${#commits[@]}: $subj$(series_end $((i + 1)))"
		else
			tail -n 20 "$logs/bisect-$((i + 1)).log" | sed 's/^/#   /'
			notok "bisect: builds at patch $((i + 1))/${#commits[@]}: $subj (see $logs/bisect-$((i + 1)).log)"
		fi
	done
	git -C "$tree" checkout -q main

	step "5. nvme qtests"
	if "$top/scripts/build.sh" $lines --qtest-config --tree "$tree" --builddir "$bdir" >"$logs/build.log" 2>&1; then
		rm -f "$logs"/qtest-*.tap "$logs"/qtest-*.rc
		"$top/scripts/qtest.sh" --builddir "$bdir" --logs "$logs"
		# a binary that was not built wrote nothing: that fails too
		[ -e "$logs/qtest-nvme-qos.tap" ] ||
			notok "qtest: nvme-qos did not run (no $logs/qtest-nvme-qos.tap)"
		# nvme-io-test: a TAP per topic (qtest-nvme-io-TOPIC.tap)
		ls "$logs"/qtest-nvme-io*.tap >/dev/null 2>&1 ||
			notok "qtest: nvme-io did not run (no $logs/qtest-nvme-io-*.tap)"
		for f in "$logs"/qtest-*.tap; do
			[ -e "$f" ] || continue
			n=$(basename "$f" .tap)
			count_tap "$f" "${n#qtest-}" "$(cat "${f%.tap}.rc" 2>/dev/null || echo 0)"
		done
		# the libvirt example of nvme.rst starts QEMU as it says
		rm -f "$logs/docs.tap"
		NVME_DP_QEMU=$bdir/qemu-system-x86_64 "$top/tests/docs_examples.py" \
			"$tree/docs/system/devices/nvme.rst" \
			>"$logs/docs.tap" 2>"$logs/docs.err"
		st=$?
		sed 's/^/#   /' "$logs/docs.tap"
		count_tap "$logs/docs.tap" docs $st
		# QEMU's own test runner knows the queue's tests: blk-bench's smoke
		# runs and the soak model's self-test pass under meson test,
		# nvme-soak is a test of the slow setup
		if (cd "$bdir" && timeout 300 meson test --no-rebuild \
			qtest-x86_64/blk-bench-nvme qtest-x86_64/blk-bench-virtio-blk \
			nvme-soak-model) >"$logs/meson-test.log" 2>&1; then
			ok "meson test: qtest-x86_64/blk-bench-nvme, blk-bench-virtio-blk and nvme-soak-model"
		else
			tail -n 20 "$logs/meson-test.log" | sed 's/^/#   /'
			notok "meson test: qtest-x86_64/blk-bench-nvme, blk-bench-virtio-blk and nvme-soak-model (see $logs/meson-test.log)"
		fi
		if (cd "$bdir" && meson test --no-rebuild --setup slow --list 2>/dev/null) |
			grep -q 'qtest-x86_64/nvme-soak$'; then
			ok "meson test: qtest-x86_64/nvme-soak is a test of the slow setup"
		else
			notok "meson test: qtest-x86_64/nvme-soak is not a test of the slow setup"
		fi
	else
		tail -n 30 "$logs/build.log" | sed 's/^/#   /'
		notok "build of the full series (see $logs/build.log)"
	fi

	step "5b. ThreadSanitizer: ${CHECK_TSAN_TOPICS:-every topic with threads}"
	# its own verdict (tsan_report.py) counts as one test
	rm -rf "$logs/tsan"
	TSAN_TOPICS=${CHECK_TSAN_TOPICS:-} "$top/scripts/tsan.sh" $lines --tree "$tree" \
		--builddir "$chk/tsan-build" --logs "$logs/tsan" \
		>"$logs/tsan.log" 2>&1
	tsan_rc=$?
	if [ -d "$logs/tsan" ] && ls "$logs"/tsan/tsan-*.tap >/dev/null 2>&1; then
		for f in "$logs"/tsan/tsan-*.tap; do
			n=$(basename "$f" .tap)
			count_tap "$f" "$n" "$(cat "${f%.tap}.rc" 2>/dev/null || echo 1)"
		done
		grep -E '^# (tsan|ThreadSanitizer)' "$logs/tsan.log" | sed 's/^/#   /'
		# a report in the series' code in full (its frames), so that the
		# CI output alone says what raced
		sed -n "/^# ThreadSanitizer reports in code of the series/,/^# \(ThreadSanitizer reports in upstream\|accounted\|tsan:\)/p" \
			"$logs/tsan.log" | sed '1d;$d' | sed 's/^/#   /'
		# the judge's exit status and verdict, both: a judge that died, or
		# failed on something else (unsymbolized reports), fails
		grep '^not ok - ThreadSanitizer' "$logs/tsan.log" | sed 's/^/#   /'
		if [ "$tsan_rc" -eq 0 ] &&
			grep -q "^ok - ThreadSanitizer: no report in the series' code" "$logs/tsan.log"; then
			ok "tsan: no ThreadSanitizer report in the series' code"
		else
			notok "tsan: ThreadSanitizer reports in the series' code, or a run or judge that failed (exit $tsan_rc; see $logs/tsan.log)"
		fi
	else
		tail -n 30 "$logs/tsan.log" | sed 's/^/#   /'
		notok "tsan: build or run (see $logs/tsan.log)"
	fi

	step "5c. soak: ${CHECK_SOAK_SECONDS:-4} s in each data-plane mode (make soak runs longer)"
	# one test case per mode; a failure's trace and replay line are in
	# soak.err, and printed here
	# (with gdb, a failure leaves the backtraces of QEMU's threads there)
	# a new seed each run (CHECK_SOAK_SEED to replay one), printed with
	# the command that replays the run
	rm -rf "$logs/soak"
	seed=${CHECK_SOAK_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}
	SOAK_GDB=${SOAK_GDB-$(command -v gdb)} \
	SOAK_SECONDS=${CHECK_SOAK_SECONDS:-4} SOAK_SEED=$seed \
		"$top/scripts/soak.sh" --no-build --tree "$tree" --builddir "$bdir" \
		--logs "$logs/soak" >"$logs/soak.log" 2>&1
	st=$?
	echo "#   soak: seed $seed; replay: CHECK_SOAK_SEED=$seed CHECK_SOAK_SECONDS=${CHECK_SOAK_SECONDS:-4} make check, or SOAK_SEED=$seed SOAK_SECONDS=${CHECK_SOAK_SECONDS:-4} make soak"
	if [ -f "$logs/soak/soak.tap" ]; then
		grep '^# soak: ' "$logs/soak.log" | grep -v '^# soak: ok ' | sed 's/^/#   /'
		count_tap "$logs/soak/soak.tap" soak $st
	else
		tail -n 20 "$logs/soak.log" | sed 's/^/#   /'
		notok "soak: did not run (see $logs/soak.log)"
	fi

	rm -f "$logs/bench-device.tap"
	step "6. device benchmark short run (no guest)"
	NVME_DP_BUILD=$bdir "$top/tests/bench_device_smoke.py" \
		>"$logs/bench-device.tap" 2>"$logs/bench-device.err"
	st=$?
	sed 's/^/#   /' "$logs/bench-device.tap"
	count_tap "$logs/bench-device.tap" bench-device $st

	# The one guest of make check: the controller's stream is QEMU
	# 11.1's, and a Linux driver's use of it (shadow doorbells, I/O in
	# flight at the switchover) is what must survive the move.  A build
	# with TCG, which make check-guest reuses.
	rm -f "$logs/peer.tap"
	step "7. a Linux guest under fio verify moves to QEMU 11.1 and back"
	peer=${NVME_DP_PEER-$("$top/scripts/stock_qemu.sh" 2>"$logs/stock-qemu.err")}
	gbdir=$chk/guest-build
	if guest_build "$tree" "$gbdir" "$logs"; then
		NVME_DP_QEMU=$gbdir/qemu-system-x86_64 NVME_DP_PEER=$peer \
		E2E_LOGS=$logs/peer timeout 1800 "$top/tests/guest_peer.py" \
			>"$logs/peer.tap" 2>"$logs/peer.err"
		st=$?
		sed 's/^/#   /' "$logs/peer.tap"
		count_tap "$logs/peer.tap" peer $st
	fi
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
	echo "# failed:"
	printf '#   %s\n' "${failed[@]}"
fi
echo "# make check took $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
