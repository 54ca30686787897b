#!/usr/bin/env bash
# Print the Debian mirror the host's apt sources use (the first URI that
# ends in /debian), or DEBIAN_MIRROR if set; nothing, and status 1, if
# there is none.  The project's scripts take packages from where the host
# does, and name no mirror of their own.
if [ -n "${DEBIAN_MIRROR:-}" ]; then
	echo "$DEBIAN_MIRROR"
	exit 0
fi
m=$({ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
	/etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
	sed -n -e 's|^URIs: *\([^ ]*/debian\)/*$|\1|p' \
		-e 's|^deb  *\(\[[^]]*\] *\)\{0,1\}\([^ ]*/debian\)/* .*|\2|p' |
	sed -n 1p)
[ -n "$m" ] || exit 1
echo "$m"
