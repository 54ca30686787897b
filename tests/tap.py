"""The one TAP writer of the project's Python test scripts."""

_count = {"n": 0, "failed": 0}


def case(ok, name, why="", skip=None):
    """One test case: 'ok N - name', 'not ok N - name  # why', or, when
    @skip says why it could not run here, 'ok N - name # SKIP skip'
    (counted as a skip by make check, never as a pass)."""
    _count["n"] += 1
    if skip:
        print("ok %d - %s # SKIP %s" % (_count["n"], name, skip), flush=True)
        return
    _count["failed"] += not ok
    print("%s %d - %s%s" % ("ok" if ok else "not ok", _count["n"], name,
                            "" if ok else "  # " + why), flush=True)


def finish():
    """The plan line; the exit status: 1 if a case failed."""
    print("1..%d" % _count["n"])
    return 1 if _count["failed"] else 0
