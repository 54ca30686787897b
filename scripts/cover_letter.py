#!/usr/bin/env python3
"""Write the cover letter of one topic series (export.sh calls it).

    cover_letter.py TREE BASE END OLD OUT

The subject and the text (what and why, figures, Based-on:, changes since
an earlier version) are the developer's: they are taken from OLD, the
series' cover letter as committed (a missing OLD gives git's placeholders,
which make check refuses).  The rest is made from the commits BASE..END of
TREE, so that it cannot go stale: the From:/Date: of the series' last
commit, the number of patches, a line per patch and the diffstat.
"""
import os
import re
import subprocess
import sys

SUBJECT_PLACEHOLDER = "*** SUBJECT HERE ***"
BLURB_PLACEHOLDER = "*** BLURB HERE ***"


def git(tree, *args):
    return subprocess.run(["git", "-C", tree] + list(args), check=True,
                          capture_output=True, text=True).stdout


def parse_old(path):
    """(subject, blurb) of an existing cover letter, or placeholders"""
    if not path or not os.path.exists(path):
        return SUBJECT_PLACEHOLDER, BLURB_PLACEHOLDER
    text = open(path, encoding="utf-8").read()
    head, _, body = text.partition("\n\n")
    subject = SUBJECT_PLACEHOLDER
    for line in head.splitlines():
        m = re.match(r"Subject: \[[^\]]*\] ?(.*)$", line)
        if m:
            subject = m.group(1).strip() or SUBJECT_PLACEHOLDER
    lines = body.splitlines()
    # the blurb ends where the generated part begins: "Author (N):"
    end = len(lines)
    for i, line in enumerate(lines):
        if re.match(r"^\S.* \(\d+\):$", line):
            end = i
            break
    blurb = "\n".join(lines[:end]).strip("\n")
    return subject, blurb or BLURB_PLACEHOLDER


def main():
    tree, base, end, old, out = sys.argv[1:6]
    subject, blurb = parse_old(old)
    commits = git(tree, "rev-list", "--reverse", f"{base}..{end}").split()
    n = len(commits)
    width = len(str(n))
    author = git(tree, "log", "-1", "--format=%an <%ae>", end).strip()
    date = git(tree, "log", "-1", "--format=%aD", end).strip()
    by_author = {}
    order = []
    for c in commits:
        a = git(tree, "log", "-1", "--format=%an", c).strip()
        s = git(tree, "log", "-1", "--format=%s", c).strip()
        if a not in by_author:
            by_author[a] = []
            order.append(a)
        by_author[a].append(s)
    shortlog = []
    for a in order:
        shortlog.append(f"{a} ({len(by_author[a])}):")
        shortlog += [f"  {s}" for s in by_author[a]]
        shortlog.append("")
    stat = git(tree, "-c", "diff.noprefix=false", "diff", "--stat=80",
               "--summary", base, end).rstrip("\n")
    text = (f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: {author}\n"
            f"Date: {date}\n"
            f"Subject: [PATCH {0:0{width}d}/{n}] {subject}\n"
            f"\n{blurb}\n\n" + "\n".join(shortlog) + f"\n{stat}\n")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
