#!/usr/bin/env bash
# Create or update the QEMU working tree build/qemu:
#   tree.sh [--reapply]   (--reapply: apply the series again even if it matches)
#   commit 1 (tag "pristine"): the pinned tarball as it is
#   commit 2 (tag "upstream"): + repack/*.patch (build fixes for Debian's repack)
#   then every patch of patches/series, in order, with git am; each topic
#   series (a directory of patches/) ends at a branch series/<directory>.
# An existing tree whose commits since "upstream" match patches/ is reused.
# When patches/ changed, the tree is reset to "upstream" and the series
# applied again, unless it holds work that is not in patches/: then refuse.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "${NVME_DP_CONF:-$top/upstream.conf}"
tree=${NVME_DP_TREE:-$top/build/qemu}
patches=${NVME_DP_PATCHES:-$top/patches}
repack=${NVME_DP_REPACK:-$top/repack}
reapply=
[ "${1:-}" = --reapply ] && reapply=1

die() { echo "tree: $*" >&2; exit 1; }

. "$top/scripts/series.sh"
series() {
	series_patches "$patches"
}

# patch-ids, one per line, in order
series_ids() {
	local p
	series | while read -r p; do
		[ -f "$patches/$p" ] || die "patches/series names $p, which does not exist"
		git patch-id --stable <"$patches/$p" | cut -d' ' -f1
	done
}
tree_ids() {
	local c
	git -C "$tree" rev-list --reverse upstream..HEAD | while read -r c; do
		git -C "$tree" show "$c" | git patch-id --stable | cut -d' ' -f1
	done
}

ensure_identity() {
	if [ -z "$(git -C "$tree" config user.email || true)" ]; then
		git -C "$tree" config user.name "nvme-dataplane"
		git -C "$tree" config user.email "nvme-dataplane@users.noreply.invalid"
	fi
}

apply_series() {
	local p n=0 d
	while read -r p; do
		n=$((n + 1))
		if ! git -C "$tree" am -q --keep-cr "$patches/$p" >/dev/null 2>"$tree/.git/am.err"; then
			cat "$tree/.git/am.err" >&2
			git -C "$tree" am --abort >/dev/null 2>&1 || true
			die "patch $n, patches/$p, does not apply to the tree (base: upstream + patches 1..$((n - 1)))"
		fi
	done < <(series)
	series_branches force
	d=$(series_dirs "$patches" | grep -c . || true)
	if [ "$d" -gt 0 ]; then
		echo "tree: $tree: upstream + $n patch(es) in $d series"
	else
		echo "tree: $tree: upstream + $n patch(es)"
	fi
}

# series_branches [force]: branch series/<dir> at the last commit of each
# topic series; without force, only the branches that are missing
series_branches() {
	local d c n=0 commits b
	if [ "${1:-}" = force ]; then
		git -C "$tree" for-each-ref --format='%(refname:short)' refs/heads/series/ |
			while read -r b; do git -C "$tree" branch -q -D "$b"; done
	fi
	mapfile -t commits < <(git -C "$tree" rev-list --reverse upstream..HEAD)
	while read -r d c; do
		[ -n "$d" ] || continue
		n=$((n + c))
		[ "$n" -le "${#commits[@]}" ] || die "the tree has fewer commits than patches/series lists"
		if [ "${1:-}" = force ] || ! git -C "$tree" rev-parse -q --verify "refs/heads/series/$d" >/dev/null; then
			git -C "$tree" branch -f "series/$d" "${commits[$((n - 1))]}" >/dev/null
		fi
	done < <(series_counts "$patches")
}

base_stamp() {
	# What the base is made of: tarball and repack fixes.
	{ echo "$QEMU_TARBALL_SHA256"; cat "$repack"/*.patch 2>/dev/null || true; } | sha256sum | cut -d' ' -f1
}

create() {
	local tarball tmp
	tarball=$("$top/scripts/fetch-upstream.sh")
	tmp=$tree.new
	rm -rf "$tmp"
	mkdir -p "$tmp"
	echo "tree: unpacking $tarball"
	tar --no-same-owner -xJf "$tarball" -C "$tmp" --strip-components=1
	git -C "$tmp" init -q -b main
	tree=$tmp ensure_identity
	git -C "$tmp" config core.autocrlf false
	git -C "$tmp" add -A -f . >/dev/null
	GIT_AUTHOR_DATE="2000-01-01T00:00:00Z" GIT_COMMITTER_DATE="2000-01-01T00:00:00Z" \
		git -C "$tmp" commit -q --no-verify -m "QEMU $QEMU_VERSION ($QEMU_TARBALL_NAME, pristine)" \
		-m "Debian source package $DEBIAN_SOURCE $DEBIAN_VERSION, sha256 $QEMU_TARBALL_SHA256."
	git -C "$tmp" tag pristine
	for p in "$repack"/*.patch; do
		[ -e "$p" ] || continue
		git -C "$tmp" am -q --keep-cr "$p" || die "repack fix $p does not apply"
	done
	git -C "$tmp" tag upstream
	base_stamp >"$tmp/.git/nvme-dp-base"
	mv "$tmp" "$tree"
}

if [ ! -d "$tree/.git" ]; then
	[ -e "$tree" ] && die "$tree exists but is not a git tree: move it away"
	create
	apply_series
	exit 0
fi

git -C "$tree" rev-parse -q --verify upstream >/dev/null || die "$tree has no tag 'upstream': not a tree made by this script; move it away"
[ -f "$tree/.git/rebase-apply/applying" ] && die "$tree has a git am in progress: finish or abort it"

want=$(series_ids)
have=$(tree_ids)
stamp=$(cat "$tree/.git/nvme-dp-base" 2>/dev/null || true)
if [ -z "$reapply" ] && [ "$want" = "$have" ] && [ "$stamp" = "$(base_stamp)" ]; then
	series_branches
	echo "tree: $tree matches patches/ ($(echo -n "$have" | grep -c .) patches): reused"
	exit 0
fi

# It differs.  Refuse to touch work that is not in patches/.
if [ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ]; then
	die "$tree has uncommitted changes and patches/ changed: commit them and 'make export', or discard them, then run again"
fi
extra=$(comm -23 <(echo "$have" | sort) <(echo "$want" | sort) | grep -c . || true)
if [ "$extra" -gt 0 ]; then
	die "$tree holds $extra commit(s) since 'upstream' that are not in patches/: 'make export' them (or drop them with git reset), then run again"
fi

if [ "$stamp" != "$(base_stamp)" ]; then
	echo "tree: the base (tarball or repack fixes) changed: making a new tree"
	old=$tree.old.$$
	mv "$tree" "$old"
	create
	rm -rf "$old"
	apply_series
	exit 0
fi

echo "tree: resetting $tree to 'upstream' and applying the series again"
git -C "$tree" checkout -q main 2>/dev/null || true
git -C "$tree" reset -q --hard upstream
apply_series
