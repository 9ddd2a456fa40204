"""The fork server (fuzz/engine/zygote.py): an implementation is imported once per worker, and a
process that ended on an input is replaced by a fork of the server, not by a second import. The
server ran the implementation's import, so it is as hostile as the implementation: a lie on its
socket, or memory its import keeps taking, is that implementation's divergence and nothing
else's."""

from __future__ import annotations


import pytest

from tests.engine.test_isolation import kvfuzz
from tests.helpers import summary_rows

pytestmark = pytest.mark.slow  # each test runs kvfuzz as a process of its own
MODULES = "tests.engine.hostile_import"


def test_a_crash_costs_a_fork_not_an_import(tmp_path, monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("KVFUZZ_TEST_LOG", str(log))
    path = f"{MODULES}.counts_imports:alloc_extend"
    result = kvfuzz("diff", "extend", "--impl", path, "--cases", 80, "--jobs", 1,
                    "--keep-going", "--corpus", tmp_path / "found")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "what      crashed: SIGSEGV" in result.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    imports = [pid for what, pid in lines if what == "import"]
    processes = {pid for what, pid in lines if what == "call"}
    # once in the supervisor's shape check (a child of its own), once in the run's worker and
    # once in the worker that shrinks the finding: not once per process (60 here)
    assert len(imports) <= 3 and len(processes) >= 20, (imports, len(processes))
    assert not processes & set(imports)  # every call ran in a fork, none in a process importing


def test_a_server_that_lies_about_its_processes_is_refused(tmp_path):
    path = f"{MODULES}.lies_to_its_judge:alloc_extend"
    result = kvfuzz("diff", "extend", "--impl", path, "--impl", "torch.vectorized",
                    "--cases", 30, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "what      corrupted the worker protocol: a fork server's" in result.stderr
    assert summary_rows(result.stderr)["torch.vectorized"][:4] == ["30", "30", "0", "no"]
    # The lie is refused wherever it arrives: as the answer to a fork request (then for the pid
    # alone: `test_a_pid_that_is_not_the_servers_child_is_refused`), out of turn after the true
    # answer came first (the thread and the server race on one socket), or, where the thread
    # wins the race at the server's start, in place of its "ok".
    refused = ("a fork server's answer b'spawned", "a fork server's message b'spawned")
    assert any(where in result.stderr for where in refused), result.stderr[-3000:]


def test_a_pid_that_is_not_the_servers_child_is_refused():
    """A server's answer of the right shape, three descriptors and all, naming a process that is
    not its child (its parent, the worker) is refused, and the process named is not signalled."""
    import os
    import socket
    import time
    from types import SimpleNamespace

    from kvfuzz.fuzz.engine import zygote
    from kvfuzz.fuzz.engine.remote import Ended

    stand_in = os.fork()  # the "server": a process of ours that only waits
    if stand_in == 0:
        time.sleep(60)
        os._exit(0)
    never, _ = os.pipe()
    server = zygote.ForkServer.__new__(zygote.ForkServer)
    server.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.process = SimpleNamespace(pid=stand_in, sentinel=never, join=lambda timeout: None)
    server.crash = SimpleNamespace(close=lambda: None)
    server.ended, server.exits, server.live, server.handles = False, {}, set(), {}
    socket.send_fds(theirs, [b"spawned %d" % os.getpid()], [0, 1, 2])  # names the worker
    try:
        with pytest.raises(Ended, match="a fork server's answer b'spawned [0-9]+' with 3 "
                                        r"descriptor\(s\)") as ended:
            server.spawn()
        assert ended.value.kind == "protocol" and not server.handles
    finally:
        os.waitpid(stand_in, 0)  # killed as the lying server, not the worker it named
        theirs.close()
        os.close(never)


def test_memory_a_server_takes_after_the_import_is_the_implementations(tmp_path):
    path = f"{MODULES}.grows_after_import:alloc_extend"
    result = kvfuzz("diff", "extend", "--impl", path, "--impl", "torch.vectorized",
                    "--cases", 5000, "--memory", "1G", "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "what      exceeded the memory limit of 1 GiB (--memory; " in result.stderr
    assert "in its fork server)" in result.stderr
    cases, agree, outside, diverged = summary_rows(result.stderr)["torch.vectorized"][:4]
    assert cases == "5,000" and int(agree.replace(",", "")) + int(outside) == 5000 and diverged == "no"


def test_a_process_that_has_ended_is_not_signalled_by_its_pid(monkeypatch):
    """The server reaps its processes, so by the time the judge stops one that has ended, its pid
    may name another process: the judge holds each by a pidfd and kills only one still running."""
    import os
    import signal
    import time

    from kvfuzz.fuzz.engine import zygote

    killed = []
    monkeypatch.setattr(zygote, "kill_tree", killed.append)
    server = zygote.ForkServer.__new__(zygote.ForkServer)
    ended, running = os.fork(), None
    if ended == 0:
        os._exit(0)
    running = os.fork()
    if running == 0:
        time.sleep(60)
        os._exit(0)
    try:
        server.handles = {pid: os.pidfd_open(pid) for pid in (ended, running)}
        os.waitpid(ended, 0)  # reaped, as its server would: the pid is free for reuse
        server.kill(ended)
        server.kill(running)
        assert killed == [running] and not server.handles
    finally:
        os.kill(running, signal.SIGKILL)
        os.waitpid(running, 0)
