# The devices of make check's builds (build.sh --qtest-config): what the
# NVMe qtests, the soak and blk-bench start, and nothing else, so that
# building every patch compiles about a third less.  build.sh copies it
# to the tree's configs/devices/x86_64-softmmu/nvdp-qtest.mak.
CONFIG_I440FX=y
CONFIG_Q35=y
CONFIG_NVME_PCI=y
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_BLK=y
CONFIG_VTD=y
CONFIG_PCIE_PORT=y
# The pc machine's own devices that a default build has: the migration
# tests move a VM between this build and QEMU 11.1 as Debian builds it,
# whose pc-i440fx machines have them
CONFIG_FDC_ISA=y
CONFIG_HPET=y
CONFIG_VMPORT=y
CONFIG_VMMOUSE=y
# What needs them does not select them (NVMe's SPDM responder; the ACPI
# CEDT table of ACPI_X86 links against CXL's host code)
CONFIG_SPDM_SOCKET=y
CONFIG_PXB=y
CONFIG_CXL=y
CONFIG_CXL_MEM_DEVICE=y
