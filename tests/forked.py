"""`kvfuzz` run as a process of its own, forked from the test's process instead of started fresh.

A fresh `python -m kvfuzz.fuzz.cli` spends some 2.3 s of CPU importing Python, torch and kvfuzz
before its command begins: most of what a short isolation test costs. The test's process has
imported all of that already, so `kvfuzz_forked` forks it and runs the program's entry point
(`command()`: a subreaper, `main`, the sweep of every descendant) in the child, with its own
pid, working directory, environment, stdin on /dev/null, stdout and stderr on pipes read to
their end (a stray process holding them keeps the caller waiting, as with `subprocess.run`),
and its exit status (negative: the signal that ended it). The claims of the tests that use it
are about what a command does with hostile implementations, not about starting Python; the
tests about start-up and signals at start (`test_interrupts.py`, `test_cli.py`'s process tests)
keep starting real interpreters, as do tests of `--memory`: a fork starts with the test process's
resident memory, which the limit would count.
"""

from __future__ import annotations

import faulthandler
import os
import selectors
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kvfuzz_forked(*args, env: dict | None = None, cwd=ROOT,
                  timeout: float = 300) -> subprocess.CompletedProcess:
    """What `subprocess.run([python, "-m", "kvfuzz.fuzz.cli", *args], capture_output=True,
    text=True, cwd=cwd, env=env, timeout=timeout)` gives, from a fork of this process."""
    argv = [str(arg) for arg in args]
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # never returns: whatever happens ends in os._exit
        os.close(out_read)
        os.close(err_read)
        _run_command(argv, out_write, err_write, env, cwd)
    os.close(out_write)
    os.close(err_write)
    try:
        out, err = _read_both(out_read, err_read, time.monotonic() + timeout)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise subprocess.TimeoutExpired(argv, timeout) from None
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), out, err)


def _read_both(out_fd: int, err_fd: int, deadline: float) -> tuple[str, str]:
    """Both pipes to their end (reading one only could leave the child blocked on the other)."""
    chunks = {out_fd: [], err_fd: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired("kvfuzz", 0)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            os.close(out_fd)
            os.close(err_fd)
    return tuple(b"".join(chunks[fd]).decode("utf-8", "replace") for fd in (out_fd, err_fd))


def _run_command(argv: list[str], out_fd: int, err_fd: int, env: dict | None, cwd) -> None:
    """In the child: as a fresh interpreter running `python -m kvfuzz.fuzz.cli ARGV` would."""
    status = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (devnull, out_fd, err_fd):
            os.close(fd)
        # pytest's capture objects and fault handler belong to the test's process
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                          closefd=False)
        sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
        faulthandler.disable()
        # a fresh interpreter's handlers (pytest's own ones are the test process's)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        sys.argv = ["kvfuzz", *argv]
        from kvfuzz.fuzz.cli.main import command

        status = _exit_status(command)
    except BaseException:  # noqa: BLE001 - an uncaught error ends a real interpreter with 1
        traceback.print_exc()
        status = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def _exit_status(command) -> int:
    """`sys.exit(command())` as the interpreter turns it into a status."""
    try:
        code = command()
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1
