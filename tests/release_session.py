"""`kvfuzz` commands run with an earlier release first on the path (the older-release tests), one
batch of commands a process, each batch forked from a server that imported the release once.

Why a server: importing a release's memory pools (torch, and SGLang's modules with it) takes some
7 s of CPU, most of such a test's time, and a test process used to import it again for each test
(`docs/upstream-vllm.md`, "Speed"). Now the first batch on a release in a pytest worker starts a
server process for it, which imports the modules every batch on it shares (`BASE`) and then
forks one child per batch: the child imports what its own commands name, runs them (kvfuzz's
`main`, a subreaper as that program is) and writes their results. So each batch starts from the
same state a fresh process would reach (the release imported, nothing else run), and no batch
sees another's: what one batch imports, patches or breaks stays in its child. A batch whose
commands name no implementation of the release's engine gets no server (a process of its own, as
before). A server serves one environment (a test that sets a variable gets a server of its own). The
server ends with its pytest worker (its stdin closes) or at a timeout."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

# The modules a batch's session imports before its commands (what the commands' workers would
# import again otherwise): the release's memory pools, the bulk of any of its allocators'
# imports, and the modules the commands' implementations name, where the release has them.
IMPORTS = """
import importlib, importlib.util
from kvfuzz.impl.upstream_env import prepare_import
def import_all(modules):
    for module in modules:
        with prepare_import(module):  # (finding it imports its packages)
            try:  # (find_spec raises where a parent is a module, as allocator.py before 0.5.13)
                if importlib.util.find_spec(module):
                    importlib.import_module(module)
            except ImportError:  # the command's own import says why (or, for want of
                pass             # sgl_kernel, retries with kvfuzz's stand-in)
"""

# One batch: its commands, each through kvfuzz's `main` with its output captured, the strays of
# each swept (`sweep`), the results written to `out_file` as [status, stdout, stderr] lists.
BATCH = IMPORTS + """
import contextlib, io, json
from kvfuzz.fuzz.cli.main import main
from kvfuzz.fuzz.engine.containment import become_subreaper, sweep
def run_batch(commands, modules, out_file):
    become_subreaper()
    import_all(modules)
    results = []
    for argv in commands:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as stop:
                status = stop.code
        sweep()
        results.append([status, out.getvalue(), err.getvalue()])
    with open(out_file, "w") as handle:
        json.dump(results, handle)
"""

# A batch in a process of its own: argv[1] the commands, argv[2] the modules, argv[3] out_file.
ALONE = BATCH + """
import sys
run_batch(json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3])
"""

# The server: argv[1] the modules every batch shares, imported once. Then one request a line on
# stdin ([commands, modules, out_file, log_file]); each runs in a forked child whose output goes
# to log_file; the child's exit status is the reply, one line on the server's reply pipe (its
# stdout before anything else could write there: fd 1 itself then points at stderr).
SERVER = BATCH + """
import os, sys
from kvfuzz.fuzz.engine.containment import become_subreaper, sweep
reply = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
become_subreaper()  # a batch's strays, orphaned when its child ends, are swept here
import_all(json.loads(sys.argv[1]))
reply.write("ready\\n")
reply.flush()
for line in sys.stdin:
    commands, modules, out_file, log_file = json.loads(line)
    pid = os.fork()
    if pid == 0:
        reply.close()
        log = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        status = 0
        try:
            run_batch(commands, modules, out_file)
        except BaseException:
            import traceback
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    sweep()
    reply.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\\n")
    reply.flush()
"""

BASE = "sglang.srt.mem_cache.memory_pool"  # what every SGLang batch imports first
# (release folder, environment) -> its server, in this process: a batch's environment is the
# one its server started with (a release may read it at import)
_SERVERS: dict[tuple, subprocess.Popen] = {}


def _modules(argvs: list[list[str]]) -> list[str]:
    """What a session of these commands imports first: the release's memory pools where an
    implementation the commands name requires SGLang, and the modules those implementations
    name (their classes', what kvfuzz's adapters wrap), in sorted order."""
    from kvfuzz.fuzz.targets import TARGETS

    names = {argv[i + 1] for argv in argvs for i, word in enumerate(argv[:-1])
             if word == "--impl"}
    chosen = [i for t in TARGETS.values() for i in t.catalogue.implementations
              if i.name in names]
    modules = {BASE} if any(i.requires == "sglang" for i in chosen) else set()
    for impl in chosen:
        modules |= {path.split(":")[0] for path in (*impl.paths, *impl.mutates)
                    if path.startswith(f"{impl.requires}.")}
    return sorted(modules)


def _env(folder) -> dict:
    return dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def run_commands(folder, argvs: list[list[str]], timeout: int) -> list:
    """Each of `argvs` run by kvfuzz's `main` with the release at `folder` first on the path:
    [status, stdout, stderr] of each. Through the release's server where the batch imports
    SGLang's memory pools (`BASE`), else in a process of its own."""
    modules = _modules(argvs)
    with tempfile.TemporaryDirectory() as scratch:
        out_file, log_file = (os.path.join(scratch, name) for name in ("results.json", "log"))
        if BASE in modules:
            status, log = _served(str(folder), argvs, modules, out_file, log_file, timeout)
        else:
            done = subprocess.run([sys.executable, "-c", ALONE, json.dumps(argvs),
                                   json.dumps(modules), out_file], env=_env(folder),
                                  capture_output=True, text=True, timeout=timeout)
            status, log = done.returncode, done.stdout + done.stderr
        assert status == 0, log[-3000:]
        with open(out_file) as handle:
            return json.load(handle)


def _served(folder: str, argvs, modules, out_file, log_file, timeout: int):
    """A batch through the server of `folder` and this process's environment (started on
    first use): (exit status, its output)."""
    deadline, env = time.monotonic() + timeout, _env(folder)
    key = (folder, tuple(sorted(env.items())))
    server = _SERVERS.get(key)
    if server is None or server.poll() is not None:
        errors = tempfile.TemporaryFile("w+")  # the server's own output (its import's)
        server = _SERVERS[key] = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps([BASE])], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
            start_new_session=True)
        if _reply(server, deadline, timeout) != "ready":
            errors.seek(0)
            return 1, errors.read() + "\nthe release's server ended before it was ready"
    server.stdin.write(json.dumps([argvs, modules, out_file, log_file]) + "\n")
    server.stdin.flush()
    status = _reply(server, deadline, timeout)
    log = open(log_file).read() if os.path.exists(log_file) else ""
    if status is None:
        return 1, log + "\nthe release's server ended during the batch"
    return int(status), log


def _reply(server: subprocess.Popen, deadline: float, timeout: int) -> str | None:
    """The server's next reply line (None: it ended); past `deadline` the server and every
    batch under it are killed and the batch times out, as `subprocess.run` would."""
    ready, _, _ = select.select([server.stdout], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        _stop(server)
        raise subprocess.TimeoutExpired(server.args, timeout)
    line = server.stdout.readline()
    if not line:
        _stop(server)
        return None
    return line.strip()


def _stop(server: subprocess.Popen) -> None:
    """The server and everything it started (its own session) killed and reaped."""
    for key, known in list(_SERVERS.items()):
        if known is server:
            del _SERVERS[key]
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait()


@atexit.register
def _stop_all() -> None:
    for server in list(_SERVERS.values()):
        _stop(server)
