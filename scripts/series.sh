# The patch queue's layout, for tree.sh, export.sh and check.sh (sourced).
#
# patches/series lists, in order, either topic series directories
# ("05-nvme-fixes/") or single patch files ("0001-foo.patch").  A series
# directory holds its cover letter, 0000-cover-letter.patch, and its
# patches, 0001-*.patch onwards, applied in the order of their names.
# In the QEMU tree each series ends at a branch series/<directory>.

# series_entries PATCHES: the entries of PATCHES/series, comments dropped
series_entries() {
	[ -f "$1/series" ] || return 0
	sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' "$1/series"
}

# series_is_dir ENTRY: whether an entry of patches/series is a directory
series_is_dir() {
	case $1 in */) return 0 ;; *.patch) return 1 ;; esac
	return 0
}

# series_patches PATCHES: every patch to apply, as paths relative to
# PATCHES, in order, one per line; cover letters are not patches to apply
series_patches() {
	local e d f
	series_entries "$1" | while read -r e; do
		if series_is_dir "$e"; then
			d=${e%/}
			[ -d "$1/$d" ] || { echo "patches/series names $e, which is not a directory" >&2; echo "/missing/$d"; continue; }
			for f in "$1/$d"/[0-9][0-9][0-9][0-9]-*.patch; do
				[ -e "$f" ] || continue
				case ${f##*/} in 0000-cover-letter.patch) continue ;; esac
				echo "$d/${f##*/}"
			done
		else
			echo "$e"
		fi
	done
}

# series_dirs PATCHES: the series directories, in order (none for a flat
# queue)
series_dirs() {
	local e
	series_entries "$1" | while read -r e; do
		series_is_dir "$e" && echo "${e%/}"
	done
	return 0
}

# series_counts PATCHES: "DIR COUNT" for each series directory, in order
series_counts() {
	local d
	series_dirs "$1" | while read -r d; do
		echo "$d $(series_patches "$1" | grep -c "^$d/")"
	done
}

# check_tree_apply TREE PATCHES LOG: make check's scratch tree (check.sh,
# check_guest.sh, check_series.sh) from 'upstream' again, with the series
# of PATCHES applied (tree.sh --reapply, its output in LOG); tree.sh's
# status
check_tree_apply() {
	local tree=$1 patches=$2 log=$3
	if git -C "$tree" rev-parse -q --verify upstream >/dev/null 2>&1; then
		git -C "$tree" checkout -q -f main 2>/dev/null
		git -C "$tree" reset -q --hard upstream
	fi
	NVME_DP_PATCHES=$patches NVME_DP_TREE=$tree "$top/scripts/tree.sh" --reapply >"$log" 2>&1
}

# guest_build TREE BDIR LOGS: the series in TREE built with TCG (the
# default configuration) in BDIR, and the Linux guest image; what fails
# is a failed case (tap.sh's notok), its log's tail printed.  Status 0
# when both are there.
guest_build() {
	local tree=$1 bdir=$2 logs=$3
	if ! "$top/scripts/build.sh" --line-tables --tree "$tree" --builddir "$bdir" \
		qemu-system-x86_64 >"$logs/guest-build.log" 2>&1; then
		tail -n 30 "$logs/guest-build.log" | sed 's/^/#   /'
		notok "build of the full series with TCG (see $logs/guest-build.log)"
		return 1
	fi
	if ! "$top/scripts/guest_image.py" >"$logs/guest-image.log" 2>&1; then
		tail -n 20 "$logs/guest-image.log" | sed 's/^/#   /'
		notok "guest image (see $logs/guest-image.log)"
		return 1
	fi
}
