"""A history run: the cells (release x upstream class) planned from the command line, each
release installed apart, the cells run `--jobs` at a time (`cells.run_cell`), a progress line as
each ends, every verdict kept in the results file, then the table, the JSON and the picture.

Releases are installed one after another in this thread while the cells of those before run in
the pool, so a download overlaps the runs. A stop (Ctrl-C, SIGTERM) is passed on to the cells
in flight as SIGINT (each `kvfuzz diff` saves what it found and ends), their cells are left out
of the results file (a rerun runs them), and the table of what is done prints."""

from __future__ import annotations

import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kvfuzz.fuzz.history import findings, picture, releases, results, table
from kvfuzz.fuzz.history.cells import (AGREE, ERROR, INTERRUPTED, UNSUPPORTED, Cell, run_cell)
from kvfuzz.fuzz.history.releases import Release, ReleaseError
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl import upstream_cache
from kvfuzz.impl.registry import KERNEL, UPSTREAM

# Inputs per cell unless --cases: small, for a table of many cells (a trace of an old paged
# class under the Triton interpreter takes seconds); the case targets are cheap.
CASES = {"extend": 100, "decode": 100}
TRACE_CASES = 10
TIMEOUT = 60.0  # per input: old releases launch Triton kernels, interpreted on CPU


class HistoryError(ValueError):
    """A history command line that cannot run; one line."""


@dataclass(frozen=True)
class Options:
    releases: tuple[Release, ...]
    impls: tuple[str, ...] = ()       # classes to run, `entry` or `target/entry`; () = every one
    cases: int | None = None
    seed: int = 0
    timeout: float = TIMEOUT
    jobs: int = 1
    results: Path = results.DEFAULT
    json: str | None = None           # a file, or "-" for stdout
    picture: Path | None = None       # default: beside the results file
    find_links: str | None = None     # pip --find-links: wheels already on disk
    rerun: bool = False               # run every cell asked, whatever the results file has
    findings: Path | None = findings.DEFAULT  # saved findings, <package>-<version>/ each; None: none


def entries(package: str) -> list[tuple[str, str]]:
    """(target, entry) of every catalogue entry that needs `package` (kernels included)."""
    return [(name, impl.name) for name, target in TARGETS.items()
            for impl in target.catalogue.implementations if impl.requires == package
            and impl.kind in (UPSTREAM, KERNEL)]


def classes(package: str, wanted: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(target, entry) of every upstream class of `package`, or of those `wanted` by name
    (`entry` or `target/entry`; a kernel entry only when named)."""
    kinds = {(t.name, i.name): i.kind for t in TARGETS.values()
             for i in t.catalogue.implementations}
    if not wanted:
        return [pair for pair in entries(package) if kinds[pair] == UPSTREAM]
    return [(t, i) for t, i in entries(package) if {i, f"{t}/{i}"} & set(wanted)]


def plan(options: Options) -> list[Cell]:
    packages = sorted({r.package for r in options.releases})
    known = {n for p in packages for t, i in entries(p) for n in (i, f"{t}/{i}")}
    names = sorted({i for p in packages for _, i in entries(p)})
    unknown = [name for name in options.impls if name not in known]
    if unknown:
        raise HistoryError(f"--impl {unknown[0]}: no class of {' or '.join(packages)} by that "
                           f"name (known: {', '.join(names)}, or target/entry)")
    cells = []
    for release in options.releases:
        for target, impl in classes(release.package, options.impls):
            cases = options.cases or CASES.get(target, TRACE_CASES)
            cells.append(Cell(release, target, impl, cases, options.seed, options.timeout))
    if not cells:
        raise HistoryError(f"--impl {' '.join(options.impls)}: none of them is a class of "
                           f"{' or '.join(packages)}")
    return cells


def history(options: Options, out=None, err=None) -> int:
    """Exit status: 0 every cell has a verdict, 1 a cell could not run (an error), 130 stopped."""
    out, err = out or sys.stdout, err or sys.stderr
    cells = plan(options)
    records = results.load(options.results)
    todo = [cell for cell in cells if options.rerun or not results.done(records, cell.key)]
    # A cell done before whose saved findings changed (or were never replayed): the replay alone.
    todo += [cell for cell in cells if cell not in todo and _replay_due(cell, records, options)]
    if todo:  # what every release imports beside itself (transformers, ...): the lock's pins
        upstream_cache.fetch(lambda line: print(line, file=err, flush=True))
    base = Path(options.results).parent
    say = _Printer(err)
    say(f"history: {len(cells)} cells ({len(cells) - len(todo)} done before, in "
        f"{options.results}); {len({c.release for c in todo})} releases to run, "
        f"{options.jobs} at a time; logs and findings under {base}")
    appender = results.Appender(options.results)
    running: dict[Cell, object] = {}
    status = 0
    try:
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            try:
                _submit(todo, options, base, records, appender, running, pool, say)
                pool.shutdown(wait=True)
            except KeyboardInterrupt:
                status = INTERRUPTED
                say("history: stopped; the cells in flight are stopped and left for a rerun")
                pool.shutdown(wait=False, cancel_futures=True)
                for process in list(running.values()):
                    _stop(process)
                pool.shutdown(wait=True)
    finally:
        appender.close()
    _report(cells, records, options, out, say)
    if status == 0 and any((records.get(c.key) or {}).get("status") == ERROR for c in cells):
        status = 1
    return status


def _submit(todo, options, base, records, appender, running, pool, say) -> None:
    numbered = {cell: number for number, cell in enumerate(todo, 1)}
    lock = threading.Lock()

    def finished(cell, record):
        with lock:
            if record.get("reason") == "interrupted":
                return  # a rerun runs it
            records[cell.key] = record
            if record["status"] != ERROR:
                appender.add(record)
            say(f"[{numbered[cell]}/{len(todo)}] {progress(cell, record)}")

    def one(cell, folder):
        logs = base / "logs" / f"{cell.release.package}-{cell.release.version}"
        corpus = base / "corpus" / f"{cell.release.package}-{cell.release.version}"
        started = lambda process: running.__setitem__(cell, process)  # noqa: E731
        record = records.get(cell.key) if results.done(records, cell.key) and \
            not options.rerun else None
        if record is None:
            record = run_cell(cell, folder, corpus, logs / f"{cell.target}-{cell.impl}.log",
                              started=started)
            record["folder"] = str(folder)
        else:
            record = dict(record)  # done before: its saved findings alone run
        paths = findings.files(options.findings, cell)
        if paths and record["status"] not in (ERROR, UNSUPPORTED):
            replayed = findings.replay(cell, folder, paths,
                                       logs / f"{cell.target}-{cell.impl}.replay.log", started)
            if replayed.get("status") != "interrupted":
                record["replayed"] = replayed
        running.pop(cell, None)
        finished(cell, record)

    for release in dict.fromkeys(cell.release for cell in todo):
        mine = [cell for cell in todo if cell.release == release]
        try:
            folder = releases.install(release, options.find_links, say)
        except ReleaseError as error:
            for cell in mine:
                finished(cell, {"key": cell.key, "status": ERROR, "reason": str(error)})
            continue
        for cell in mine:
            pool.submit(one, cell, folder)


def _replay_due(cell: Cell, records: dict, options: Options) -> bool:
    record = results.done(records, cell.key)
    paths = findings.files(options.findings, cell)
    return bool(record and paths and record["status"] != UNSUPPORTED and
                (record.get("replayed") or {}).get("files") != findings.names(paths))


def progress(cell: Cell, record: dict) -> str:
    head = f"{cell.release} {cell.name}: {record['status']}"
    counts = record.get("counts") or {}
    if record["status"] == AGREE and counts:
        head += f" ({counts['agree']} agree, {counts['outside']} outside of {counts['inputs']})"
    elif record["status"] in (UNSUPPORTED, ERROR):
        head += f": {record.get('reason', '')}"
    elif record.get("findings"):
        more = len(record["findings"]) - 1
        what = record["findings"][0]["what"]
        head = head.removesuffix(": crashed") if what.startswith("crashed") else head
        head += f": {what}" + (f" (+{more} more)" if more else "")
    seconds = record.get("seconds")
    head += f"  {seconds:.0f} s" if seconds is not None else ""
    return head + (f"; {findings.summary(record['replayed'])}" if record.get("replayed") else "")


def _stop(process) -> None:
    try:
        process.send_signal(signal.SIGINT)  # kvfuzz diff saves its findings and ends
    except OSError:
        pass


def _report(cells, records, options, out, say) -> None:
    import json

    text = table.render(cells, records)
    if options.json:
        document = json.dumps(table.as_json(cells, records), indent=1, sort_keys=True)
        if options.json == "-":
            print(document, file=out)
            out = sys.stderr
        else:
            Path(options.json).write_text(document + "\n")
            say(f"history: the report as JSON in {options.json}")
    print(text, file=out)
    where = options.picture or Path(options.results).with_suffix(".png")
    drawn = picture.draw(cells, records, where)
    say(f"history: the heat map in {drawn}" if drawn else
        "history: no picture (matplotlib is not installed)")


class _Printer:
    def __init__(self, stream):
        self.stream = stream

    def __call__(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
