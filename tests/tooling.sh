#!/usr/bin/env bash
# Tests of the project's tooling (fetch, tree, export, deps), on a tiny
# fake upstream so that they run in seconds.  TAP on stdout.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

n=0 failures=0
tap() { # tap NAME CMD...
	local name=$1; shift
	n=$((n + 1))
	# not in an if: errexit is ignored in a condition, even in a subshell
	( set -e; [ -z "${TOOLING_TRACE:-}" ] || set -x; "$@" ) >"$work/out.$n" 2>&1
	local rc=$?
	if [ $rc -eq 0 ]; then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name"
		sed 's/^/# /' "$work/out.$n"
		failures=$((failures + 1))
	fi
}

# A fake upstream: a tarball with one top directory, its pin, no repack fixes.
mkdir -p "$work/src/fake-1.0/hw" "$work/repack"
printf 'int a;\n' >"$work/src/fake-1.0/hw/a.c"
printf 'int b;\n' >"$work/src/fake-1.0/hw/b.c"
tar -C "$work/src" -cJf "$work/fake.tar.xz" fake-1.0
sum=$(sha256sum "$work/fake.tar.xz" | cut -d' ' -f1)
cat >"$work/upstream.conf" <<CONF
QEMU_VERSION=1.0
DEBIAN_SOURCE=fake
DEBIAN_VERSION=1.0-1
QEMU_TARBALL_NAME=fake.tar.xz
QEMU_TARBALL_SHA256=$sum
CONF

export NVME_DP_CONF=$work/upstream.conf NVME_DP_REPACK=$work/repack
export NVME_DP_CACHE=$work/cache NVME_DP_SHARED=$work/none NVME_DP_NO_APT=1
export NVME_DP_TREE=$work/tree NVME_DP_PATCHES=$work/patches
export GIT_AUTHOR_NAME="Test Author" GIT_AUTHOR_EMAIL=author@example.invalid
export GIT_COMMITTER_NAME="Test Author" GIT_COMMITTER_EMAIL=author@example.invalid

fetch_verifies_and_caches() {
	out=$(QEMU_TARBALL=$work/fake.tar.xz "$top/scripts/fetch-upstream.sh")
	[ "$out" = "$work/cache/fake.tar.xz" ]
	cmp "$out" "$work/fake.tar.xz"
	# now the cache alone is enough
	[ "$("$top/scripts/fetch-upstream.sh")" = "$work/cache/fake.tar.xz" ]
}
tap "fetch: verified tarball from \$QEMU_TARBALL is used and cached" fetch_verifies_and_caches

fetch_rejects_bad_checksum() {
	rm -rf "$work/cache"
	echo corrupt >"$work/bad.tar.xz"
	mkdir -p "$work/shared"
	cp "$work/fake.tar.xz" "$work/shared/fake.tar.xz"
	out=$(QEMU_TARBALL=$work/bad.tar.xz NVME_DP_SHARED=$work/shared \
		"$top/scripts/fetch-upstream.sh" 2>"$work/err")
	grep -q 'sha256 .* expected' "$work/err"
	[ "$out" = "$work/cache/fake.tar.xz" ]
	cmp "$out" "$work/fake.tar.xz"
}
tap "fetch: a tarball with the wrong sha256 is refused, the shared copy is taken" fetch_rejects_bad_checksum

fetch_fails_loudly() {
	rm -rf "$work/cache"
	if QEMU_TARBALL=$work/bad.tar.xz "$top/scripts/fetch-upstream.sh" 2>"$work/err"; then
		return 1
	fi
	grep -q 'tried:' "$work/err"
	grep -q 'QEMU_TARBALL' "$work/err"
	grep -q 'shared copy' "$work/err"
	grep -q 'cache' "$work/err"
	grep -q 'supply it with QEMU_TARBALL=' "$work/err"
	cp "$work/fake.tar.xz" "$work/cache/fake.tar.xz" 2>/dev/null ||
		{ mkdir -p "$work/cache"; cp "$work/fake.tar.xz" "$work/cache/"; }
}
tap "fetch: when every source fails it says what it tried and how to supply the file" fetch_fails_loudly

# A patch on the fake tree, made the way a developer makes one.
make_patch() { # make_patch FILE TEXT SUBJECT -> commit in $NVME_DP_TREE
	printf '%s\n' "$2" >>"$NVME_DP_TREE/$1"
	git -C "$NVME_DP_TREE" commit -q -s -am "$3"
}

tree_creates() {
	rm -rf "$NVME_DP_TREE" "$NVME_DP_PATCHES"
	mkdir -p "$NVME_DP_PATCHES"
	: >"$NVME_DP_PATCHES/series"
	"$top/scripts/tree.sh"
	git -C "$NVME_DP_TREE" rev-parse -q --verify pristine >/dev/null
	git -C "$NVME_DP_TREE" rev-parse -q --verify upstream >/dev/null
	[ "$(git -C "$NVME_DP_TREE" rev-parse HEAD)" = "$(git -C "$NVME_DP_TREE" rev-parse upstream)" ]
	[ -f "$NVME_DP_TREE/hw/a.c" ]
}
tap "tree: unpacks, commits the pristine source, tags pristine and upstream" tree_creates

export_roundtrip() {
	make_patch hw/a.c 'int a2;' 'hw/a: add a2'
	make_patch hw/b.c 'int b2;' 'hw/b: add b2'
	"$top/scripts/export.sh"
	[ "$(cat "$NVME_DP_PATCHES/series")" = "$(printf '0001-hw-a-add-a2.patch\n0002-hw-b-add-b2.patch')" ]
	head -n 1 "$NVME_DP_PATCHES/0001-hw-a-add-a2.patch" | grep -q '^From 0000000000000000000000000000000000000000 '
	grep -q '^Subject: \[PATCH\] hw/a: add a2$' "$NVME_DP_PATCHES/0001-hw-a-add-a2.patch"
	grep -q '^Signed-off-by: Test Author <author@example.invalid>$' "$NVME_DP_PATCHES/0001-hw-a-add-a2.patch"
	if grep -q '^-- $' "$NVME_DP_PATCHES/0002-hw-b-add-b2.patch"; then false; fi
	cp -r "$NVME_DP_PATCHES" "$work/first"
	# rebuilding the tree from the patches and exporting again changes nothing
	rm -rf "$NVME_DP_TREE"
	"$top/scripts/tree.sh"
	"$top/scripts/export.sh"
	diff -r "$work/first" "$NVME_DP_PATCHES"
}
tap "export: stable output (zero commit, no signature, unnumbered subjects); tree + export round-trips byte for byte" export_roundtrip

tree_reuses() {
	head=$(git -C "$NVME_DP_TREE" rev-parse HEAD)
	out=$("$top/scripts/tree.sh"); echo "$out" | grep -q 'reused'
	[ "$(git -C "$NVME_DP_TREE" rev-parse HEAD)" = "$head" ]
}
tap "tree: a tree that matches patches/ is reused as it is" tree_reuses

export_removes_stale() {
	git -C "$NVME_DP_TREE" reset -q --hard HEAD~1
	"$top/scripts/export.sh"
	[ ! -e "$NVME_DP_PATCHES/0002-hw-b-add-b2.patch" ]
	[ "$(cat "$NVME_DP_PATCHES/series")" = "0001-hw-a-add-a2.patch" ]
}
tap "export: patch files no longer in the tree are removed, series rewritten" export_removes_stale

export_needs_signoff() {
	echo 'int c;' >>"$NVME_DP_TREE/hw/b.c"
	git -C "$NVME_DP_TREE" commit -q -am 'hw/b: no sign-off'
	if "$top/scripts/export.sh" 2>"$work/err"; then return 1; fi
	grep -q "no 'Signed-off-by: Test Author" "$work/err"
	[ "$(cat "$NVME_DP_PATCHES/series")" = "0001-hw-a-add-a2.patch" ]
	git -C "$NVME_DP_TREE" reset -q --hard HEAD~1
}
tap "export: refuses a commit without its author's Signed-off-by" export_needs_signoff

tree_updates_after_pull() {
	# patches/ gains a patch (as after a pull); the tree has nothing extra
	cp -r "$NVME_DP_TREE" "$work/other"
	make_patch hw/b.c 'int b3;' 'hw/b: add b3'
	"$top/scripts/export.sh"
	out=$(NVME_DP_TREE=$work/other "$top/scripts/tree.sh"); echo "$out" | grep -q 'applying the series again'
	[ "$(git -C "$work/other" log -1 --format=%s)" = "hw/b: add b3" ]
	grep -q 'int b3;' "$work/other/hw/b.c"
}
tap "tree: after patches/ changed, a clean tree is reset and the series applied again" tree_updates_after_pull

tree_refuses_extra_commits() {
	# the other tree lost b3 from patches/ but holds it as a commit
	git -C "$NVME_DP_TREE" reset -q --hard HEAD~1
	"$top/scripts/export.sh"
	head=$(git -C "$work/other" rev-parse HEAD)
	if NVME_DP_TREE=$work/other "$top/scripts/tree.sh" 2>"$work/err"; then return 1; fi
	grep -q 'not in patches/' "$work/err"
	[ "$(git -C "$work/other" rev-parse HEAD)" = "$head" ]
}
tap "tree: refuses to touch a tree with commits that are not in patches/" tree_refuses_extra_commits

tree_refuses_dirty() {
	git -C "$work/other" reset -q --hard HEAD~1
	make_patch hw/a.c 'int a4;' 'hw/a: add a4'
	"$top/scripts/export.sh"
	echo 'int dirty;' >>"$work/other/hw/a.c"
	if NVME_DP_TREE=$work/other "$top/scripts/tree.sh" 2>"$work/err"; then return 1; fi
	grep -q 'uncommitted changes' "$work/err"
	grep -q 'int dirty;' "$work/other/hw/a.c"
}
tap "tree: refuses to touch a tree with uncommitted changes" tree_refuses_dirty

tree_names_bad_patch() {
	rm -rf "$work/third"
	sed -i 's/^+int a4;/+int a5;/; s/^ int a2;/ int nope;/' "$NVME_DP_PATCHES/0002-hw-a-add-a4.patch"
	if NVME_DP_TREE=$work/third "$top/scripts/tree.sh" 2>"$work/err"; then return 1; fi
	grep -q 'patch 2, patches/0002-hw-a-add-a4.patch, does not apply' "$work/err"
}
tap "tree: a patch that does not apply stops the build, naming the patch" tree_names_bad_patch

# Topic series: branches series/<name> in the tree become directories.
series_export() {
	rm -rf "$NVME_DP_TREE" "$NVME_DP_PATCHES"
	mkdir -p "$NVME_DP_PATCHES"
	: >"$NVME_DP_PATCHES/series"
	"$top/scripts/tree.sh"
	make_patch hw/a.c 'int s1;' 'hw/a: add s1'
	make_patch hw/a.c 'int s2;' 'hw/a: add s2'
	git -C "$NVME_DP_TREE" branch series/01-a
	make_patch hw/b.c 'int s3;' 'hw/b: add s3'
	git -C "$NVME_DP_TREE" branch series/02-b
	"$top/scripts/export.sh" 2>"$work/err"
	[ "$(grep -v '^#' "$NVME_DP_PATCHES/series")" = "$(printf '01-a/\n02-b/')" ]
	[ -f "$NVME_DP_PATCHES/01-a/0001-hw-a-add-s1.patch" ]
	[ -f "$NVME_DP_PATCHES/01-a/0002-hw-a-add-s2.patch" ]
	[ -f "$NVME_DP_PATCHES/02-b/0001-hw-b-add-s3.patch" ]
	grep -q '^Subject: \[PATCH 1/2\] hw/a: add s2$' "$NVME_DP_PATCHES/01-a/0001-hw-a-add-s1.patch" && return 1
	grep -q '^Subject: \[PATCH 2/2\] hw/a: add s2$' "$NVME_DP_PATCHES/01-a/0002-hw-a-add-s2.patch"
	# a new series gets git's placeholders, and export says so
	grep -q '^Subject: \[PATCH 0/2\] \*\*\* SUBJECT HERE \*\*\*$' "$NVME_DP_PATCHES/01-a/0000-cover-letter.patch"
	grep -q 'write the subject and text of .*01-a/0000-cover-letter.patch' "$work/err"
	# the developer writes them; export keeps them, and makes the rest
	sed -i -e 's/\*\*\* SUBJECT HERE \*\*\*/hw\/a: two more/' \
		-e 's/\*\*\* BLURB HERE \*\*\*/Why a needs s1 and s2.\n\nBased-on: none/' \
		"$NVME_DP_PATCHES/01-a/0000-cover-letter.patch"
	cp "$NVME_DP_PATCHES/01-a/0000-cover-letter.patch" "$work/cover"
	"$top/scripts/export.sh"
	cmp "$work/cover" "$NVME_DP_PATCHES/01-a/0000-cover-letter.patch"
	grep -q '^Subject: \[PATCH 0/2\] hw/a: two more$' "$work/cover"
	grep -q '^Why a needs s1 and s2\.$' "$work/cover"
	grep -q '^Test Author (2):$' "$work/cover"
	grep -q '^  hw/a: add s1$' "$work/cover"
	grep -q '^ hw/a.c | 2 ++$' "$work/cover"
	# the cover letter follows the series: a third patch in 01-a
	git -C "$NVME_DP_TREE" checkout -q --detach series/01-a
	make_patch hw/a.c 'int s4;' 'hw/a: add s4'
	git -C "$NVME_DP_TREE" branch -f series/01-a HEAD
	git -C "$NVME_DP_TREE" cherry-pick series/02-b >/dev/null
	git -C "$NVME_DP_TREE" branch -f series/02-b HEAD
	git -C "$NVME_DP_TREE" branch -f main HEAD
	git -C "$NVME_DP_TREE" checkout -q main
	"$top/scripts/export.sh"
	grep -q '^Subject: \[PATCH 0/3\] hw/a: two more$' "$NVME_DP_PATCHES/01-a/0000-cover-letter.patch"
	grep -q '^Test Author (3):$' "$NVME_DP_PATCHES/01-a/0000-cover-letter.patch"
	grep -q '^Why a needs s1 and s2\.$' "$NVME_DP_PATCHES/01-a/0000-cover-letter.patch"
	[ -f "$NVME_DP_PATCHES/01-a/0003-hw-a-add-s4.patch" ]
}
tap "export: each series/<name> branch is a directory with its cover letter; the developer's text is kept, the list and diffstat follow the commits" series_export

series_roundtrip() {
	cp -r "$NVME_DP_PATCHES" "$work/series-first"
	rm -rf "$NVME_DP_TREE"
	out=$("$top/scripts/tree.sh"); echo "$out" | grep -q 'upstream + 4 patch(es) in 2 series'
	[ "$(git -C "$NVME_DP_TREE" log -1 --format=%s series/01-a)" = "hw/a: add s4" ]
	[ "$(git -C "$NVME_DP_TREE" rev-parse series/02-b)" = "$(git -C "$NVME_DP_TREE" rev-parse HEAD)" ]
	"$top/scripts/export.sh"
	diff -r "$work/series-first" "$NVME_DP_PATCHES"
	# a reused tree keeps its branches
	out=$("$top/scripts/tree.sh"); echo "$out" | grep -q reused
	[ "$(git -C "$NVME_DP_TREE" log -1 --format=%s series/01-a)" = "hw/a: add s4" ]
}
tap "tree: a queue of series directories applies in order, each series ending at its branch; tree + export round-trips" series_roundtrip

series_export_refuses() {
	make_patch hw/b.c 'int s5;' 'hw/b: add s5'
	if "$top/scripts/export.sh" 2>"$work/err"; then return 1; fi
	grep -q '1 commit(s) after series/02-b belong to no series' "$work/err"
	git -C "$NVME_DP_TREE" branch -f series/02-b HEAD
	git -C "$NVME_DP_TREE" branch series/03-stale HEAD~3
	git -C "$NVME_DP_TREE" branch -f series/03-stale "$(git -C "$NVME_DP_TREE" commit-tree -p upstream -m stale "upstream^{tree}")"
	if "$top/scripts/export.sh" 2>"$work/err"; then return 1; fi
	grep -q 'series/03-stale is not part of HEAD' "$work/err"
	git -C "$NVME_DP_TREE" branch -D series/03-stale >/dev/null
	git -C "$NVME_DP_TREE" branch series/03-same series/02-b
	if "$top/scripts/export.sh" 2>"$work/err"; then return 1; fi
	grep -q 'two series end at patch 5' "$work/err"
	git -C "$NVME_DP_TREE" branch -D series/03-same >/dev/null
	"$top/scripts/export.sh"
	[ -f "$NVME_DP_PATCHES/02-b/0002-hw-b-add-s5.patch" ]
}
tap "export: refuses commits after the last series, a series branch off HEAD, and two series ending at one commit" series_export_refuses

messages_checked() {
	"$top/scripts/check_messages.py" "$NVME_DP_PATCHES" >"$work/msg.tap" || true
	cat "$work/msg.tap"
	# 02-b's cover letter still has git's placeholders
	grep -q '^not ok .* - 02-b/ (cover letter, 2 patches)' "$work/msg.tap"
	grep -q '^ok .* - 01-a/ (cover letter, 3 patches)' "$work/msg.tap"
	grep -q '^ok .* - 01-a/0001-hw-a-add-s1.patch' "$work/msg.tap"
	# a long subject, a long line and the queue's tooling in a message
	echo 'int s6;' >>"$NVME_DP_TREE/hw/b.c"
	git -C "$NVME_DP_TREE" commit -q -a -s -F - <<MSG
hw/b: a subject that goes on and on and on, well past the seventy-six columns

A line that is much longer than seventy-six columns, which QEMU's history does not want.
Run make check-asan to see it, as the previous patch said.
MSG
	git -C "$NVME_DP_TREE" branch -f series/02-b HEAD
	"$top/scripts/export.sh" 2>/dev/null
	"$top/scripts/check_messages.py" "$NVME_DP_PATCHES" >"$work/msg.tap" || true
	cat "$work/msg.tap"
	grep -q '^# subject is 7[7-9] columns' "$work/msg.tap"
	grep -q '^# line 3 is 8[0-9] columns' "$work/msg.tap"
	grep -q "^# names the queue's tooling or history: 'make check'" "$work/msg.tap"
	grep -q "^# names the queue's tooling or history: 'previous patch'" "$work/msg.tap"
	[ "$(grep -c '^not ok' "$work/msg.tap")" -eq 2 ]
}
tap "messages: subjects and lines within 76 columns, no word of the queue's tooling, a written cover letter per series" messages_checked

count_tap_fails_closed() {
	# make check's counting (scripts/tap.sh), on made-up streams
	printf 'ok 1 - a\nok 2 - b\n1..2\n' >"$work/good.tap"
	printf 'ok 1 - a\nok 2 - b\n' >"$work/noplan.tap"
	printf '1..3\nok 1 - a\nok 2 - b\n' >"$work/short.tap"
	printf 'ok 1 - a\nok 2 - b\nok 3 - c\n1..2\n' >"$work/long.tap"
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/good.tap" x >/dev/null; echo "$pass $fail")" = "2 0" ]
	# a stream without its plan: the script died before it said it
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/noplan.tap" x >/dev/null; echo "$fail")" -ge 1 ]
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/short.tap" x >/dev/null; echo "$fail")" -eq 1 ]
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/long.tap" x >/dev/null; echo "$fail")" -eq 1 ]
	# a good stream from a script that failed, or that timeout(1) stopped
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/good.tap" x 1 >/dev/null; echo "$fail")" -eq 1 ]
	( . "$top/scripts/tap.sh"; count_tap "$work/good.tap" libvirt 124 ) >"$work/timedout.out"
	grep -q '^not ok - libvirt: timed out' "$work/timedout.out"
	# no stream at all (a step that did not run, or a stale one removed)
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/absent.tap" x >/dev/null; echo "$fail")" -eq 1 ]
	# make check passes each step's exit status and removes old outputs
	grep -q 'count_tap "$logs/libvirt.tap" libvirt $st' "$top/scripts/check_guest.sh"
	grep -q 'rm -f "$logs"/\*.tap' "$top/scripts/check_guest.sh"
	grep -q 'rm -rf "$logs/soak"' "$top/scripts/check.sh"
}
tap "make check's counting: no plan, fewer or more cases than planned, a failed or timed-out script, no stream: each fails" count_tap_fails_closed

# A skip counts as one only for a reason README.md lists; the race tests'
# "did not reach it" and a skip without a reason fail
skip_reasons() {
	printf '1..5\nok 1 - a # SKIP no usable /dev/kvm on this host\nok 2 - b # SKIP no virt-xml-validate (make deps installs libvirt-clients)\nok 3 /c # SKIP fdmon_poll_ops not in use\nok 4 /d # SKIP libvirt 11.3.0 has no native NVMe disks (11.5 added them)\nok 5 - e # SKIP the temporary directory does not support O_DIRECT\n' >"$work/skips.tap"
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/skips.tap" x >/dev/null; echo "$skip $fail")" = "5 0" ]
	printf '1..2\nok 1 /shadow/race # SKIP the host never reaped between the device'"'"'s two reads\nok 2 - f # SKIP\n' >"$work/badskips.tap"
	[ "$( . "$top/scripts/tap.sh"; count_tap "$work/badskips.tap" x >/dev/null; echo "$skip $fail")" = "0 2" ]
	# to a file: grep -q ends at its first match, and the writer's SIGPIPE
	# would fail the pipeline (pipefail)
	( . "$top/scripts/tap.sh"; count_tap "$work/badskips.tap" x ) >"$work/badskips.out"
	grep -q 'not a reason a test may skip for' "$work/badskips.out"
	grep -q '^## Skips' "$top/README.md"
}
tap "make check's counting: a skip counts only for a reason README.md lists" skip_reasons

readme_table() {
	# README.md's table of the series is the one series_table.py makes
	# from the committed patches/
	"$top/scripts/series_table.py" "$top/patches" >"$work/table"
	[ "$(grep -c '^| \[' "$work/table")" -eq "$(grep -c '/$' "$top/patches/series")" ]
	python3 -c 'import sys; sys.exit(open(sys.argv[1]).read() not in open(sys.argv[2]).read())' \
		"$work/table" "$top/README.md"
}
tap "README: its table of the series is patches/' (scripts/series_table.py)" readme_table

deps_noop() {
	out=$("$top/scripts/deps.sh")
	echo "$out" | grep -q 'packages present'
}
tap "deps: a no-op when every package is present" deps_noop

# A list of one present package and two missing optional ones, one of
# them from backports: only they are to be installed, as optional (dry
# run: nothing is installed and no apt configuration is written)
deps_optional() {
	printf '%s\n' '# comment' bash 'nvdp-no-such-a?' \
		'nvdp-no-such-b@backports?  # also optional' >"$work/pkgs"
	out=$(DEPS_LIST=$work/pkgs DEPS_DRY_RUN=1 "$top/scripts/deps.sh")
	echo "$out"
	[ "$out" = "deps: installing: (optional: nvdp-no-such-a nvdp-no-such-b)" ]
	printf '%s\n' bash nvdp-no-such-c 'nvdp-no-such-a?' >"$work/pkgs"
	out=$(DEPS_LIST=$work/pkgs DEPS_DRY_RUN=1 "$top/scripts/deps.sh")
	echo "$out"
	[ "$out" = "deps: installing: nvdp-no-such-c (optional: nvdp-no-such-a)" ]
}
tap "deps: optional packages (libvirt's) are installed apart, and may be missing" deps_optional

# make fuzz, on a fake libFuzzer binary: MODE=ok prints libFuzzer's progress
# and final stats; MODE=crash also leaves a reproducer and exits 1;
# MODE=broken exits 1 with nothing.
cat >"$work/fakefuzz" <<'FAKE'
#!/bin/sh
prefix= ; for a in "$@"; do case $a in -artifact_prefix=*) prefix=${a#*=} ;; esac; done
echo "$*" >>"$FAKE_ARGS"
sleep 0.3
echo "#100	NEW    cov: 42 ft: 77 corp: 3/10b lim: 4 exec/s: 100 rss: 10Mb"
echo "stat::number_of_executed_units: 100"
case $MODE in
crash) echo x >"${prefix}crash-$(date +%s%N)"; exit 1 ;;
broken) exit 1 ;;
esac
exit 0
FAKE
chmod +x "$work/fakefuzz"
fuzz_run() { # fuzz_run MODE: runs fuzz.sh on config nvme for 1 s
	rm -rf "$work/fuzz"
	MODE=$1 FAKE_ARGS=$work/fuzz.args FUZZ_BIN=$work/fakefuzz FUZZ_SECONDS=1 \
		FUZZ_DIR=$work/fuzz "$top/scripts/fuzz.sh" --no-build nvme >"$work/fuzz.out" 2>&1
}
fuzz_reports() {
	rm -f "$work/fuzz.args"
	fuzz_run ok
	grep -q -- '--fuzz-target=generic-fuzz-nvme' "$work/fuzz.args"
	grep -q -- "$work/fuzz/corpus/nvme" "$work/fuzz.args"
	# executions summed over the runs of the time box, the last coverage, no crash
	runs=$(wc -l <"$work/fuzz.args")
	grep -Eq "^nvme +[0-9]+ +$((runs * 100)) +42 +77 +0\$" "$work/fuzz.out"
}
tap "fuzz: runs the config's generic-fuzz target, reports executions and coverage" fuzz_reports
fuzz_crash_fails() {
	! fuzz_run crash
	[ "$(ls "$work/fuzz/crashes/nvme" | wc -l)" -ge 1 ]
	grep -Eq '^nvme .* [1-9][0-9]*$' "$work/fuzz.out"
}
tap "fuzz: a crash keeps its reproducer, is counted and fails the run" fuzz_crash_fails
fuzz_broken_fails() {
	! fuzz_run broken
	grep -q 'exited 1 without a reproducer' "$work/fuzz.out"
}
tap "fuzz: a fuzzer that fails without a reproducer fails the run" fuzz_broken_fails

# A configuration over several iothreads: a JSON -device with one mapping
# entry per iothread, an -object per iothread, the others unchanged.
configs_iothreads() {
	python3 - "$top/scripts" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import nvdp_configs as c
a = c.qemu_args("nvme-iothreads-poll", "nvme,id=nvme0,drive=d0,serial=s",
                "poll-max-ns=1", 3)
objs = [a[i + 1] for i in range(0, len(a), 2) if a[i] == "-object"]
assert objs == ["iothread,id=iot%d,poll-max-ns=1" % i for i in range(3)], objs
dev = json.loads(a[-1])
assert dev["driver"] == "nvme" and dev["serial"] == "s", dev
assert dev["dbcs"] is True and dev["ioeventfd"] is True, dev
assert dev["iothread-vq-mapping"] == [{"iothread": "iot%d" % i}
                                      for i in range(3)], dev
assert "iothread" not in dev, dev
v = json.loads(c.device("virtio-blk-iothreads-poll",
                        "virtio-blk-pci,id=v,drive=d0", 2))
assert v["num-queues"] == 2 and len(v["iothread-vq-mapping"]) == 2, v
assert c.qemu_args("nvme-iothread-poll", "nvme,id=n", "p") == [
    "-object", "iothread,id=iot0,p",
    "-device", "nvme,id=n,dbcs=on,ioeventfd=on,iothread=iot0"]
PY
}
tap "configs: -iothreads configurations: JSON -device, iothread-vq-mapping, an -object per iothread" configs_iothreads

# make libvirt-check's domains, built from an rst's xml blocks (the
# "..." lines dropped): the commandline form has the rst's iothreads and
# arguments and libvirt's schema accepts it; the native form has the disk,
# its controller and the override (libvirt 11.3's schema has no NVMe disk)
libvirt_xml() {
	cat >"$work/lv.rst" <<'RST'
Text.

.. code-block:: xml

    <domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
      ...
      <iothreads>1</iothreads>
      <iothreadids>
        <iothread id='1'>
          <poll max='32768'/>
        </iothread>
      </iothreadids>
      <devices>
        <controller type='nvme' index='0'>
          <alias name='ua-nvme0'/>
        </controller>
        <disk type='file' device='disk'>
          <source file='/images/n.img'/>
          <target dev='nvme0n1' bus='nvme'/>
        </disk>
      </devices>
      <qemu:override>
        <qemu:device alias='ua-nvme0'>
          <qemu:frontend>
            <qemu:property name='iothread' type='string' value='iothread1'/>
          </qemu:frontend>
        </qemu:device>
      </qemu:override>
    </domain>

More text.

.. code-block:: xml

    <domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
      ...
      <iothreads>1</iothreads>
      <iothreadids>
        <iothread id='1'>
          <poll max='32768'/>
        </iothread>
      </iothreadids>
      <qemu:commandline>
        <qemu:arg value='-blockdev'/>
        <qemu:arg value='driver=file,filename=/images/c.img,node-name=f0,aio=native,cache.direct=on'/>
        <qemu:arg value='-device'/>
        <qemu:arg value='nvme,id=nvme0,serial=s,drive=f0,iothread=iothread1'/>
      </qemu:commandline>
    </domain>
RST
	NVME_DP_RST=$work/lv.rst "$top/scripts/libvirt_check.py" --xml commandline >"$work/lv.xml"
	NVME_DP_RST=$work/lv.rst "$top/scripts/libvirt_check.py" --xml native >"$work/lvn.xml"
	virt-xml-validate "$work/lv.xml" domain
	python3 - "$work/lv.xml" "$work/lvn.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
q = "{http://libvirt.org/schemas/domain/qemu/1.0}"
c, n = ET.parse(sys.argv[1]).getroot(), ET.parse(sys.argv[2]).getroot()
for d in (c, n):
    assert d.find("iothreads").text == "1"
    assert d.find("iothreadids/iothread[@id='1']/poll").get("max") == "32768"
    assert d.find("devices/serial/source").get("mode") == "connect"
    assert d.find("os/kernel").text.endswith("vmlinuz")
args = [a.get("value") for a in c.iter(q + "arg")]
assert args[1].startswith("driver=file,filename=/images/c.img,"), args
assert args[3] == "nvme,id=nvme0,serial=s,drive=f0,iothread=iothread1", args
assert n.find("devices/disk/target").get("bus") == "nvme"
assert n.find("devices/controller[@type='nvme']/alias").get("name") == "ua-nvme0"
assert n.find(q + "override/" + q + "device").get("alias") == "ua-nvme0"
assert n.find(q + "commandline") is None and c.find(q + "override") is None
PY
}
if command -v virt-xml-validate >/dev/null; then
	tap "libvirt_check.py: the domains of the rst's xml blocks, the commandline one valid for libvirt's schema" libvirt_xml
else
	n=$((n + 1))
	echo "ok $n - libvirt_check.py: the domains of the rst's xml blocks # SKIP no virt-xml-validate (make deps installs libvirt-clients)"
fi

# DIR/tree: a git tree with util/x.c and hw/nvme/ctrl.c, tagged upstream;
# DIR/logs and DIR/build for the checker
tsan_tree() {
	local d=$1 t=$1/tree
	mkdir -p "$d/logs" "$t/hw/nvme" "$t/util" "$d/build"
	git -C "$t" init -q
	printf 'int a;\n' >"$t/util/x.c"
	printf 'int b;\n' >"$t/hw/nvme/ctrl.c"
	git -C "$t" add . && git -C "$t" -c user.name=t -c user.email=t@t commit -qm base
	git -C "$t" tag upstream
}

# The ThreadSanitizer checker: a report with a frame in hw/nvme fails, one
# whose access's innermost frame a top: rule names is accounted, one only
# in upstream code is listed; a test that did not report fails.
tsan_checker() {
	local d=$work/tsan t=$work/tsan/tree
	tsan_tree "$d"
	printf 'ok 1 /a\nok 2 /b\n1..2\n' >"$d/logs/tsan-x.tap"
	report() { # FUNC FILE: a race whose first access is FUNC in FILE
		cat <<R
==================
WARNING: ThreadSanitizer: data race (pid=1)
  Write of size 4 at 0x1 by thread T1:
    #0 memcpy <null> (qemu-system-x86_64+0x1) (BuildId: ab)
    #1 $1 ../tree/$2:1:2 (qemu-system-x86_64+0x2) (BuildId: ab)
    #2 caller ../tree/util/x.c:1 (qemu-system-x86_64+0x3) (BuildId: ab)

  Previous read of size 4 at 0x1 by main thread:
    #0 reader ../tree/util/x.c:1:1

SUMMARY: ThreadSanitizer: data race ../tree/$2:1:2 in $1
==================
R
	}
	printf 'top:known # a reason\n' >"$d/rules"
	report upstream_fn util/x.c >"$d/logs/tsan-x.report.1"
	report known util/x.c >>"$d/logs/tsan-x.report.1"
	python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out1"
	grep -q '1 upstream only' "$d/out1"
	grep -q 'accounted by top:known: 1' "$d/out1"
	grep -q '^3 passed, 0 failed' "$d/out1"
	report nvme_fn hw/nvme/ctrl.c >>"$d/logs/tsan-x.report.1"
	# (not "! cmd": errexit ignores an inverted status)
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out2"; then false; fi
	grep -q "1 in the series' code" "$d/out2"
	grep -q 'series frames: nvme_fn hw/nvme/ctrl.c:1' "$d/out2"
	# a frame of an object that ccache built in another checkout: mapped
	# to this tree by the tail of its path, and still the series'
	report upstream_fn util/x.c >"$d/logs/tsan-x.report.1"
	report nvme_fn hw/nvme/ctrl.c |
		sed 's|\.\./tree/hw/nvme|/elsewhere/build/../qemu/hw/nvme|' \
		>>"$d/logs/tsan-x.report.1"
	grep -q '/elsewhere/build/../qemu/hw/nvme/ctrl.c' "$d/logs/tsan-x.report.1"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out4"; then false; fi
	grep -q "1 in the series' code" "$d/out4"
	grep -q 'series frames: nvme_fn hw/nvme/ctrl.c:1' "$d/out4"
	printf 'ok 1 /a\n1..2\n' >"$d/logs/tsan-x.tap"
	rm "$d/logs/tsan-x.report.1"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out3"; then false; fi
	grep -q 'did not report' "$d/out3"
}
tap "tsan_report.py: hw/nvme frames fail (also from another checkout's objects), top: rules account, a missing test fails" tsan_checker

# A mem: rule (a copy of guest memory) accounts a race one side of which
# is not the device's; when both accesses come through hw/nvme, two of the
# device's threads raced on the same bytes: the series' report.
tsan_mem_rule() {
	local d=$work/tsanmem t=$work/tsanmem/tree
	tsan_tree "$d"
	printf 'ok 1 /a\n1..1\n' >"$d/logs/tsan-x.tap"
	race() { # CALLER-FILE of the second access: util/x.c or hw/nvme/ctrl.c
		cat <<R
==================
WARNING: ThreadSanitizer: data race (pid=1)
  Write of size 16 at 0x1 by thread T1:
    #0 memcpy <null> (qemu-system-x86_64+0x1) (BuildId: ab)
    #1 ramcopy ../tree/util/x.c:1:2 (qemu-system-x86_64+0x2) (BuildId: ab)
    #2 nvme_post ../tree/hw/nvme/ctrl.c:1 (qemu-system-x86_64+0x3) (BuildId: ab)

  Previous read of size 16 at 0x1 by main thread:
    #0 memcpy <null> (qemu-system-x86_64+0x1) (BuildId: ab)
    #1 ramcopy ../tree/util/x.c:1:1
    #2 other ../tree/$1:1:1

SUMMARY: ThreadSanitizer: data race ../tree/util/x.c:1:2 in ramcopy
==================
R
	}
	printf 'mem:ramcopy # guest memory\n' >"$d/rules"
	race util/x.c >"$d/logs/tsan-x.report.1"
	python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out1"
	grep -q 'accounted by mem:ramcopy: 1' "$d/out1"
	grep -q '^2 passed, 0 failed' "$d/out1"
	race hw/nvme/ctrl.c >>"$d/logs/tsan-x.report.1"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out2"; then false; fi
	grep -q 'accounted by mem:ramcopy: 1' "$d/out2"
	grep -q "1 in the series' code" "$d/out2"
	# a top: rule does not account a race with frames of the series
	printf 'top:ramcopy # an upstream race\n' >"$d/rules"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out3"; then false; fi
	if grep -q 'accounted by top:ramcopy' "$d/out3"; then false; fi
	grep -q "1 in the series' code" "$d/out3"
}
tap "tsan_report.py: a mem: rule does not account a race both sides of which are the device's" tsan_mem_rule

# The judge's rules fail closed.  A heap-use-after-free between
# aio_bh_enqueue <- qemu_bh_schedule <- nvme_cq_schedule and free <-
# nvme_free_cq is not accounted by top:aio_bh_enqueue, nor by a pair:
# rule naming both sides (rules account data races only); a data race
# under top:object_unref with frames of the series is not accounted by
# it; a pair: rule accounts the race of its two functions only; a report
# whose frames have no names fails the run, naming the symbolizer.
tsan_rules_fail_closed() {
	local d=$work/tsanrules t=$work/tsanrules/tree
	tsan_tree "$d"
	printf 'ok 1 /a\n1..1\n' >"$d/logs/tsan-x.tap"
	judge() { # OUT: runs the judge, true if it passed
		python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
			--logs "$d/logs" --rules "$d/rules" >"$d/$1"
	}
	two() { # KIND TOP1 FILE1 TOP2 FILE2: a report of two accesses
		cat <<R
==================
WARNING: ThreadSanitizer: $1 (pid=1)
  Write of size 8 at 0x1 by thread T1:
    #0 $2 ../tree/util/x.c:1:2 (qemu-system-x86_64+0x2) (BuildId: ab)
    #1 caller1 ../tree/$3:1:1 (qemu-system-x86_64+0x3) (BuildId: ab)

  Previous write of size 8 at 0x1 by main thread:
    #0 $4 ../tree/util/x.c:1:1 (qemu-system-x86_64+0x4) (BuildId: ab)
    #1 caller2 ../tree/$5:1:1 (qemu-system-x86_64+0x5) (BuildId: ab)

SUMMARY: ThreadSanitizer: $1 ../tree/util/x.c:1:2 in $2
==================
R
	}
	printf 'top:aio_bh_enqueue # a reason\npair:aio_bh_enqueue free # a reason\n' >"$d/rules"
	two heap-use-after-free aio_bh_enqueue hw/nvme/ctrl.c free hw/nvme/ctrl.c \
		>"$d/logs/tsan-x.report.1"
	if judge out1; then false; fi
	if grep -q '^# accounted by' "$d/out1"; then false; fi
	grep -q "1 in the series' code" "$d/out1"
	# the same, all upstream: listed, never accounted
	two heap-use-after-free aio_bh_enqueue util/x.c free util/x.c \
		>"$d/logs/tsan-x.report.1"
	judge out2
	if grep -q '^# accounted by' "$d/out2"; then false; fi
	grep -q '1 upstream only' "$d/out2"
	# top: accounts an upstream race, not one with frames of the series
	printf 'top:object_unref # a reason\n' >"$d/rules"
	two 'data race' object_unref util/x.c object_ref util/x.c \
		>"$d/logs/tsan-x.report.1"
	judge out3
	grep -q 'accounted by top:object_unref: 1' "$d/out3"
	two 'data race' object_unref hw/nvme/ctrl.c object_ref util/x.c \
		>"$d/logs/tsan-x.report.1"
	if judge out4; then false; fi
	grep -q "1 in the series' code" "$d/out4"
	# pair: accounts the race of exactly its two functions
	printf 'pair:object_ref object_unref # a reason\n' >"$d/rules"
	judge out5
	grep -q 'accounted by pair:object_ref object_unref: 1' "$d/out5"
	two 'data race' object_unref hw/nvme/ctrl.c other_fn util/x.c \
		>"$d/logs/tsan-x.report.1"
	if judge out6; then false; fi
	grep -q "1 in the series' code" "$d/out6"
	# unsymbolized frames of QEMU fail the run, upstream or not
	printf '' >"$d/rules"
	two 'data race' upstream_fn util/x.c other_fn util/x.c |
		sed 's|#1 caller1 [^(]*|#1 <null> <null> |' >"$d/logs/tsan-x.report.1"
	grep -q '#1 <null> <null> (qemu-system-x86_64+0x3)' "$d/logs/tsan-x.report.1"
	if judge out7; then false; fi
	grep -q '^not ok - ThreadSanitizer: 1 reports with frames of QEMU that have no function' "$d/out7"
	grep -q 'symbolizer is missing' "$d/out7"
}
tap "tsan_report.py: rules account data races only, top: only upstream ones, pair: its two functions; unsymbolized reports fail" tsan_rules_fail_closed

# A qtest binary that bails out under TSan, with glib's plan line grown
# only to the tests it ran (-p): the judge counts the tests asked for and
# the exit status (tsan.sh's .planned and .rc), and a "Bail out!" fails,
# in the judge and in make check's count; two accesses under the same
# write lock are no race
tsan_bailout_fails() {
	local d=$work/tsanbail t=$work/tsanbail/tree
	tsan_tree "$d"
	printf '1..1\nok 1 /a\n1..2\nok 2 /b\nBail out! ERROR: x should be FALSE\n' >"$d/logs/tsan-x.tap"
	: >"$d/rules"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out1"; then false; fi
	grep -q 'Bail out' "$d/out1"
	echo 4 >"$d/logs/tsan-x.planned"
	echo 134 >"$d/logs/tsan-x.rc"
	sed -i '/Bail out/d' "$d/logs/tsan-x.tap"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out2"; then false; fi
	grep -q '2 of the 4 tests asked for did not report' "$d/out2"
	grep -q 'exited with status 134' "$d/out2"
	printf '1..1\nok 1 /a\nBail out! x\n' >"$d/bail.tap"
	[ "$( . "$top/scripts/tap.sh"; count_tap "$d/bail.tap" x >/dev/null; echo "$fail")" -eq 1 ]
	# the same lock held for writing by both accesses: no race
	rm -f "$d/logs/tsan-x.planned" "$d/logs/tsan-x.rc"
	printf '1..1\nok 1 /a\n' >"$d/logs/tsan-x.tap"
	cat >"$d/logs/tsan-x.report.1" <<R
==================
WARNING: ThreadSanitizer: data race (pid=1)
  Write of size 4 at 0x1 by main thread (mutexes: write M0):
    #0 upstream_fn ../tree/util/x.c:1:2 (qemu-system-x86_64+0x2) (BuildId: ab)
    #1 nvme_fn ../tree/hw/nvme/ctrl.c:1:1 (qemu-system-x86_64+0x3) (BuildId: ab)

  Previous write of size 4 at 0x1 by thread T1 (mutexes: write M0, read M1):
    #0 upstream_fn ../tree/util/x.c:1:1 (qemu-system-x86_64+0x4) (BuildId: ab)

SUMMARY: ThreadSanitizer: data race ../tree/util/x.c:1:2 in upstream_fn
==================
R
	python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out3"
	grep -q 'accounted by lock:the same mutex held for writing by both: 1' "$d/out3"
	sed -i 's/(mutexes: write M0, read M1)/(mutexes: read M0)/' "$d/logs/tsan-x.report.1"
	if python3 "$top/scripts/tsan_report.py" --tree "$t" --builddir "$d/build" \
		--logs "$d/logs" --rules "$d/rules" >"$d/out4"; then false; fi
	grep -q "1 in the series' code" "$d/out4"
}
tap "tsan_report.py: a bail-out, tests that did not run and a failed exit fail; the same write lock on both sides is no race" tsan_bailout_fails

# qtest.sh on a fake build: a missing nvme-io-test fails; a unit test that
# was not built fails, except the io_uring one in a build without liburing
# (a skip naming it); each binary's exit status is kept for the count.
qtest_fails_closed() {
	local b=$work/qtb l=$work/qtl
	mkdir -p "$b/tests/qtest" "$b/tests/unit" "$l"
	printf '#!/bin/sh\n' >"$b/qemu-system-x86_64"
	printf '#!/bin/sh\necho "1..1"; echo "ok 1 /a"; exit 0\n' >"$b/tests/qtest/qos-test"
	for u in test-aio test-aio-multithread; do
		printf '#!/bin/sh\necho "1..1"; echo "ok 1 /u"; exit 3\n' >"$b/tests/unit/$u"
	done
	chmod +x "$b/qemu-system-x86_64" "$b/tests/qtest/qos-test" "$b/tests/unit/"*
	: >"$b/config-host.h"
	"$top/scripts/qtest.sh" --builddir "$b" --logs "$l" >"$work/qt.out"
	grep -q '^not ok 1 - nvme-io-test: not built' "$l/qtest-nvme-io.tap"
	grep -q '^not ok 1 - test-nested-aio-poll: not built' "$l/qtest-unit-test-nested-aio-poll.tap"
	grep -q '# SKIP no liburing' "$l/qtest-unit-test-aio-poll-io-uring.tap"
	[ "$(cat "$l/qtest-unit-test-aio.rc")" = 3 ]
	[ "$(cat "$l/qtest-nvme-qos.rc")" = 0 ]
	# with liburing, the io_uring test that is missing fails too
	echo '#define CONFIG_LINUX_IO_URING' >"$b/config-host.h"
	"$top/scripts/qtest.sh" --builddir "$b" --logs "$l" >"$work/qt.out"
	grep -q '^not ok 1 - test-aio-poll-io-uring: not built' "$l/qtest-unit-test-aio-poll-io-uring.tap"
	# and the count fails a binary that exited non-zero after passing
	( . "$top/scripts/tap.sh"
	  count_tap "$l/qtest-unit-test-aio.tap" unit-test-aio "$(cat "$l/qtest-unit-test-aio.rc")"
	  [ "$fail" -eq 1 ] ) >"$work/qt.count"
	grep -q 'exited with status 3' "$work/qt.count"
	# nvme-io-test runs a topic at a time: a topic whose run dies half
	# way fails for each test it did not report, and for its status
	cat >"$b/tests/qtest/nvme-io-test" <<'F'
#!/bin/sh
[ "$1" = -l ] && { printf '/x86_64/nvme-io/a/one\n/x86_64/nvme-io/a/two\n/x86_64/nvme-io/b/one\n'; exit 0; }
case "$*" in */a/one*) echo "ok 1 /x86_64/nvme-io/a/one"; echo "1..1"; exit 134 ;; esac
echo "ok 1 /x86_64/nvme-io/b/one"; echo "1..1"
F
	chmod +x "$b/tests/qtest/nvme-io-test"
	"$top/scripts/qtest.sh" --builddir "$b" --logs "$l" >"$work/qt.out"
	( . "$top/scripts/tap.sh"
	  count_tap "$l/qtest-nvme-io-a.tap" nvme-io-a "$(cat "$l/qtest-nvme-io-a.rc")"
	  [ "$pass" -eq 1 ] && [ "$fail" -eq 2 ] ) >"$work/qt.count"
	grep -q 'test 2 of 2 did not report' "$work/qt.count"
	( . "$top/scripts/tap.sh"
	  count_tap "$l/qtest-nvme-io-b.tap" nvme-io-b "$(cat "$l/qtest-nvme-io-b.rc")"
	  [ "$pass" -eq 1 ] && [ "$fail" -eq 0 ] )
	[ ! -e "$l/qtest-nvme-io.tap" ]
}
tap "qtest.sh: a missing binary fails, only the io_uring unit test may skip (no liburing), exit statuses count, a topic that dies fails its unreported tests" qtest_fails_closed

# soak.sh: a run in which a kind of operation never executed fails,
# naming it (a replay, SOAK_STEPS, stops early and may leave kinds out)
soak_never_executed() {
	local b=$work/sk l=$work/skl
	mkdir -p "$b/tests/qtest" "$l"
	printf '#!/bin/sh\n' >"$b/qemu-system-x86_64"
	cat >"$b/tests/qtest/nvme-soak" <<'F'
#!/bin/sh
echo "1..1"
echo "ok 1 - mmio.shadow.msix"
echo '# {"config": "mmio.shadow.msix", "seconds": 1, "steps": 10, "steps_per_second": 10, "commands": 5, "interrupts": 1, "migrations": 0, "werror_stops": 0, "torn_reads": 0, "ops": {"read": 7, "migrate": '"${FAKE_MIGRATE:-0}"'}}'
F
	chmod +x "$b/qemu-system-x86_64" "$b/tests/qtest/nvme-soak"
	if "$top/scripts/soak.sh" --no-build --builddir "$b" --logs "$l" >"$work/sk.out" 2>&1; then false; fi
	grep -q '^# soak: not ok: never executed over the whole run: migrate' "$work/sk.out"
	FAKE_MIGRATE=3 "$top/scripts/soak.sh" --no-build --builddir "$b" --logs "$l" >"$work/sk.out" 2>&1
	SOAK_STEPS=10 "$top/scripts/soak.sh" --no-build --builddir "$b" --logs "$l" >"$work/sk.out" 2>&1
}
tap "soak.sh: a run in which a kind of operation never executed fails" soak_never_executed

# build.sh --qtest-config: the device file goes into the tree's configs
# (configure takes one by name), ignored by git, and is rewritten only
# when it differs (a new mtime would make meson reconfigure every prefix)
qtest_config_file() {
	local t=$work/qtcfg b=$work/qtcfg-build mak m1 m2
	mkdir -p "$t/configs/devices/x86_64-softmmu"
	git -C "$t" init -q
	printf '#!/bin/sh\nexit 1\n' >"$t/configure"
	chmod +x "$t/configure"
	git -C "$t" add configure
	git -C "$t" -c user.name=t -c user.email=t@t commit -q -m t
	mak=$t/configs/devices/x86_64-softmmu/nvdp-qtest.mak
	if "$top/scripts/build.sh" --qtest-config --tree "$t" --builddir "$b" >/dev/null 2>&1; then false; fi
	cmp -s "$mak" "$top/scripts/qtest-devices.mak"
	grep -q CONFIG_NVME_PCI=y "$mak"
	[ -z "$(git -C "$t" status --porcelain)" ]
	m1=$(stat -c %Y "$mak")
	sleep 1
	if "$top/scripts/build.sh" --qtest-config --tree "$t" --builddir "$b" >/dev/null 2>&1; then false; fi
	m2=$(stat -c %Y "$mak")
	[ "$m1" = "$m2" ]
	[ "$(grep -c nvdp-qtest.mak "$t/.git/info/exclude")" -eq 1 ]
}
tap "build.sh --qtest-config: its device file in the tree, ignored by git, rewritten only when it differs" qtest_config_file

# The harness itself: a failing step in the middle of a case fails it.
harness_fails() { false; true; }
( tap "harness" harness_fails ) >"$work/harness.out"
n=$((n + 1))
if grep -q '^not ok' "$work/harness.out"; then echo "ok $n - harness: a failing step inside a case fails the case"
else echo "not ok $n - harness: a failing step inside a case fails the case"; failures=$((failures + 1)); fi

echo "1..$n"
[ "$failures" -eq 0 ]
