# Shell helpers of the nvme-dataplane guest's jobs, installed as /lib/nvdp.sh;
# /init sources it before it runs a job.  Lines for the host start "NVDP ".

# nvdp_wait_disk DEV: wait up to 10 s for /dev/DEV; a job cannot go on
# without it.
nvdp_wait_disk() {
	local n=0
	while [ ! -b "/dev/$1" ] && [ $n -lt 100 ]; do
		sleep 0.1
		n=$((n + 1))
	done
	[ -b "/dev/$1" ] || { echo "NVDP error no /dev/$1"; exit 1; }
}

# nvdp_mark ACK WORDS...: print "NVDP mark WORDS...", then wait for the
# host's "ack ACK" on the console (the host samples or acts on the mark
# first).  Returns 1, after an "NVDP error" line, when no ack comes in
# 120 s.
nvdp_mark() {
	local ack=$1 a b
	shift
	echo "NVDP mark $*"
	while read -t 120 -r a b; do
		[ "$a $b" = "ack $ack" ] && return 0
	done
	echo "NVDP error no ack for $ack"
	return 1
}

# nvdp_fio_verify NAME DEV FIO-ARGS...: random writes to /dev/DEV that fio
# verifies (crc32c, fatal), or only the verify with --verify_only=1;
# prints "NVDP fio NAME rc=RC bad=N" (N: lines of fio's output that report
# a verify failure), and fio's last lines when it failed.  Busybox sh has
# local variables, so a job's own $dev or $name stay as they were.
nvdp_fio_verify() {
	local name=$1 dev=$2 rc bad
	shift 2
	fio --name="$name" --filename="/dev/$dev" --ioengine=libaio --direct=1 \
		--rw=randwrite --verify=crc32c --verify_fatal=1 --eta=never \
		"$@" > "/tmp/$name.out" 2>&1
	rc=$?
	bad=$(grep -c -i -E 'verify.*fail|bad magic|mismatch|bad header' \
		"/tmp/$name.out")
	echo "NVDP fio $name rc=$rc bad=$bad"
	[ $rc -eq 0 ] || sed 's/^/NVDP-out /' "/tmp/$name.out" | tail -n 20
	return $rc
}
