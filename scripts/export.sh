#!/usr/bin/env bash
# Write the commits of build/qemu since tag "upstream" to patches/ in a
# stable form (same commits -> same bytes), rewrite patches/series and
# remove patch files that are no longer in the series.
#
# Topic series: when the tree has branches series/<name>, each marks the
# last commit of a series, and the commits up to it (from the end of the
# series before) go to the directory patches/<name>/, numbered from 0001,
# after its cover letter 0000-cover-letter.patch; patches/series lists the
# directories in order.  The cover letter's subject and text are kept from
# the committed one; its list of patches and diffstat are made afresh.
# A rebase moves the branches with it: git rebase -i --update-refs.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tree=${NVME_DP_TREE:-$top/build/qemu}
patches=${NVME_DP_PATCHES:-$top/patches}

die() { echo "export: $*" >&2; exit 1; }

[ -d "$tree/.git" ] || die "no tree at $tree: run 'make tree' first"
git -C "$tree" rev-parse -q --verify upstream >/dev/null || die "$tree has no tag 'upstream'"
if [ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ]; then
	echo "export: warning: $tree has uncommitted changes; they are not exported" >&2
fi

# Every patch must carry its author's Signed-off-by.
bad=0
for c in $(git -C "$tree" rev-list --reverse upstream..HEAD); do
	author=$(git -C "$tree" log -1 --format='%an <%ae>' "$c")
	if ! git -C "$tree" log -1 --format=%B "$c" | grep -qxF "Signed-off-by: $author"; then
		echo "export: $(git -C "$tree" log -1 --format='%h %s' "$c"): no 'Signed-off-by: $author'" >&2
		bad=1
	fi
done
[ $bad -eq 0 ] || die "add the Signed-off-by lines (git rebase -i upstream, then git commit --amend -s) and export again"

fmt() { # fmt OUTDIR RANGE [--numbered]
	local o=$1 r=$2; shift 2
	git -C "$tree" -c core.abbrev=12 -c diff.noprefix=false -c diff.mnemonicPrefix=false \
		-c format.signOff=false -c format.coverLetter=false -c format.headers= \
		format-patch -q --zero-commit --no-signature --full-index \
		--find-renames --no-cover-letter --no-thread --filename-max-length=64 \
		--stat=80 --encode-email-headers "$@" -o "$o" "$r"
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$patches"
mapfile -t branches < <(git -C "$tree" for-each-ref --format='%(refname:short)' refs/heads/series/)

if [ ${#branches[@]} -eq 0 ]; then
	# a flat queue
	fmt "$out" upstream..HEAD --no-numbered
	: >"$out/series"
	for f in "$out"/*.patch; do
		[ -e "$f" ] || break
		b=$(basename "$f")
		echo "$b" >>"$out/series"
		cmp -s "$f" "$patches/$b" || cp "$f" "$patches/$b"
	done
	for f in "$patches"/*.patch; do
		[ -e "$f" ] || break
		grep -qxF "$(basename "$f")" "$out/series" || { rm -f "$f"; echo "export: removed stale $(basename "$f")"; }
	done
	cmp -s "$out/series" "$patches/series" || cp "$out/series" "$patches/series"
	echo "export: $(grep -c . "$out/series" || true) patch(es) in patches/series"
	exit 0
fi

# Topic series: order the branches by where they end
total=$(git -C "$tree" rev-list --count upstream..HEAD)
: >"$out/ends"
for b in "${branches[@]}"; do
	git -C "$tree" merge-base --is-ancestor "$b" HEAD ||
		die "$b is not part of HEAD: move it onto the series' last commit (a rebase moves it with --update-refs), or delete it"
	git -C "$tree" merge-base --is-ancestor upstream "$b" && [ "$(git -C "$tree" rev-parse "$b")" != "$(git -C "$tree" rev-parse upstream)" ] ||
		die "$b ends at or before 'upstream': it holds no patch"
	echo "$(git -C "$tree" rev-list --count "upstream..$b") ${b#series/}" >>"$out/ends"
done
sort -n -o "$out/ends" "$out/ends"
dup=$(cut -d' ' -f1 "$out/ends" | uniq -d | head -n 1)
[ -z "$dup" ] || die "two series end at patch $dup: $(awk -v n="$dup" '$1 == n { printf "series/%s ", $2 }' "$out/ends")"
last=$(tail -n 1 "$out/ends" | cut -d' ' -f1)
[ "$last" -eq "$total" ] ||
	die "$((total - last)) commit(s) after series/$(tail -n 1 "$out/ends" | cut -d' ' -f2) belong to no series: move that branch to HEAD, or add a branch series/<name> at HEAD"

{
	echo "# The topic series, in the order they apply; each directory holds"
	echo "# its cover letter (0000-cover-letter.patch) and its patches."
} >"$out/series"
base=upstream
while read -r n name; do
	end=series/$name
	mkdir -p "$out/$name"
	fmt "$out/$name" "$base..$end" --numbered
	"$top/scripts/cover_letter.py" "$tree" "$base" "$end" \
		"$patches/$name/0000-cover-letter.patch" "$out/$name/0000-cover-letter.patch"
	echo "$name/" >>"$out/series"
	base=$end
done <"$out/ends"

# patches/ as written: the series' directories, and nothing stale
while read -r n name; do
	mkdir -p "$patches/$name"
	for f in "$out/$name"/*.patch; do
		b=$(basename "$f")
		cmp -s "$f" "$patches/$name/$b" || cp "$f" "$patches/$name/$b"
	done
	for f in "$patches/$name"/*.patch; do
		[ -e "$f" ] || break
		[ -e "$out/$name/$(basename "$f")" ] || { rm -f "$f"; echo "export: removed stale $name/$(basename "$f")"; }
	done
done <"$out/ends"
for f in "$patches"/*.patch; do
	[ -e "$f" ] || break
	rm -f "$f"; echo "export: removed $(basename "$f") (the queue is in series directories now)"
done
for d in "$patches"/*/; do
	[ -d "$d" ] || break
	d=$(basename "$d")
	grep -qxF "$d/" "$out/series" && continue
	if ls "$patches/$d"/*.patch >/dev/null 2>&1; then
		rm -f "$patches/$d"/*.patch
		rmdir "$patches/$d" 2>/dev/null || true
		echo "export: removed the series $d (no branch series/$d in the tree)"
	fi
done
cmp -s "$out/series" "$patches/series" || cp "$out/series" "$patches/series"
echo "export: $total patch(es) in $(grep -c . "$out/ends") series in patches/series"
grep -l -F '*** SUBJECT HERE ***' "$patches"/*/0000-cover-letter.patch 2>/dev/null |
	sed 's|^|export: write the subject and text of |' >&2 || true
exit 0
