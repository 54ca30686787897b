#!/usr/bin/env bash
# Write the commits of build/qemu since tag "upstream" to patches/ in a
# stable form (same commits -> same bytes), rewrite patches/series and
# remove patch files that are no longer in the series.
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

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
git -C "$tree" -c core.abbrev=12 -c diff.noprefix=false -c diff.mnemonicPrefix=false \
	-c format.signOff=false -c format.coverLetter=false -c format.headers= \
	format-patch -q --zero-commit --no-signature --full-index --no-numbered \
	--find-renames --no-cover-letter --no-thread --filename-max-length=64 \
	--stat=80 --encode-email-headers -o "$out" upstream..HEAD

mkdir -p "$patches"
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
