#!/usr/bin/env python3
"""Judge a make check-tsan run (scripts/tsan.sh).

  tsan_report.py --tree DIR --logs DIR [--builddir DIR] [--base REF]
                 [--rules FILE]

Reads LOGS/tsan-*.tap (the qtests) and LOGS/tsan-*.report.* (what
ThreadSanitizer wrote, from the test binary and every QEMU it started).
A report is the series' when a frame of one of its access stacks (not
the allocation, mutex or thread creation stacks) is in hw/nvme, or on a
line that the commits BASE..HEAD of the tree added or changed.  Those
fail the run; reports only in upstream code are listed and counted.

FILE's "top:FUNC # reason" lines (scripts/tsan-suppressions.txt) account
for a report whose access stack's innermost frame in QEMU (past memcpy and
the other libc interceptors) is FUNC, an upstream function whose races
are known: upstream's, not the series', however deep the series' frames
are below it.  TSan's own "race:" suppressions match any frame, which
would hide a race of the series reached through them; "top:" does not.
"mem:FUNC" lines are "top:" lines for a copy of guest memory: a race
there is the guest's protocol (one side the device, the other the
guest), so it is accounted only when some access stack has no frame of
the series.  When every access is the device's own (two of its threads
on the same bytes, as a double post to one CQ would be), it is the
series' and fails the run.

Prints each distinct report once (with how often it was seen), then
"N passed, N failed, N skipped" for the qtests plus one for the series'
reports; exits 1 if anything failed.
"""

import argparse
import collections
import glob
import os
import re
import subprocess
import sys

FRAME = re.compile(r'^\s+#(\d+) (\S+) (.*?)(?: \((\S+)\+0x[0-9a-f]+\))?'
                   r'(?: \(BuildId: [0-9a-f]+\))?$')
HEADER = re.compile(r'^  (\S.*):$')
ACCESS = re.compile(r'(?:read|write|Read|Write) of size')


def changed_lines(tree, base):
    """{path: set(lines)} the commits base..HEAD added or changed."""
    out = subprocess.run(['git', '-C', tree, 'diff', '-U0', '--no-color',
                          base, 'HEAD', '--'], capture_output=True,
                         text=True, check=True).stdout
    lines = collections.defaultdict(set)
    path = None
    for line in out.splitlines():
        if line.startswith('+++ '):
            path = line[6:] if line.startswith('+++ b/') else None
        elif line.startswith('@@') and path:
            m = re.match(r'@@ -\S+ \+(\d+)(?:,(\d+))? @@', line)
            start, count = int(m.group(1)), int(m.group(2) or 1)
            lines[path].update(range(start, start + count))
    return lines


def parse_reports(text):
    """Each report: (kind, [(header, [frames])], summary)."""
    reports = []
    for block in text.split('==================\n'):
        m = re.search(r'WARNING: ThreadSanitizer: (.*?)(?: \(pid=\d+\))?\n', block)
        if not m:
            continue
        kind = m.group(1)
        sections = []
        cur = None
        for line in block.splitlines():
            if line.startswith('WARNING: ThreadSanitizer:'):
                # the stack of a report that is not about an access
                cur = ('Stack', [])
                sections.append(cur)
                continue
            h = HEADER.match(line)
            if h:
                cur = (h.group(1), [])
                sections.append(cur)
                continue
            f = FRAME.match(line)
            if f and cur is not None:
                cur[1].append((f.group(2), f.group(3), f.group(4) or ''))
        s = re.search(r'^SUMMARY: ThreadSanitizer: (.*)$', block, re.M)
        reports.append((kind, sections, s.group(1) if s else kind))
    return reports


def frame_source(loc, tree, bdir):
    """'../qemu/hw/nvme/ctrl.c:123:5' -> ('hw/nvme/ctrl.c', 123)"""
    m = re.match(r'(.+?):(\d+)(?::\d+)?$', loc)
    if not m:
        return None, None
    path = m.group(1)
    if not os.path.isabs(path):
        path = os.path.join(bdir, path)
    rel = os.path.relpath(os.path.normpath(path), tree)
    if rel.startswith('..'):
        # built elsewhere (another checkout's objects, from ccache): the
        # longest tail of the path that is a file of this tree
        parts = os.path.normpath(path).split(os.sep)
        for i in range(1, len(parts)):
            tail = os.path.join(*parts[i:])
            if os.path.isfile(os.path.join(tree, tail)):
                return tail, int(m.group(2))
        return None, None
    return rel, int(m.group(2))


LIBC = re.compile(r'^(__interceptor_|__tsan_|__sanitizer_)|^(memcpy|memmove|'
                  r'memset|memcmp|free|malloc|calloc|realloc|'
                  r'posix_memalign|pthread_\w+)$')


def innermost(frames):
    """The first frame that is QEMU's own, not libc or a header's wrapper."""
    for func, loc, _ in frames:
        if LIBC.search(func) or loc.startswith('/usr/include/') or \
                loc.startswith('<null>') or '/include/qemu/bswap.h' in loc:
            continue
        return func
    return None


def load_rules(path):
    """[(kind, FUNC or (FUNC, FUNC))] of the "top:", "mem:", "pair:" lines"""
    rules = []
    for n, line in enumerate(open(path), 1):
        line = line.split('#', 1)[0].strip()
        if line.startswith(('top:', 'mem:')):
            rules.append((line[:3], line[4:].strip()))
        elif line.startswith('pair:'):
            funcs = line[5:].split()
            if len(funcs) != 2:
                sys.exit('%s:%d: "pair:" names two functions' % (path, n))
            rules.append(('pair', tuple(sorted(funcs))))
    return rules


def series_frames(frames, tree, bdir, changed):
    """The frames of @frames in hw/nvme or on a line the series changed"""
    ours = []
    for func, loc, _ in frames:
        path, line = frame_source(loc, tree, bdir)
        if path and (path.startswith('hw/nvme/') or
                     line in changed.get(path, ())):
            ours.append('%s %s:%d' % (func, path, line))
    return ours


# the executables of the run, whose frames must have names and lines
QEMU_MODULES = re.compile(r'^(qemu-\S+|nvme-\S+-test|\S+-test|blk-bench)$')


def unsymbolized(frames):
    """Frames of QEMU's executables without a function name: llvm-symbolizer
    was missing, or the binary has no symbols.  (An interceptor, memcpy
    <null>, or an inlined frame has a name without a line.)"""
    bad = []
    for func, loc, module in frames:
        if not QEMU_MODULES.match(os.path.basename(module)):
            continue
        if func == '<null>' or re.match(r'^0x[0-9a-f]+$', func):
            bad.append('%s %s (%s)' % (func, loc, module))
    return bad


def access_sections(sections):
    return [s for s in sections
            if ACCESS.search(s[0]) and not s[0].startswith('Location')]


def stack_sections(sections):
    """The stacks a report is about: its accesses, or (a report of another
    kind: a mutex, a signal, a leak) its own stack"""
    return access_sections(sections) or \
        [s for s in sections if s[0] == 'Stack' and s[1]]


def is_race(kind):
    return kind == 'data race' or kind.startswith('data race ')


WRITE_LOCKS = re.compile(r'\(mutexes: ([^)]*)\)')


def write_locks(header):
    """The mutexes an access's header says it held for writing"""
    m = WRITE_LOCKS.search(header)
    if not m:
        return set()
    return {w.split()[1] for w in m.group(1).split(', ')
            if w.startswith('write ')}


def account(rules, kind, accesses, tops, device_only, any_ours):
    """The rule that accounts a report, or None.  Rules account data races
    only.  Two accesses that both held the same mutex for writing cannot
    race: ThreadSanitizer lost the order (the BQL unlocked by a coroutine
    that moved threads, which it reports as "unlock of an unlocked
    mutex", or its clocks reset in a long run), whatever the frames.
    "top:" and "mem:" lines account only races whose access stacks have
    no frame of the series (mem: also those with a side that is the
    guest's); "pair:" lines races of the two functions named, whatever
    the frames."""
    if not is_race(kind) or len(accesses) != 2:
        return None
    if write_locks(accesses[0][0]) & write_locks(accesses[1][0]):
        return ('lock', 'the same mutex held for writing by both')
    for r in rules:
        if r[0] == 'pair' and tuple(sorted(tops)) == r[1]:
            return r
    for r in rules:
        if r[0] == 'top' and not any_ours and r[1] in tops:
            return r
        if r[0] == 'mem' and not device_only and r[1] in tops:
            return r
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--tree', required=True)
    ap.add_argument('--logs', required=True)
    ap.add_argument('--builddir')
    ap.add_argument('--base', default='upstream')
    ap.add_argument('--rules')
    a = ap.parse_args()
    tree = os.path.realpath(a.tree)
    bdir = os.path.realpath(a.builddir or os.path.join(os.path.dirname(tree),
                                                      'tsan-build'))
    changed = changed_lines(tree, a.base)
    rules = load_rules(a.rules) if a.rules else []
    accounted = collections.Counter()

    # the qtests
    passed = failed = skipped = 0
    for tap in sorted(glob.glob(os.path.join(a.logs, 'tsan-*.tap'))):
        plan = seen = 0
        name = os.path.basename(tap)
        for line in open(tap, errors='replace'):
            if re.match(r'^1\.\.\d+', line):
                plan = int(line[3:].split()[0])
            elif line.startswith('Bail out!'):
                failed += 1
                print('not ok - %s: %s' % (name, line.strip()))
            elif line.startswith('not ok '):
                seen += 1
                failed += 1
                print('not ok - %s: %s' % (os.path.basename(tap), line[7:].strip()))
            elif line.startswith('ok '):
                seen += 1
                if '# SKIP' in line:
                    skipped += 1
                else:
                    passed += 1
        if seen < plan:
            failed += plan - seen
            print('not ok - %s: %d of %d tests did not report (crash or hang)'
                  % (os.path.basename(tap), plan - seen, plan))
        if plan == 0 and seen == 0:
            failed += 1
            print('not ok - %s: ran no test' % os.path.basename(tap))
        # tsan.sh's record of the tests asked for and of the exit status
        base = tap[:-len('.tap')]
        if os.path.exists(base + '.planned'):
            asked = int(open(base + '.planned').read().split()[0])
            if seen < asked:
                failed += asked - seen
                print('not ok - %s: %d of the %d tests asked for did not '
                      'report (crash or hang)' % (name, asked - seen, asked))
        if os.path.exists(base + '.rc'):
            rc = open(base + '.rc').read().strip()
            if rc != '0':
                failed += 1
                print('not ok - %s: the test binary exited with status %s%s'
                      % (name, rc, ' (timed out)' if rc == '124' else ''))

    # the reports
    distinct = collections.OrderedDict()
    total = 0
    nosym = collections.Counter()
    for f in sorted(glob.glob(os.path.join(a.logs, 'tsan-*.report.*'))):
        topic = os.path.basename(f).split('.')[0][5:]
        for kind, sections, summary in parse_reports(open(f, errors='replace').read()):
            total += 1
            accesses = access_sections(sections)
            stacks = stack_sections(sections)
            bad = [b for _, fr in stacks for b in unsymbolized(fr)]
            if bad:
                nosym[bad[0]] += 1
                continue
            tops = [innermost(fr) for _, fr in accesses]
            per = [series_frames(fr, tree, bdir, changed) for _, fr in stacks]
            any_ours = any(per)
            device_only = bool(accesses) and all(per)
            rule = account(rules, kind, accesses, tops, device_only, any_ours)
            if rule:
                name = ' '.join(rule[1]) if rule[0] == 'pair' else rule[1]
                accounted['%s:%s' % (rule[0], name)] += 1
                continue
            ours = [o for p in per for o in p]
            key_frames = []
            for header, frames in stacks or sections[:1]:
                key_frames.append(tuple(func for func, _, _ in frames[:3]))
            key = (kind, tuple(sorted(key_frames)))
            d = distinct.setdefault(key, {'count': 0, 'topics': set(),
                                          'ours': ours, 'summary': summary,
                                          'sections': sections, 'file': f})
            d['count'] += 1
            d['topics'].add(topic)

    if nosym:
        n = sum(nosym.values())
        print('not ok - ThreadSanitizer: %d reports with frames of QEMU that '
              'have no function or line: the symbolizer is missing '
              '(llvm-symbolizer; ASAN_SYMBOLIZER_PATH) or the build has no '
              'debug information; e.g. %s' % (n, nosym.most_common(1)[0][0]))
        failed += 1

    series = [d for d in distinct.values() if d['ours']]
    upstream = [d for d in distinct.values() if not d['ours']]
    for title, group in (('in code of the series', series),
                         ('in upstream code only', upstream)):
        if not group:
            continue
        print('# ThreadSanitizer reports %s: %d distinct' % (title, len(group)))
        for d in group:
            print('#  - %s  (x%d; %s; e.g. %s)' % (d['summary'], d['count'],
                  ' '.join(sorted(d['topics'])), os.path.basename(d['file'])))
            for header, frames in stack_sections(d['sections']):
                print('#      %s' % header)
                for func, loc, _ in frames[:6]:
                    print('#        %s %s' % (func, loc))
            if d['ours']:
                print('#      series frames: %s' % '; '.join(d['ours'][:4]))
    for rule, n in accounted.most_common():
        print('# accounted by %s: %d' % (rule, n))
    print('# tsan: %d reports: %d accounted by the rules; %d distinct others: '
          '%d in the series\' code, %d upstream only'
          % (total, sum(accounted.values()), len(distinct), len(series),
             len(upstream)))
    if series:
        print('not ok - ThreadSanitizer: %d distinct reports in the series\' code'
              % len(series))
        failed += 1
    else:
        passed += 1
        print('ok - ThreadSanitizer: no report in the series\' code')
    print('%d passed, %d failed, %d skipped' % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
