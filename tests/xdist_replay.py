"""How CI's two pytest-xdist workers would share a run, replayed from a `--durations=0` log with
real xdist: every collected test becomes a test that sleeps its logged seconds (setup, call and
teardown summed) divided by `--scale`, in the collection's order, run under each `--dist` mode
asked for, then again with no sleep at all (xdist's own overhead, some 5 ms a test, more on a
busy machine); the difference, times the scale, is the wall time the tests would take under that
mode (sleeps need no CPU, so a shared machine gives about the same answer).

    python -m pytest --collect-only -q -p no:cacheprovider > /tmp/order.txt
    python -m tests.xdist_replay /tmp/dur.log /tmp/order.txt --scale 40 --dist load worksteal

(Tests the log does not name, under its 0.005 s floor, sleep nothing.)"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

LINE = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S.*?)\s*$")
SLEEPER = """import json, time, pytest
D = json.load(open(__file__.replace("test_replay.py", "seconds.json")))
@pytest.mark.parametrize("i", range(len(D)))
def test_replay(i):
    time.sleep(D[i])
"""


def durations(log: Path) -> Counter:
    seconds = Counter()
    for line in log.read_text().splitlines():
        if match := LINE.match(line):
            seconds[match.group(2)] += float(match.group(1))
    return seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("order", type=Path, help="pytest --collect-only -q's output")
    parser.add_argument("--scale", type=float, default=40.0)
    parser.add_argument("--dist", nargs="+", default=["load", "worksteal"])
    args = parser.parse_args(argv)
    seconds = durations(args.log)
    order = [line.strip() for line in args.order.read_text().splitlines() if "::" in line]
    total = sum(seconds.get(node, 0.0) for node in order)
    print(f"{len(order)} tests, {sum(node in seconds for node in order)} in the log, "
          f"{total:.0f} s in all, {total / 2:.0f} s a worker at best")
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        (where / "test_replay.py").write_text(SLEEPER)
        (where / "pytest.ini").write_text("[pytest]\n")

        def wall(mode: str, scale: float) -> float:
            (where / "seconds.json").write_text(json.dumps(
                [seconds.get(node, 0.0) / scale if scale else 0.0 for node in order]))
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", mode,
                            "-p", "no:cacheprovider", "test_replay.py"], cwd=where, check=True,
                           stdout=subprocess.DEVNULL)
            return time.monotonic() - start

        for mode in args.dist:
            slept, bare = wall(mode, args.scale), wall(mode, 0)
            print(f"--dist {mode}: {slept:.1f} s, {bare:.1f} s without sleeps: "
                  f"({slept:.1f} - {bare:.1f}) x {args.scale:g} = "
                  f"{(slept - bare) * args.scale:.0f} s")


if __name__ == "__main__":
    main()
