#!/usr/bin/python3
"""The libvirt example of docs/system/devices/nvme.rst ("Performance
Tuning") starts QEMU as it says.

Takes the <qemu:arg value='...'/> of the rst's first xml code block that
has them, and the iothread objects libvirt makes of its <iothreadids>
(-object iothread,id=iothreadN,poll-max-ns=MAX for <iothread id='N'>
with <poll max='MAX'/>), puts a scratch image where the example names its
file, starts QEMU with them (qtest accelerator, no guest, as a QEMUMachine
of the pinned tree's python/qemu) and asks it over QMP for the device,
its iothread and the iothread's poll-max-ns.  TAP on stdout.
(scripts/libvirt_check.py runs the same block under a libvirt daemon.)

    docs_examples.py [PATH/TO/nvme.rst]   (NVME_DP_QEMU: the emulator)
"""

import os
import re
import shutil
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import case, finish  # noqa: E402
sys.path.insert(0, os.path.join(TOP, "scripts"))
import nvdp_vm  # noqa: E402
import libvirt_check  # noqa: E402

QEMU = os.environ.get("NVME_DP_QEMU", os.path.join(
    TOP, "build", "qemu-build", "qemu-system-x86_64"))
RST = os.path.join(TOP, "build", "qemu", "docs", "system", "devices",
                   "nvme.rst")


def xml_args(text):
    """The QEMU arguments of the first xml code block with qemu:arg
    values: libvirt's iothread objects of its <iothreadids>, then the
    qemu:arg values."""
    for dom in libvirt_check.xml_blocks(text):
        args = [a.get("value") for a in dom.iter(libvirt_check.Q + "arg")]
        if args:
            return iothread_objects(dom) + args
    return []


def iothread_objects(dom):
    """-object iothread,... for each <iothread> of <iothreadids>, named
    and polling as libvirt makes them."""
    args = []
    for iot in dom.findall("iothreadids/iothread"):
        obj = "iothread,id=iothread%s" % iot.get("id")
        poll = iot.find("poll")
        if poll is not None and poll.get("max") is not None:
            obj += ",poll-max-ns=%s" % poll.get("max")
        args += ["-object", obj]
    return args


def qmp(vm, cmd, **args):
    """{"return": ...} or {"error": ...} of QMP @cmd on @vm."""
    try:
        return {"return": nvdp_vm.qmp_cmd(vm, cmd, **args)}
    except RuntimeError as e:
        return {"error": str(e)}


def main():
    rst = sys.argv[1] if len(sys.argv) > 1 else RST
    args = xml_args(open(rst).read())
    case(len(args) >= 2 and len(args) % 2 == 0,
         "docs: nvme.rst's libvirt example passes options with values",
         "found %s" % args)
    dev = next((a for a in args if a.startswith("nvme,")), "")
    iot = next((a for a in args if a.startswith("iothread,")), "")
    files = [m for a in args for m in re.findall(r"filename=([^,]+)", a)]
    case(dev and iot and len(files) == 1,
         "docs: the example has an nvme device, an iothread and one file",
         "device %r, iothread %r, files %r" % (dev, iot, files))
    if not (dev and iot and len(files) == 1):
        return finish()

    tmp = tempfile.mkdtemp(prefix="nvdp-docs-")
    img = os.path.join(tmp, "data.img")
    with open(img, "wb") as f:
        f.truncate(64 * 1024 * 1024)
    args = [a.replace(files[0], img) for a in args]
    if "cache.direct=on" in " ".join(args):
        try:
            os.close(os.open(img, os.O_RDONLY | os.O_DIRECT))
        except OSError:
            # tmpfs: the file options are the example's, not what is tested
            args = [a.replace("aio=native,cache.direct=on", "")
                    .replace(",,", ",").rstrip(",") for a in args]
    dev_id = re.search(r"(?:^|,)id=([^,]+)", dev).group(1)
    iot_id = re.search(r"(?:^|,)id=([^,]+)", iot).group(1)
    poll = re.search(r"poll-max-ns=(\d+)", iot)

    vm = nvdp_vm.machine(["-machine", "pc", "-accel", "qtest",
                          "-nodefaults"] + args, qemu=QEMU, tmp=tmp)
    try:
        try:
            vm.launch()
            started = "return" in qmp(vm, "query-status")
            why = ""
        except Exception as e:           # VMLaunchFailure: QEMU refused
            started, why = False, str(e)
        case(started, "docs: QEMU starts with the example's arguments", why)
        if started:
            path = "/machine/peripheral/%s" % dev_id
            r = qmp(vm, "qom-get", path=path, property="iothread")
            case(r.get("return") == "/objects/%s" % iot_id,
                 "docs: the example's nvme device runs in its iothread",
                 str(r))
            for prop in ("ioeventfd", "irq-eventfd"):
                if "%s=on" % prop in dev:
                    r = qmp(vm, "qom-get", path=path, property=prop)
                    case(r.get("return") is True,
                         "docs: the example's device has %s=on" % prop,
                         str(r))
            if poll:
                r = qmp(vm, "qom-get", path="/objects/%s" % iot_id,
                        property="poll-max-ns")
                case(r.get("return") == int(poll.group(1)),
                     "docs: the example's iothread polls for %s ns" %
                     poll.group(1), str(r))
    finally:
        try:
            vm.shutdown()
        except Exception:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
