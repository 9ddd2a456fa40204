"""SGLang's scheduler imported once, each session then a process forked from it: what
`session_in_subprocess(..., server=SessionServer())` runs a session in, for the tests that run
several. A session's process otherwise spends most of its CPU importing torch and SGLang (some
9 of its 12 CPU s, measured 2026-12-07); forked from a process that imported them, it spends
only the session's own.

Each session still runs in a process of its own (SGLang builds its parallel groups once per
process, and its scheduler's threads and sockets end with that process), started by a fork of
a process that has imported the engine's modules and done nothing else: no scheduler built, no
thread of Python's started, no session's switch read (the server starts with SGLang's switches
unset, and each session gets the environment its caller has when it asks). The child runs the
session command's own `main` with the same arguments, its stdout and stderr in files the
caller reads as it would a process's.

    python -m kvfuzz.fuzz.allocator.sglang_zygote   # the server: one JSON request a line in
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Read by SGLang when its modules are imported or a scheduler is built: a session sets those it
# needs; none must come to the server from whatever its starter had set.
SGLANG_SWITCHES = ("SGLANG_INVARIANT_CHECK", "SGLANG_DEBUG_MEMORY_POOL", "SGLANG_TEST_RETRACT",
                   "SGLANG_TEST_RETRACT_INTERVAL", "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND")


class SessionServer:
    """The server process, started at once and closed by `close()` (or `with`); `run` asks it
    for one session and returns what the session's process wrote and its exit status."""

    def __init__(self, start_timeout: float = 600):
        env = {name: value for name, value in os.environ.items() if name not in SGLANG_SWITCHES}
        self.folder = Path(tempfile.mkdtemp(prefix="kvfuzz-sglang-sessions-"))
        self._log = open(self.folder / "server.err", "w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kvfuzz.fuzz.allocator.sglang_zygote"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            start_new_session=True)  # its group: the server and a session in flight
        self.count = 0
        if self._reply(start_timeout) != {"ready": True}:
            raise RuntimeError("SGLang's session server did not start")

    def run(self, argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        """One session of the command with `argv` in a process forked from the server."""
        self.count += 1
        out, err = (self.folder / f"{self.count}.{name}" for name in ("out", "err"))
        request = dict(argv=list(argv), out=str(out), err=str(err), env=dict(os.environ),
                       cwd=os.getcwd())
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        status = self._reply(timeout)["status"]
        return subprocess.CompletedProcess(argv, status, out.read_text(), err.read_text())

    def _reply(self, timeout: float) -> dict:
        """The server's next line; the server is killed if none comes within `timeout`."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while not selector.select(max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.close()
                    raise subprocess.TimeoutExpired("kvfuzz sglang session server", timeout)
        line = self.process.stdout.readline()
        if not line:
            self._log.seek(0)
            raise RuntimeError(f"SGLang's session server ended: {self._log.read()[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _import_engine() -> None:
    """What a session imports, before any session: torch and SGLang's scheduler stack."""
    import torch

    torch.set_num_threads(1)  # as the session command does (its tiny model's threads spin)
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("sglang"):
        import sglang.srt.managers.io_struct  # noqa: F401
        import sglang.srt.managers.scheduler  # noqa: F401
        import sglang.srt.mem_cache.kv_cache_configurator  # noqa: F401
        import sglang.srt.runtime_context  # noqa: F401
        import sglang.srt.sampling.sampling_params  # noqa: F401
        import sglang.srt.server_args  # noqa: F401


def _session(request: dict) -> None:
    """In the forked child: the command's `main` on the request's arguments, environment and
    folder, stdout and stderr in the request's files; ends the process, as the command does."""
    from kvfuzz.fuzz.allocator import sglang_scheduler

    for fd, path in ((1, request["out"]), (2, request["err"])):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [sglang_scheduler.__file__, *request["argv"]]  # read into a recording's note
    sglang_scheduler.main_then_exit(request["argv"])


def serve() -> None:
    _import_engine()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _session(request)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    serve()
