"""No process an implementation starts outlives the input or the run that started it.

An implementation may start processes of its own: a `multiprocessing.Pool`, `Popen`, a bare
`fork()` whose child never ends, a double fork into a session of its own (`setsid`). Three
layers catch them all on Linux:
- a worker's whole tree is killed when the worker is stopped (`kill_tree`: its process group,
  then every descendant found under it, `setsid` ones included, since they stay its
  descendants);
- a kvfuzz command is a child subreaper (`become_subreaper`): a process whose parent died is
  re-parented to kvfuzz, not to init, so it stays a descendant;
- before a command exits, every descendant left is killed (`sweep`): a caller that waits for
  kvfuzz's output pipes is not kept waiting by a stray holding them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat

_PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER = []  # non-empty once this process is one (a kvfuzz command, not a library caller)


def become_subreaper() -> None:
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0:
            _SUBREAPER.append(True)
    except (OSError, AttributeError):  # not Linux: the process-group kill still runs
        pass


def name_process(name: bytes) -> None:
    """What `ps` and /proc/<pid>/comm show (15 bytes at most)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
    except OSError:  # gone meanwhile, or no /proc
        pass
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, parents before their children."""
    found, queue = [], children(pid)
    while queue:
        child = queue.pop(0)
        if child not in found:
            found.append(child)
            queue += children(child)
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """`pid`, its process group (a worker leads its own) and everything below it. Killing the
    group first stops a forking loop from outrunning the walk; what a killed parent leaves is
    re-parented to the subreaper and caught by `sweep`."""
    below = descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill(pid)
    for child in below + [c for c in descendants(pid) if c not in below]:
        _kill(child)


def sweep(keep=()) -> int:
    """In a kvfuzz command (a subreaper): kill every descendant of this process that is not in
    `keep` (nor below one), and reap those that were our own children; how many were killed.
    A library caller's other children are not kvfuzz's to judge: there it does nothing."""
    if not _SUBREAPER:
        return 0
    kept = {pid for pid in keep if pid is not None}
    for pid in list(kept):
        kept.update(descendants(pid))
    own = set(children(os.getpid()))
    strays = [pid for pid in descendants(os.getpid()) if pid not in kept]
    for pid in strays:
        _kill(pid)
    for pid in strays:
        if pid in own:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # reaped elsewhere
                pass
    return len(strays)


def close_other_sockets(keep: int) -> None:
    """A forked worker holds copies of the supervisor's sockets: its own pipe's other end and
    every earlier worker's. Closed, so that nothing an implementation writes reaches another
    worker's pipe (and the supervisor's end closing reads as EOF here)."""
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        descriptor = int(name)
        try:
            if descriptor != keep and stat.S_ISSOCK(os.fstat(descriptor).st_mode):
                os.close(descriptor)
        except OSError:  # the listing's own descriptor, already gone
            pass
