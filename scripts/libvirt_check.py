#!/usr/bin/python3
"""make libvirt-check: a real libvirt daemon drives the series' QEMU.

A private libvirtd (Debian ships no modular virtqemud) runs as root in a
mount namespace of its own (unshare -m), where a temporary directory is
mounted over /etc/libvirt, /run, /var/lib/libvirt, /var/cache/libvirt and
/var/log/libvirt: its config (a qemu.conf for root without host set-up:
no security driver, no cgroups, no namespaces, no virtlogd), state,
sockets and logs stay there, the host's are not touched, and its socket
(unix_sock_dir) is in that directory too, for virsh
(qemu+unix:///system?socket=...).  The embedded driver (qemu:///embed)
would need no namespace but is no daemon: each virsh would be its own
driver.

The domain boots the project's guest (direct kernel boot, TCG) with its
<emulator> the series' qemu-system-x86_64 (NVME_DP_QEMU) and the NVMe
controller of nvme.rst's libvirt section (NVME_DP_RST): the xml code
blocks' <iothreads>, <iothreadids> and <qemu:commandline> are merged into
the test's domain, only the image path changed.  The guest's job (fw_cfg
opt/nvdp/job, as for tests/guest_e2e.py) runs fio verify passes on the
NVMe disk while the host suspends and resumes, changes the iothread's
poll-max-ns (virsh iothreadset, checked with QMP query-iothreads while
the disk's request counters keep moving), saves and restores, then
managed-saves and starts the VM; each region is verified again after,
and the guest's kernel log must have no nvme timeout.  Last, destroy and
undefine leave no QEMU, socket or state file, and the daemon stops.

The native NVMe disk (<disk> with bus='nvme', <qemu:override>) of the
rst's other xml block runs when the daemon is libvirt 11.5 or later (a
skip otherwise).  TAP on stdout; figures of save and restore as '# '
comments.

    libvirt_check.py                 the check
    libvirt_check.py --xml FORM      print the domain of FORM (commandline
                                     or native) built from the rst

Environment: NVME_DP_QEMU, NVME_DP_GUEST, NVME_DP_RST (the rst,
build/qemu's docs/system/devices/nvme.rst), LIBVIRT_LOGS (where the
guest's console, libvirtd's and QEMU's logs go: build/libvirt-logs).
"""

import copy
import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "tests"))
sys.path.insert(0, os.path.join(TOP, "scripts"))
from tap import case, finish  # noqa: E402
import nvdp_vm  # noqa: E402

QEMU = os.path.abspath(nvdp_vm.QEMU)
GUEST = os.path.abspath(nvdp_vm.GUEST)
RST = os.environ.get("NVME_DP_RST", os.path.join(
    TOP, "build", "qemu", "docs", "system", "devices", "nvme.rst"))
LOGS = os.environ.get("LIBVIRT_LOGS", os.path.join(TOP, "build",
                                                   "libvirt-logs"))
QNS = "http://libvirt.org/schemas/domain/qemu/1.0"
Q = "{%s}" % QNS
ET.register_namespace("qemu", QNS)
DOM = "nvdp-libvirt"
IMG_SIZE = 64 << 20
NATIVE_SINCE = (11, 5, 0)
# the directories the daemon gets in its mount namespace
MOUNTS = [("etc", "/etc/libvirt"), ("run", "/run"),
          ("lib", "/var/lib/libvirt"), ("cache", "/var/cache/libvirt"),
          ("log", "/var/log/libvirt")]

# The guest's job: a verify, then fio verify passes on a region of their
# own while the host acts on each "NVDP mark NAME" (it answers "ack NAME"
# once done), each region verified again after, the kernel log's nvme
# lines counted, and a last mark for the host's destroy.
JOB = r"""
set -u
dev=nvme0n1
F="--bs=4k --iodepth=8 --size=4M"
nvdp_wait_disk $dev
nvdp_fio_verify base $dev $F --offset=0 --randseed=11 --do_verify=1
# busy NAME OFFSET SEED: verify passes until the host has done NAME
busy() {
	name=$1 off=$2 seed=$3
	rm -f /tmp/stop
	(
		i=0
		while [ ! -e /tmp/stop ]; do
			i=$((i + 1))
			nvdp_fio_verify $name-$i $dev $F --offset=$off \
				--randseed=$seed --do_verify=1 || break
		done
		echo "NVDP passes $name $i"
	) &
	pid=$!
	sleep 1
	nvdp_mark $name $name
	touch /tmp/stop
	wait $pid
	nvdp_fio_verify $name-again $dev $F --offset=$off --randseed=$seed \
		--verify_only=1
}
busy suspend 8M 21
busy iothread 16M 31
busy save 24M 41
busy managedsave 32M 51
nvdp_fio_verify base-again $dev $F --offset=0 --randseed=11 --verify_only=1
n=$(dmesg | grep nvme | grep -c -i -E 'timeout|abort|reset')
echo "NVDP nvme-timeouts $n"
dmesg | grep -i nvme | sed 's/^/NVDP-dmesg /'
nvdp_mark end end
"""

# The native disk's job: one verify
NATIVE_JOB = r"""
nvdp_wait_disk nvme0n1
nvdp_fio_verify native nvme0n1 --bs=4k --iodepth=8 --size=4M --offset=0 \
	--randseed=61 --do_verify=1
nvdp_mark end end
"""


# ---------------------------------------------------------------- the rst

def xml_blocks(text):
    """The xml code blocks of an rst, each as a <domain> Element (their
    "..." lines dropped)."""
    out = []
    for block in re.split(r"\n\.\. code-block:: ", text)[1:]:
        if not block.startswith("xml"):
            continue
        body = []
        for line in block.split("\n")[1:]:
            if line.strip() and not line.startswith((" ", "\t")):
                break
            if line.strip() != "...":
                body.append(line)
        out.append(ET.fromstring("\n".join(body).strip()))
    return out


def doc_forms(rst):
    """{"commandline": <domain>, "native": <domain>} of the rst's xml
    blocks: the one with <qemu:commandline>, the one with a bus='nvme'
    disk (a form the rst lacks is missing)."""
    forms = {}
    for dom in xml_blocks(open(rst).read()):
        if dom.find(Q + "commandline") is not None:
            forms.setdefault("commandline", dom)
        elif dom.find("devices/disk/target[@bus='nvme']") is not None:
            forms.setdefault("native", dom)
    return forms


def doc_image(dom):
    """The image path the rst's domain names."""
    for arg in dom.iter(Q + "arg"):
        m = re.search(r"filename=([^,]+)", arg.get("value"))
        if m:
            return m.group(1)
    src = dom.find("devices/disk/source")
    return src.get("file") if src is not None else None


def nvme_device(dom):
    """(controller id, its -device options or None) of the rst's domain."""
    for arg in dom.iter(Q + "arg"):
        v = arg.get("value")
        if v.startswith("nvme,"):
            return re.search(r"(?:^|,)id=([^,]+)", v).group(1), v
    for dev in dom.iter(Q + "device"):
        return dev.get("alias"), None
    return None, None


def with_image(dom, img, buffered=False):
    """A copy of @dom naming @img where it named its image; @buffered:
    without its O_DIRECT options (a file system without O_DIRECT)."""
    dom = copy.deepcopy(dom)
    old = doc_image(dom)
    for arg in dom.iter(Q + "arg"):
        arg.set("value", arg.get("value").replace(old, img))
    for src in dom.iterfind("devices/disk/source"):
        src.set("file", img)
    if buffered:
        # tmpfs: the file options are the doc's, not what is tested
        for arg in dom.iter(Q + "arg"):
            arg.set("value", arg.get("value").replace(
                ",aio=native,cache.direct=on", ""))
        for drv in dom.iterfind("devices/disk/driver"):
            drv.attrib.pop("io", None)
            drv.attrib.pop("cache", None)
    return dom


def direct_io_works(path):
    """Can files under @path be opened with O_DIRECT?"""
    probe = os.path.join(path, ".odirect")
    try:
        open(probe, "w").close()
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


# ------------------------------------------------------------- the domain

def sub(parent, tag, text=None, **attrs):
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def base_domain(name, job, console):
    """The test's own domain: the guest by direct kernel boot under TCG,
    its job in fw_cfg, its serial console connecting to @console."""
    dom = ET.Element("domain", type="qemu")
    sub(dom, "name", name)
    sub(dom, "memory", "512", unit="MiB")
    sub(dom, "vcpu", "1")
    os_ = sub(dom, "os")
    sub(os_, "type", "hvm", arch="x86_64", machine="pc")
    sub(os_, "kernel", os.path.join(GUEST, "vmlinuz"))
    sub(os_, "initrd", os.path.join(GUEST, "initramfs.gz"))
    sub(os_, "cmdline", nvdp_vm.APPEND)
    sysinfo = sub(dom, "sysinfo", type="fwcfg")
    sub(sysinfo, "entry", name="opt/nvdp/job", file=job)
    sub(sub(dom, "features"), "acpi")
    sub(dom, "cpu", mode="maximum")
    sub(dom, "clock", offset="utc")
    for ev in ("on_poweroff", "on_reboot", "on_crash"):
        sub(dom, ev, "destroy")
    devs = sub(dom, "devices")
    sub(devs, "emulator", QEMU)
    serial = sub(devs, "serial", type="unix")
    sub(serial, "source", mode="connect", path=console)
    sub(serial, "target", port="0")
    sub(devs, "controller", type="usb", model="none")
    sub(devs, "memballoon", model="none")
    return dom


def merge(dom, doc):
    """Put the rst domain @doc's iothreads, devices and QEMU elements into
    @dom (their order as the schema wants it)."""
    devs = dom.find("devices")
    at = list(dom).index(dom.find("os"))
    for tag in ("iothreadids", "iothreads"):
        el = doc.find(tag)
        if el is not None:
            dom.insert(at, copy.deepcopy(el))
    for el in doc.findall("devices/*"):
        devs.append(copy.deepcopy(el))
    for tag in ("commandline", "override"):
        el = doc.find(Q + tag)
        if el is not None:
            dom.append(copy.deepcopy(el))
    return dom


def domain_xml(form, img, job, console, name=DOM, buffered=None):
    """The domain of @form ("commandline", "native") as XML text; None if
    the rst has no such form.  @buffered (None: where @img's file system
    has no O_DIRECT) drops the rst's O_DIRECT options."""
    doc = doc_forms(RST).get(form)
    if doc is None:
        return None
    if buffered is None:
        buffered = not direct_io_works(os.path.dirname(img))
    dom = merge(base_domain(name, job, console),
                with_image(doc, img, buffered))
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode")


# ------------------------------------------------------------- the daemon

class Daemon:
    """A libvirtd of our own, as root, in its own mount namespace, all its
    files under @tmp."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.sock = os.path.join(tmp, "sock", "libvirt-sock")
        self.uri = "qemu+unix:///system?socket=" + self.sock
        self.log = os.path.join(tmp, "libvirtd.log")
        self.proc = None

    def path(self, sub_, *parts):
        """Where the daemon's @sub_ directory ("run", "lib", ...) is."""
        return os.path.join(self.tmp, sub_, *parts)

    def configure(self):
        for d, _ in MOUNTS:
            os.makedirs(self.path(d), exist_ok=True)
        os.makedirs(self.path("sock"), exist_ok=True)
        with open(os.path.join(self.tmp, "libvirtd.conf"), "w") as f:
            f.write('unix_sock_dir = "%s"\n' % self.path("sock"))
            f.write('unix_sock_rw_perms = "0700"\n')
            f.write('unix_sock_ro_perms = "0700"\n')
            f.write('auth_unix_rw = "none"\nauth_unix_ro = "none"\n')
            f.write('log_outputs = "3:file:%s"\n' % self.log)
        with open(self.path("etc", "qemu.conf"), "w") as f:
            f.write('user = "root"\ngroup = "root"\n'
                    'dynamic_ownership = 0\nremember_owner = 0\n'
                    'security_driver = "none"\n'
                    'cgroup_controllers = [ ]\nnamespaces = [ ]\n'
                    'stdio_handler = "file"\nlock_manager = "nop"\n')

    def start(self, timeout=60):
        """Start libvirtd; RuntimeError if it does not answer."""
        self.configure()
        mounts = " && ".join("mount --bind %s %s" % (self.path(d), where)
                             for d, where in MOUNTS)
        cmd = "%s && exec libvirtd -f %s -p %s" % (
            mounts, os.path.join(self.tmp, "libvirtd.conf"),
            os.path.join(self.tmp, "libvirtd.pid"))
        out = open(os.path.join(self.tmp, "libvirtd.out"), "w")
        # unshare and sh exec: the process is libvirtd itself
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", cmd],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("libvirtd exited (%s): %s" % (
                    self.proc.returncode, self.tail()))
            if os.path.exists(self.sock) and \
                    self.virsh("version", "--daemon", timeout=20)[0] == 0:
                return
            time.sleep(0.3)
        raise RuntimeError("libvirtd did not answer in %d s: %s" %
                           (timeout, self.tail()))

    def tail(self):
        """The end of the daemon's output and log."""
        text = ""
        for f in (os.path.join(self.tmp, "libvirtd.out"), self.log):
            if os.path.exists(f):
                text += open(f).read()
        return text[-600:]

    def virsh(self, *args, timeout=120):
        """(status, stdout, stderr) of virsh @args on our daemon."""
        try:
            p = subprocess.run(["virsh", "-q", "-c", self.uri] + list(args),
                               text=True, capture_output=True,
                               stdin=subprocess.DEVNULL, timeout=timeout)
            return p.returncode, p.stdout.strip(), p.stderr.strip()
        except subprocess.TimeoutExpired:
            return -1, "", "virsh %s: no answer in %d s" % (
                " ".join(args), timeout)

    def version(self):
        """The daemon's libvirt version as a tuple, or None."""
        rc, out, _ = self.virsh("version", "--daemon")
        m = re.search(r"Running against daemon: (\d+)\.(\d+)\.(\d+)", out)
        return tuple(int(x) for x in m.groups()) if rc == 0 and m else None

    def stop(self, timeout=30):
        """SIGTERM to libvirtd; its exit status, None if it would not go
        (then SIGKILL)."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None


# ------------------------------------------------------------ the console

class Console:
    """The guest's serial console: a unix socket the domain's QEMU
    connects to (every QEMU of it: start, restore, managed start)."""

    def __init__(self, path, log):
        self.path = path
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(4)
        self.log = open(log, "w")
        self.conn = None
        self.buf = b""
        self.fio = {}          # NAME -> {"rc": ..., "bad": ...}
        self.seen = {}         # other "NVDP WORD" lines: WORD -> rest

    def accept(self, timeout=30):
        """Take the connection of the QEMU that just started."""
        if self.conn:
            self.conn.close()
        self.srv.settimeout(timeout)
        self.conn, _ = self.srv.accept()
        self.conn.setblocking(True)
        self.buf = b""

    def note(self, line):
        """Record a line of the guest's: fio results and the rest."""
        i = line.find("NVDP ")
        line = line[i:] if i > 0 else line       # after the ack's echo
        if line.startswith("NVDP fio "):
            parts = line.split()
            self.fio[parts[2]] = dict(p.split("=", 1) for p in parts[3:])
        elif line.startswith("NVDP ") and len(line.split()) > 1:
            word = line.split()[1]
            self.seen.setdefault(word, []).append(line.split(None, 2)[2:])
        return line

    def until(self, mark, timeout):
        """Read the console until "NVDP mark @mark"; RuntimeError when the
        guest reports an error, QEMU goes or @timeout passes."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = self.read_line(end - time.monotonic())
            if r is None:
                raise RuntimeError("console closed before mark %s" % mark)
            line = self.note(r)
            if line == "NVDP mark " + mark:
                return
            if line.startswith("NVDP error"):
                raise RuntimeError(line)
        raise RuntimeError("no mark %s in %d s" % (mark, timeout))

    def read_line(self, timeout):
        """The next line, None at EOF; TimeoutError past @timeout."""
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no console line in %d s" % timeout)
            if not select.select([self.conn], [], [], min(left, 1))[0]:
                continue
            try:
                chunk = self.conn.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        text = line.decode("utf-8", "replace").rstrip("\r")
        self.log.write(text + "\n")
        self.log.flush()
        return text

    def drain(self, timeout=30):
        """What the QEMU that went away printed last."""
        try:
            while True:
                r = self.read_line(timeout)
                if r is None:
                    return
                self.note(r)
        except (TimeoutError, OSError):
            return

    def ack(self, name):
        self.conn.sendall(("ack %s\n" % name).encode())

    def close(self):
        for s in (self.conn, self.srv):
            if s:
                s.close()
        self.log.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


# ------------------------------------------------------------- the checks

class Run:
    """One run of the check: the daemon, the domain, its console."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.d = Daemon(tmp)
        self.con = None
        self.img = os.path.join(tmp, "data.img")
        self.save = os.path.join(tmp, "saved.img")
        doc = doc_forms(RST).get("commandline")
        self.dev_id = nvme_device(doc)[0]
        # the rst's polling of libvirt's iothread1 (QEMU's default if none)
        poll = doc.find("iothreadids/iothread[@id='1']/poll")
        self.poll = int(poll.get("max", 32768)) if poll is not None \
            else 32768

    def virsh_ok(self, *args, timeout=120):
        """virsh @args; RuntimeError with its message if it fails."""
        rc, out, err = self.d.virsh(*args, timeout=timeout)
        if rc != 0:
            raise RuntimeError("virsh %s: %s" % (" ".join(args), "; ".join(
                (err or out).splitlines())))
        return out

    def qmp(self, cmd, dom=DOM, **args):
        """QMP @cmd through virsh qemu-monitor-command: its return."""
        q = {"execute": cmd}
        if args:
            q["arguments"] = args
        r = json.loads(self.virsh_ok("qemu-monitor-command", dom,
                                     json.dumps(q)))
        if "return" not in r:
            raise RuntimeError("QMP %s: %s" % (cmd, r))
        return r["return"]

    def state(self, dom=DOM):
        return self.d.virsh("domstate", dom)[1]

    def io_ops(self):
        """Requests the NVMe disk completed so far (query-blockstats)."""
        total, found = 0, False
        for s in self.qmp("query-blockstats"):
            if self.dev_id in (s.get("qdev") or ""):
                st = s["stats"]
                total += st["rd_operations"] + st["wr_operations"]
                found = True
        if not found:
            raise RuntimeError("query-blockstats has no disk of %s" %
                               self.dev_id)
        return total

    def poll_max_ns(self):
        """poll-max-ns of libvirt's iothread1 (query-iothreads)."""
        for t in self.qmp("query-iothreads"):
            if t["id"] == "iothread1":
                return t["poll-max-ns"]
        raise RuntimeError("no iothread1 in query-iothreads")

    def domain_files(self):
        """What libvirt keeps of a domain, its logs apart: state, save and
        config files, and any socket under the daemon's directories."""
        left = []
        for d, _ in MOUNTS:
            for root, _dirs, files in os.walk(self.d.path(d)):
                for f in files:
                    rel = os.path.relpath(os.path.join(root, f), self.tmp)
                    if (DOM in rel and not rel.startswith("log/")) or \
                            f.endswith(".save") or \
                            is_socket(os.path.join(root, f)):
                        left.append(rel)
        return sorted(left)


def is_socket(path):
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def fio_ok(con, prefix):
    """(all fio jobs named @prefix-* passed, how many, the failures)."""
    jobs = {k: v for k, v in con.fio.items() if k.startswith(prefix + "-")}
    bad = {k: v for k, v in jobs.items()
           if v.get("rc") != "0" or v.get("bad") != "0"}
    return bool(jobs) and not bad, len(jobs), bad


def busy_verified(r, name):
    """The case of a busy NAME step: every pass verified, and the region
    again once the host was done."""
    ok, n, bad = fio_ok(r.con, name)
    again = r.con.fio.get(name + "-again", {})
    case(ok and again.get("rc") == "0" and again.get("bad") == "0",
         "libvirt: %d fio verify passes across %s, then the region "
         "verified again: 0 mismatches" % (n - 1 if again else n, name),
         "failed: %s, again: %s" % (bad, again))


def moving(r, secs=3):
    """Did the disk complete requests in the next @secs seconds?"""
    a = r.io_ops()
    time.sleep(secs)
    b = r.io_ops()
    return b > a, b - a


def step_define_start(r):
    job = os.path.join(r.tmp, "job.sh")
    with open(job, "w") as f:
        f.write(JOB)
    with open(r.img, "wb") as f:
        f.truncate(IMG_SIZE)
    r.con = Console(os.path.join(r.tmp, "console.sock"),
                    os.path.join(LOGS, "guest-console.log"))
    xmlf = os.path.join(r.tmp, "domain.xml")
    with open(xmlf, "w") as f:
        f.write(domain_xml("commandline", r.img, job, r.con.path))
    shutil.copy(xmlf, os.path.join(LOGS, "domain.xml"))
    r.virsh_ok("define", xmlf)
    r.virsh_ok("start", DOM, timeout=180)
    r.con.accept()
    case(r.state() == "running", "libvirt: virsh define and start a domain "
         "with the series' QEMU and nvme.rst's controller", r.state())


def step_device(r):
    path = "/machine/peripheral/%s" % r.dev_id
    got = {p: r.qmp("qom-get", path=path, property=p)
           for p in ("iothread", "ioeventfd", "irq-eventfd")}
    poll = r.poll_max_ns()
    case(got == {"iothread": "/objects/iothread1", "ioeventfd": True,
                 "irq-eventfd": True} and poll == r.poll,
         "libvirt: the controller runs in libvirt's iothread1 (poll-max-ns "
         "%s) with ioeventfd and irq-eventfd on" % poll,
         "%s, poll-max-ns %s, the rst's %s" % (got, poll, r.poll))


def step_base(r):
    r.con.until("suspend", 300)
    res = r.con.fio.get("base", {})
    case(res.get("rc") == "0" and res.get("bad") == "0",
         "libvirt: fio verify in the guest on the nvme disk, 0 mismatches",
         str(res))


def step_suspend(r):
    time.sleep(1)
    r.virsh_ok("suspend", DOM)
    paused = r.state()
    a = r.io_ops()
    time.sleep(2)
    still = r.io_ops() == a
    r.virsh_ok("resume", DOM)
    running = r.state()
    after, n = moving(r)
    r.con.ack("suspend")
    case(paused == "paused" and still and running == "running" and after,
         "libvirt: virsh suspend while fio runs stops the disk's requests, "
         "virsh resume starts them again (%d in 3 s)" % n,
         "state %s, still %s, then %s, moving %s" % (paused, still, running,
                                                     after))
    r.con.until("iothread", 300)
    busy_verified(r, "suspend")


def step_iothread(r):
    seen = []
    for ns in (0, r.poll):
        r.virsh_ok("iothreadset", DOM, "1", "--poll-max-ns", str(ns))
        got = r.poll_max_ns()
        ok, n = moving(r)
        seen.append((ns, got, ok, n))
    r.con.ack("iothread")
    done = ", ".join("%d: %d requests in 3 s" % (ns, n)
                     for ns, _, _, n in seen)
    case(all(ns == got and ok for ns, got, ok, _ in seen),
         "libvirt: virsh iothreadset --poll-max-ns 0 and back to %d "
         "while fio runs: query-iothreads follows, requests go on (%s)" %
         (r.poll, done), str(seen))
    r.con.until("save", 300)
    busy_verified(r, "iothread")


def step_save(r):
    before, _ = moving(r, 1)
    t = time.monotonic()
    r.virsh_ok("save", DOM, r.save, timeout=300)
    save_s = time.monotonic() - t
    size = os.path.getsize(r.save)
    off = r.state()
    r.con.drain()
    t = time.monotonic()
    r.virsh_ok("restore", r.save, timeout=300)
    restore_s = time.monotonic() - t
    r.con.accept()
    running = r.state()
    after, n = moving(r)
    r.con.ack("save")
    print("# virsh save: %.2f s, state file %.1f MiB; virsh restore: %.2f s"
          % (save_s, size / 2**20, restore_s), flush=True)
    case(before and off == "shut off" and running == "running" and after,
         "libvirt: virsh save and restore while fio runs (save %.1f s, "
         "%.0f MiB, restore %.1f s), requests go on after (%d in 3 s)" %
         (save_s, size / 2**20, restore_s, n),
         "moving before %s, after save %s, after restore %s, moving %s" %
         (before, off, running, after))
    r.con.until("managedsave", 300)
    busy_verified(r, "save")
    os.unlink(r.save)


def step_managedsave(r):
    before, _ = moving(r, 1)
    r.virsh_ok("managedsave", DOM, timeout=300)
    off = r.state()
    info = r.virsh_ok("dominfo", DOM)
    has = re.search(r"Managed save:\s+yes", info) is not None
    saved = r.d.path("lib", "qemu", "save", DOM + ".save")
    there = os.path.exists(saved)
    r.con.drain()
    r.virsh_ok("start", DOM, timeout=300)
    r.con.accept()
    gone = not os.path.exists(saved)
    after, n = moving(r)
    r.con.ack("managedsave")
    case(before and off == "shut off" and has and there and gone and after,
         "libvirt: virsh managedsave while fio runs, virsh start resumes "
         "from it and removes the image, requests go on (%d in 3 s)" % n,
         "moving before %s, state %s, managed save %s, image %s then %s, "
         "moving %s" % (before, off, has, there, not gone, after))
    r.con.until("end", 300)
    busy_verified(r, "managedsave")


def step_end(r):
    res = r.con.fio.get("base-again", {})
    case(res.get("rc") == "0" and res.get("bad") == "0",
         "libvirt: the first region verified again at the end, after "
         "everything: 0 mismatches", str(res))
    t = r.con.seen.get("nvme-timeouts", [["?"]])[-1]
    case(t == ["0"], "libvirt: no nvme timeout, abort or reset in the "
         "guest's kernel log (%s)" % t[0],
         "see %s" % os.path.join(LOGS, "guest-console.log"))
    pidf = r.d.path("run", "libvirt", "qemu", DOM + ".pid")
    pid = int(open(pidf).read().strip())
    r.virsh_ok("destroy", DOM)
    r.virsh_ok("undefine", DOM, "--managed-save")
    r.con.close()
    r.con = None
    listed = r.virsh_ok("list", "--all", "--name").split()
    gone = wait_gone(pid, 30)
    left = r.domain_files()
    os.unlink(r.img)
    case(gone and DOM not in listed and not left,
         "libvirt: virsh destroy and undefine leave no QEMU process "
         "(pid %d), domain, socket or state file" % pid,
         "QEMU gone %s, listed %s, left %s" % (gone, listed, left))


def wait_gone(pid, timeout):
    end = time.monotonic() + timeout
    while os.path.exists("/proc/%d" % pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def step_native(r):
    name = ("libvirt: a native NVMe disk (bus='nvme', <qemu:override>) in "
            "iothread1 with ioeventfd and irq-eventfd, fio verify")
    ver = r.d.version()
    if ver is None or ver < NATIVE_SINCE:
        case(True, name, skip="libvirt %s has no native NVMe disks (11.5 "
             "added them)" % ".".join(map(str, ver or ("?",))))
        return
    doc = doc_forms(RST).get("native")
    if doc is None:
        case(False, name, "%s has no xml block with a bus='nvme' disk" % RST)
        return
    dom, alias = DOM + "-native", nvme_device(doc)[0]
    job = os.path.join(r.tmp, "native-job.sh")
    with open(job, "w") as f:
        f.write(NATIVE_JOB)
    img = os.path.join(r.tmp, "native.img")
    with open(img, "wb") as f:
        f.truncate(IMG_SIZE)
    con = Console(os.path.join(r.tmp, "native-console.sock"),
                  os.path.join(LOGS, "guest-native-console.log"))
    try:
        xmlf = os.path.join(r.tmp, "native.xml")
        with open(xmlf, "w") as f:
            f.write(domain_xml("native", img, job, con.path, dom))
        r.virsh_ok("define", xmlf)
        r.virsh_ok("start", dom, timeout=180)
        con.accept()
        con.until("end", 300)
        path = "/machine/peripheral/%s" % alias
        got = {p: r.qmp("qom-get", dom=dom, path=path, property=p)
               for p in ("iothread", "ioeventfd", "irq-eventfd")}
        res = con.fio.get("native", {})
        r.virsh_ok("destroy", dom)
        r.virsh_ok("undefine", dom)
        case(got == {"iothread": "/objects/iothread1", "ioeventfd": True,
                     "irq-eventfd": True} and res.get("rc") == "0" and
             res.get("bad") == "0", name, "%s, fio %s" % (got, res))
    except (RuntimeError, OSError, TimeoutError) as e:
        case(False, name, str(e))
    finally:
        con.close()


STEPS = [
    ("virsh define and start", step_define_start),
    ("the controller in libvirt's iothread", step_device),
    ("fio verify", step_base),
    ("suspend and resume", step_suspend),
    ("iothreadset", step_iothread),
    ("save and restore", step_save),
    ("managedsave and start", step_managedsave),
    ("destroy and undefine", step_end),
]


def cannot_run():
    """Why this machine cannot run the check, or None."""
    if os.geteuid() != 0:
        return "needs root (a private libvirtd as root)"
    for tool in ("libvirtd", "virsh", "unshare"):
        if not shutil.which(tool):
            return "no %s (make deps installs libvirt)" % tool
    probe = subprocess.run(["unshare", "-m", "--propagation", "private",
                            "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "no mount namespace for the daemon here (unshare -m: %s)" % \
            probe.stderr.strip()
    if not os.access(QEMU, os.X_OK):
        return "no QEMU at %s (make build)" % QEMU
    for f in ("vmlinuz", "initramfs.gz"):
        if not os.path.exists(os.path.join(GUEST, f)):
            return "no guest in %s (make guest)" % GUEST
    return None


def destroy_left(r):
    """Destroy and undefine the domains a failed step left."""
    if r.d.proc and r.d.proc.poll() is None:
        for dom in (DOM, DOM + "-native"):
            if r.d.virsh("domstate", dom)[0] == 0:
                r.d.virsh("destroy", dom)
                r.d.virsh("undefine", dom, "--managed-save")


def cleanup(r):
    """Whatever an earlier failure left: domains, QEMU, the daemon."""
    if r.con:
        r.con.close()
    destroy_left(r)
    piddir = r.d.path("run", "libvirt", "qemu")
    for f in os.listdir(piddir) if os.path.isdir(piddir) else []:
        if f.endswith(".pid"):
            try:
                os.kill(int(open(os.path.join(piddir, f)).read()),
                        signal.SIGKILL)
            except (OSError, ValueError):
                pass
    r.d.stop()
    qlogs = r.d.path("log", "qemu")
    for src in [r.d.log] + [os.path.join(qlogs, f) for f in (
            os.listdir(qlogs) if os.path.isdir(qlogs) else [])]:
        if os.path.exists(src):
            shutil.copy(src, LOGS)


def run_all(r):
    try:
        r.d.start()
    except RuntimeError as e:
        case(False, "libvirt: a private libvirtd starts", str(e))
        return
    case(True, "libvirt: a private libvirtd %s starts (own mount namespace, "
         "config and sockets)" % ".".join(map(str, r.d.version() or ())))
    failed = None
    for label, step in STEPS:
        if failed:
            case(False, "libvirt: %s" % label, "not run: %s failed" % failed)
            continue
        try:
            step(r)
        except (RuntimeError, OSError, TimeoutError, ValueError) as e:
            case(False, "libvirt: %s" % label, str(e)[-500:])
            failed = label
    if not failed:
        step_native(r)
    destroy_left(r)
    sock = r.d.sock
    rc = r.d.stop()
    case(rc == 0 and not os.path.exists(sock),
         "libvirt: the daemon stops (status %s) and removes its socket" % rc,
         "socket still there: %s" % os.path.exists(sock))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--xml":
        doc = doc_forms(RST).get(sys.argv[2])
        if doc is None:
            sys.exit("%s has no %s form" % (RST, sys.argv[2]))
        print(domain_xml(sys.argv[2], doc_image(doc), "/tmp/job.sh",
                         "/tmp/console.sock", buffered=False))
        return 0
    t0 = time.monotonic()
    why = cannot_run()
    if why:
        case(True, "libvirt: a private libvirtd drives the series' QEMU",
             skip=why)
        return finish()
    if "commandline" not in doc_forms(RST):
        case(False, "libvirt: nvme.rst has an xml block with "
             "<qemu:commandline>", "none in %s" % RST)
        return finish()
    os.makedirs(LOGS, exist_ok=True)
    # a timeout's SIGTERM unwinds through the clean-up below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    r = Run(tempfile.mkdtemp(prefix="nvdp-libvirt-"))
    try:
        run_all(r)
    finally:
        cleanup(r)
        shutil.rmtree(r.tmp, ignore_errors=True)
    print("# libvirt-check took %d s (logs: %s)" % (time.monotonic() - t0,
                                                   LOGS))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
