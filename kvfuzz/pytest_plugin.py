"""kvfuzz inside another project's pytest (registered through the `pytest11` entry point).

- `--kvfuzz-corpus DIR` (or `corpus = "DIR"` under `[tool.kvfuzz]` in pyproject.toml): every
  *.json file under DIR is collected as a test item named after the file, one per implementation
  of its target, replayed in a supervised worker process. A failing item's message is the
  divergence report with its replay line.
- `--kvfuzz-impl NAME|module:attr` (repeatable; or `impl = [...]` under `[tool.kvfuzz]`): the
  implementations; each applies to the files of its target. `--kvfuzz-timeout SECONDS`.
- The `kvfuzz` fixture: `kvfuzz.diff(target)`, `.replay(path)`, `.check(target, input)`,
  `.assert_agrees(target)`, with the configured implementations as defaults.

Without a corpus and an implementation configured, the plugin changes nothing.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kvfuzz import api
from kvfuzz.fuzz.engine import corpus as corpus_files
from kvfuzz.fuzz.engine.isolation import DEFAULT_TIMEOUT, Checker
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.engine.target import DIVERGE

SETTINGS = pytest.StashKey[dict]()
CHECKER = pytest.StashKey[Checker]()


def pytest_addoption(parser) -> None:
    group = parser.getgroup("kvfuzz", "kvfuzz: corpus files as tests")
    group.addoption("--kvfuzz-corpus", metavar="DIR",
                    help="collect every *.json under DIR as test items (one per implementation "
                         "of its target); default: [tool.kvfuzz] corpus in pyproject.toml")
    group.addoption("--kvfuzz-impl", action="append", default=[], metavar="NAME|module:attr",
                    help="implementation to replay the corpus against (repeatable; default: "
                         "[tool.kvfuzz] impl)")
    group.addoption("--kvfuzz-timeout", type=float, default=None, metavar="SECONDS",
                    help=f"per input (default {DEFAULT_TIMEOUT:g})")


def pytest_configure(config) -> None:
    table = _pyproject(config.rootpath).get("tool", {}).get("kvfuzz", {})
    impls = config.getoption("kvfuzz_impl") or table.get("impl", [])
    from_command_line = config.getoption("kvfuzz_corpus")
    corpus = from_command_line or table.get("corpus")
    settings = {"impl": [impls] if isinstance(impls, str) else list(impls),
                "timeout": config.getoption("kvfuzz_timeout") or table.get("timeout",
                                                                          DEFAULT_TIMEOUT),
                "corpus": (config.rootpath / corpus).resolve() if corpus else None}
    config.stash[SETTINGS] = settings
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS and not from_command_line
    if settings["corpus"] is not None and not explicit and settings["corpus"].is_dir():
        config.args.append(str(settings["corpus"]))  # collected too, wherever it lies


def pytest_unconfigure(config) -> None:
    checker = config.stash.get(CHECKER, None)
    if checker is not None:
        checker.close()


def pytest_collect_file(file_path: Path, parent):
    root = parent.config.stash[SETTINGS]["corpus"]
    if root is not None and file_path.suffix == ".json" and file_path.is_relative_to(root):
        return CorpusFile.from_parent(parent, path=file_path)
    return None


class CorpusFile(pytest.File):
    def collect(self):
        target, item = corpus_files.load(self.path)  # a bad file: a collection error naming it
        settings = self.config.stash[SETTINGS]
        impls = api.applicable(target.name, settings["impl"])
        if not impls:
            yield CorpusItem.from_parent(self, name=target.name, target=target, item=item,
                                         impl=None)
        for impl in impls:
            yield CorpusItem.from_parent(self, name=impl.name, target=target, item=item,
                                         impl=impl)


class CorpusItem(pytest.Item):
    def __init__(self, *, target, item, impl, **kwargs):
        super().__init__(**kwargs)
        self.target, self.input, self.impl = target, item, impl

    def runtest(self) -> None:
        if self.impl is None:
            pytest.skip(f"no --kvfuzz-impl (or [tool.kvfuzz] impl) for target "
                        f"{self.target.name!r}")
        stash = self.config.stash
        checker = stash.setdefault(CHECKER, Checker(stash[SETTINGS]["timeout"]))
        outcome = checker.check(self.target, self.input, self.impl)
        if outcome.status == DIVERGE:
            outcome.divergence.saved_path = str(self.path)
            raise Mismatch(outcome.divergence)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, Mismatch):
            return str(excinfo.value)  # the report, replay line included; no traceback
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"kvfuzz {self.target.name} {self.name}"


class Fixture:
    """kvfuzz's API with the project's configured implementations as defaults."""

    def __init__(self, settings: dict):
        self.settings = settings

    def _impl(self, target: str, impl):
        if impl is not None:
            return impl
        configured = api.applicable(target, self.settings["impl"])
        if not configured:
            pytest.fail(f"no implementation of {target!r} configured (--kvfuzz-impl or "
                        f"[tool.kvfuzz] impl)", pytrace=False)
        return configured

    def diff(self, target: str, impl=None, **options):
        options.setdefault("timeout", self.settings["timeout"])
        return api.diff(target, self._impl(target, impl), **options)

    def replay(self, paths=None, impl=None, **options):
        options.setdefault("timeout", self.settings["timeout"])
        return api.replay(paths or self.settings["corpus"], impl or self.settings["impl"],
                          **options)

    def check(self, target: str, item, impl=None):
        return api.check(target, item, self._impl(target, impl)[0] if impl is None else impl)

    def assert_agrees(self, target: str, impl=None, item=None, **options):
        if item is None:
            options.setdefault("timeout", self.settings["timeout"])
        api.assert_agrees(target, self._impl(target, impl), item, **options)


@pytest.fixture
def kvfuzz(request) -> Fixture:
    """kvfuzz's Python API, defaulting to the implementations configured for this project."""
    return Fixture(request.config.stash[SETTINGS])


def _pyproject(root: Path) -> dict:
    try:
        return tomllib.loads((root / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
