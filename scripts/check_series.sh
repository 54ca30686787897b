#!/usr/bin/env bash
# make check-series: the NVMe qtests at the last patch of every topic
# series, from patches/ as committed.  make check builds every patch and
# runs the qtests on the last; this runs them where each series ends, so
# that a series that breaks a test which a later one mends shows up.  It
# takes about as long as the qtests times the number of series (an hour
# and more here), so it is a target of its own.
#   check_series.sh [SERIES...]   (directory names; all by default)
# Uses make check's tree and build directory (build/check); logs in
# build/check/logs/series/<series>/.  TAP on stdout: a case per series
# for its build, then the qtests' cases, named after the series.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
chk=$top/build/check
tree=$chk/qemu
bdir=$chk/qemu-build
logs=$chk/logs/series
patches=${NVME_DP_PATCHES:-$top/patches}
. "$top/scripts/series.sh"

mapfile -t all < <(series_dirs "$patches")
[ ${#all[@]} -gt 0 ] || { echo "check-series: patches/series lists no series directory" >&2; exit 1; }
want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
for w in "${want[@]}"; do
	printf '%s\n' "${all[@]}" | grep -qxF "$w" || { echo "check-series: no series $w in patches/series" >&2; exit 1; }
done

mkdir -p "$chk"
# build/check/qemu is make check's scratch tree: start it from 'upstream'
check_tree_apply "$tree" "$patches" "$chk/series-tree.log" ||
	{ cat "$chk/series-tree.log" >&2; exit 1; }

n=0 fail=0

emit() { n=$((n + 1)); echo "$1 $n - $2"; }
for s in "${want[@]}"; do
	rm -rf "${logs:?}/$s"
	mkdir -p "$logs/$s"
	git -C "$tree" checkout -q --detach "series/$s"
	echo "# $s: $(git -C "$tree" log -1 --format=%s HEAD)"
	if ! "$top/scripts/build.sh" --line-tables --tree "$tree" --builddir "$bdir" \
		>"$logs/$s/build.log" 2>&1; then
		emit "not ok" "$s: builds (see $logs/$s/build.log)"
		fail=$((fail + 1))
		continue
	fi
	"$top/scripts/qtest.sh" --builddir "$bdir" --logs "$logs/$s" >"$logs/$s/qtest.log" 2>&1
	for f in "$logs/$s"/qtest-*.tap; do
		[ -e "$f" ] || continue
		name=$(basename "$f" .tap)
		plan=$(grep -E '^1\.\.[0-9]+' "$f" | tail -n 1 | cut -c4-)
		seen=0
		while IFS= read -r line; do
			case $line in
			"not ok "*) seen=$((seen + 1)); emit "not ok" "$s: ${name#qtest-}: ${line#not ok }"; fail=$((fail + 1)) ;;
			"ok "*) seen=$((seen + 1)) ;;
			esac
		done <"$f"
		if [ -z "$plan" ] || [ "$seen" -lt "$plan" ]; then
			emit "not ok" "$s: ${name#qtest-}: $seen of ${plan:-no plan} reported (crash or hang: see $f)"
			fail=$((fail + 1))
		else
			emit "ok" "$s: ${name#qtest-}: $seen cases"
		fi
	done
done
git -C "$tree" checkout -q main
echo "1..$n"
echo "# check-series: ${#want[@]} series, $fail failure(s)"
[ "$fail" -eq 0 ]
