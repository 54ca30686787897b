# make check's counting of TAP streams; sourced by scripts/check.sh and
# tests/tooling.sh.  A stream passes only if it says how many cases it
# plans (its "1..N" line), every planned case reported, none failed, and
# the script that wrote it exited with status 0: a script that dies half
# way, or a step that times out, fails, naming the step.

# The reasons a case may skip for, as README.md's "Skips" lists them: no
# KVM here (or only software KVM), libvirt that cannot run here, a package
# that is missing ("make deps installs ..."), a host without io_uring or
# O_DIRECT in its temporary directory.  A skip for any other reason, or
# for none, fails: a test that did not reach what it guards did not pass.
SKIP_REASONS='KVM|kvm|libvirt|needs root|mount namespace|make deps installs|fdmon_poll_ops not in use|io_uring|O_DIRECT'

pass=0 fail=0 skip=0
failed=()
ok() { pass=$((pass + 1)); echo "ok - $*"; }
notok() { fail=$((fail + 1)); failed+=("$*"); echo "not ok - $*"; }
skipped() { skip=$((skip + 1)); echo "ok - $* # SKIP"; }

# count_tap FILE PREFIX [STATUS]: count the cases of the TAP stream in
# FILE (PREFIX names them); STATUS is the exit status of the script that
# wrote it, when there is one (124: timeout(1) stopped it)
count_tap() {
	local file=$1 prefix=$2 status=${3:-0} plan= seen=0 line i
	if [ ! -f "$file" ]; then
		notok "$prefix: wrote no TAP ($file)"
		return
	fi
	while IFS= read -r line; do
		case $line in
		1..*) plan=${line#1..}; plan=${plan%% *} ;;
		"not ok "*) seen=$((seen + 1)); notok "$prefix: ${line#not ok }" ;;
		"Bail out!"*) notok "$prefix: $line" ;;
		"ok "*"# SKIP"*)
			seen=$((seen + 1))
			if [[ ${line#*# SKIP} =~ $SKIP_REASONS ]]; then
				skipped "$prefix: ${line#ok }"
			else
				notok "$prefix: ${line#ok } (not a reason a test may skip for: see README.md, Skips)"
			fi ;;
		"ok "*) seen=$((seen + 1)); pass=$((pass + 1)) ;;
		esac
	done <"$file"
	if [ -z "$plan" ]; then
		notok "$prefix: no plan line: the script ended before it said how many tests it ran (see $file)"
		plan=$seen
	elif [ "$seen" -lt "$plan" ]; then
		for ((i = seen; i < plan; i++)); do
			notok "$prefix: test $((i + 1)) of $plan did not report (crash or hang: see $file)"
		done
	elif [ "$seen" -gt "$plan" ]; then
		notok "$prefix: $seen tests reported, $plan planned (see $file)"
	fi
	[ "$plan" -gt 0 ] || notok "$prefix: ran no test (see $file)"
	case $status in
	0) ;;
	124) notok "$prefix: timed out (see $file)" ;;
	*) notok "$prefix: exited with status $status (see $file)" ;;
	esac
	echo "# $prefix: $seen of $plan reported"
}
