#!/bin/busybox sh
# /init of the nvme-dataplane guest: set up, run the job the host handed in
# through fw_cfg (opt/nvdp/job), print results on the console, power off.
# Lines for the host start with "NVDP ".
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run

echo "NVDP init $(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)"
for m in qemu_fw_cfg nvme virtio_pci virtio_blk; do
	modprobe "$m" || echo "NVDP error modprobe $m"
done

job=/sys/firmware/qemu_fw_cfg/by_name/opt/nvdp/job/raw
if [ -r "$job" ]; then
	# the job's shell has the helpers of /lib/nvdp.sh
	{ echo ". /lib/nvdp.sh"; cat "$job"; } > /tmp/job.sh
	echo "NVDP job-start $(cut -d' ' -f1 /proc/uptime)"
	sh /tmp/job.sh
	echo "NVDP job-end rc=$? $(cut -d' ' -f1 /proc/uptime)"
else
	echo "NVDP error no job (fw_cfg opt/nvdp/job)"
fi
sync
echo "NVDP poweroff"
poweroff -f
