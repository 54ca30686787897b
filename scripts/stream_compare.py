#!/usr/bin/env python3
"""Compare the NVMe controller's migration stream of two QEMU binaries.

    stream_compare.py QEMU_A QEMU_B [--keep DIR] [--fields ANALYZER]

Each binary runs the same guest over the qtest protocol (no guest code:
the host side is driven from here): pc-q35-10.2, an nvme controller with
a drive= namespace at 00:04.0, enabled, two I/O queue pairs, and an
Asynchronous Event Request outstanding.  The VM is stopped and saved
with "migrate exec:cat > FILE".  The script prints the size of each
stream's nvme section and every byte where they differ, and exits 0 when
the sections have the same length (differing bytes are listed, not
failed: each QEMU version reports its own defaults).  With --fields and
the path of QEMU's scripts/analyze-migration.py, it also reads both
sections field by field with B's own description of its section (from
B's stream), lists the fields whose values differ, and fails unless both
read to the end with the same fields.  Written to check
that this controller writes QEMU 11.1's stream: QEMU_B is then the
stock binary scripts/stock_qemu.sh prints.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

BAR = 0xfe000000
ASQ, ACQ = 0x100000, 0x101000


class Qemu:
    def __init__(self, binary, args, tmp):
        qsock, msock = os.path.join(tmp, "qtest.sock"), os.path.join(tmp, "qmp.sock")
        ls = socket.socket(socket.AF_UNIX)
        ls.bind(qsock)
        ls.listen(1)
        ms = socket.socket(socket.AF_UNIX)
        ms.bind(msock)
        ms.listen(1)
        self.p = subprocess.Popen([binary, "-qtest", "unix:" + qsock,
                                   "-chardev", "socket,path=%s,id=m" % msock,
                                   "-mon", "chardev=m,mode=control",
                                   "-display", "none", "-nodefaults",
                                   "-accel", "qtest"] + args,
                                  stderr=subprocess.DEVNULL)
        ls.settimeout(30)
        ms.settimeout(30)
        self.q = ls.accept()[0].makefile("rw")
        self.m = ms.accept()[0].makefile("rw")
        self.m.readline()
        self.qmp("qmp_capabilities")

    def qt(self, line):
        self.q.write(line + "\n")
        self.q.flush()
        while True:
            r = self.q.readline().strip()
            if not r.startswith("IRQ"):
                if not r.startswith("OK"):
                    raise RuntimeError("qtest %s: %s" % (line, r))
                return r[3:]

    def qmp(self, cmd, **args):
        self.m.write(json.dumps({"execute": cmd, "arguments": args}) + "\n")
        self.m.flush()
        while True:
            r = json.loads(self.m.readline())
            if "event" not in r:
                return r

    def cfg_w(self, dev, off, val):
        self.qt("outl 0xcf8 %#x" % (0x80000000 | dev << 11 | off))
        self.qt("outl 0xcfc %#x" % val)

    def wl(self, addr, val):
        self.qt("writel %#x %#x" % (addr, val))

    def wq(self, addr, val):
        self.qt("writeq %#x %#x" % (addr, val))

    def rl(self, addr):
        return int(self.qt("readl %#x" % addr), 16)

    def write(self, addr, data):
        self.qt("write %#x %d 0x%s" % (addr, len(data), data.hex()))

    def read(self, addr, n):
        return bytes.fromhex(self.qt("read %#x %d" % (addr, n))[2:])


def setup(q):
    """Enable the controller, create two I/O queue pairs, leave an AER"""
    st = {"tail": 0, "head": 0, "cid": 1}

    def sqe(op, cid, cdw10=0, cdw11=0, prp1=0):
        return struct.pack("<BBHI8x8xQ8xIIIIII", op, 0, cid, 0, prp1,
                           cdw10, cdw11, 0, 0, 0, 0)

    def admin(op, cdw10, cdw11, prp1):
        q.write(ASQ + st["tail"] * 64, sqe(op, st["cid"], cdw10, cdw11, prp1))
        st["tail"] += 1
        st["cid"] += 1
        q.wl(BAR + 0x1000, st["tail"])
        for _ in range(500):
            e = q.read(ACQ + st["head"] * 16, 16)
            if struct.unpack("<H", e[14:16])[0] & 1:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError("admin command %#x: no completion" % op)
        st["head"] += 1
        q.wl(BAR + 0x1004, st["head"])
        status = struct.unpack("<H", e[14:16])[0] >> 1
        if status:
            raise RuntimeError("admin command %#x: status %#x" % (op, status))

    q.cfg_w(4, 0x10, BAR)
    q.cfg_w(4, 0x14, 0)
    q.cfg_w(4, 0x04, 0x6)
    q.wl(BAR + 0x24, 31 << 16 | 31)
    q.wq(BAR + 0x28, ASQ)
    q.wq(BAR + 0x30, ACQ)
    q.wl(BAR + 0x14, 0x460001)
    for _ in range(500):
        if q.rl(BAR + 0x1c) & 1:
            break
        time.sleep(0.01)
    for i in (1, 2):
        admin(0x05, 15 << 16 | i, 1, 0x200000 + i * 0x10000)
        admin(0x01, 15 << 16 | i, i << 16 | 1, 0x300000 + i * 0x10000)
    q.write(ASQ + st["tail"] * 64, sqe(0x0c, 0x77))
    st["tail"] += 1
    q.wl(BAR + 0x1000, st["tail"])


def save(binary, tmp):
    img = os.path.join(tmp, "disk.img")
    with open(img, "wb") as f:
        f.truncate(1 << 20)
    out = os.path.join(tmp, "stream")
    q = Qemu(binary, ["-machine", "pc-q35-10.2", "-m", "64",
                      "-drive", "id=d0,if=none,file=%s,format=raw" % img,
                      "-device", "nvme,id=nvme0,addr=04.0,drive=d0,serial=cmp"],
             tmp)
    try:
        setup(q)
        time.sleep(0.2)
        q.qmp("stop")
        q.qmp("migrate", uri="exec:cat > %s" % out)
        for _ in range(600):
            r = q.qmp("query-migrate")["return"]
            if r.get("status") in ("completed", "failed"):
                break
            time.sleep(0.05)
        if r.get("status") != "completed":
            raise RuntimeError("%s: the save %s (%s)" % (binary, r.get("status"),
                                                        r.get("error-desc")))
        q.qmp("quit")
    finally:
        q.p.wait(timeout=30)
    return out


def section(path, name=b"0000:00:04.0/nvme"):
    """The body of the section named @name: after its header (id, name,
    instance and version), up to its footer"""
    d = open(path, "rb").read()
    i = d.find(bytes([len(name)]) + name)
    if i < 5:
        raise RuntimeError("%s: no section %s" % (path, name.decode()))
    start = i + 1 + len(name) + 8
    end = d.find(b"\x7e" + d[i - 4:i], start)
    return d[start:end]


def nvme_desc(path, analyzer):
    """The description of the nvme section that the stream at @path
    carries (its vmdesc)"""
    import types
    # its classes, without the command line part at its end
    text = open(analyzer).read()
    am = types.ModuleType("analyze_migration")
    exec(compile(text[:text.index("\nparser = argparse")], analyzer,
                 "exec"), am.__dict__)
    dump = am.MigrationDump(path)
    dump.read(desc_only=True)
    for device in dump.vmsd_desc["devices"]:
        if device["name"] == "0000:00:04.0/nvme":
            return am, device
    raise RuntimeError("%s: no description of the nvme section" % path)


def flatten(v, pre=""):
    """Leaf values of a decoded section, in stream order, by path"""
    out = []
    if isinstance(v, dict):
        for k, x in v.items():
            out += flatten(x, pre + "/" + k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += flatten(x, "%s[%d]" % (pre, i))
    else:
        out.append((pre, v))
    return out


def decode(am, desc, body, tmp):
    """@body read field by field with the section description @desc"""
    import copy
    path = os.path.join(tmp, "body")
    with open(path, "wb") as f:
        f.write(body)
    f = am.MigrationFile(path)
    sec = am.VMSDSection(f, 1, copy.deepcopy(desc), ("nvme", 0))
    sec.read()
    left = len(body) - f.file.tell()
    return flatten(json.loads(json.dumps(sec.getDict(),
                                         cls=am.JSONEncoder))), left


def main():
    args = sys.argv[1:]
    keep = analyzer = None
    if "--keep" in args:
        keep = args[args.index("--keep") + 1]
        args = [a for a in args if a not in ("--keep", keep)]
    if "--fields" in args:
        analyzer = args[args.index("--fields") + 1]
        args = [a for a in args if a not in ("--fields", analyzer)]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    bodies, streams, tmps = [], [], []
    for k, binary in enumerate(args):
        tmp = tempfile.mkdtemp(prefix="stream-cmp-", dir=keep)
        streams.append(save(binary, tmp))
        tmps.append(tmp)
        bodies.append(section(streams[-1]))
        print("%s: nvme section %d bytes (%s)" % ("AB"[k], len(bodies[-1]),
                                                  binary))
    a, b = bodies
    diff = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
    print("bytes that differ: %d" % len(diff))
    for i in diff[:64]:
        print("  offset %d: A %02x B %02x" % (i, a[i], b[i]))
    rc = 0 if len(a) == len(b) else 1

    # Field by field: both sections read with B's own description of its
    # section (QEMU 11.1's, when B is the stock binary), with QEMU's
    # stream analyzer
    if analyzer:
        am, desc = nvme_desc(streams[1], analyzer)
        fa, left_a = decode(am, desc, a, tmps[0])
        fb, left_b = decode(am, desc, b, tmps[1])
        print("fields, read with B's description: A %d (%d bytes left), "
              "B %d (%d bytes left)" % (len(fa), left_a, len(fb), left_b))
        fdiff = [(x, y) for x, y in zip(fa, fb) if x != y]
        print("fields that differ: %d" % len(fdiff))
        for x, y in fdiff[:64]:
            print("  %s: A %s B %s" % (x[0], x[1], y[1]))
        if len(fa) != len(fb) or left_a or left_b:
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
