"""Upstream tests that ship in no package, put where `bench/upstream_tests.py` runs them.

    python -m kvfuzz.bench.upstream_sources MANIFEST --from DIR [--to DIR]

SGLang's tests are in its GitHub repository only (its wheel and sdist have none). A manifest
(`upstream_tests/<name>.sources.json`) pins the files kvfuzz uses: repository, commit, and path
and sha256 of each. `--from` is a local copy holding those paths (a checkout of the repository
at that commit, or the files alone); each is copied into `--to` (default
`~/.cache/kvfuzz/sdist/<name>`, beside vLLM's extracted sdist) only if its sha256 is the one
pinned. Nothing is fetched: the files are upstream's code, kept out of kvfuzz's repository, and
the tests that need them skip (saying this command) where they are not there.

Exit 0 when every file is in place; 2, with one line naming the file, when one is missing or
differs."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

MANIFESTS = Path(__file__).parent / "upstream_tests"
SUFFIX = ".sources.json"


class SourceError(Exception):
    """A missing, unreadable or changed file, or a malformed manifest: one line."""


def manifest_path(name: str) -> Path:
    """A manifest by its name (`sglang-0.5.23-tests`) or its path."""
    path = Path(name)
    return path if path.suffix == ".json" else MANIFESTS / f"{name}{SUFFIX}"


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
        for entry in files:
            entry["path"], entry["sha256"]  # noqa: B018 - the fields every entry needs
    except FileNotFoundError:
        raise SourceError(f"{path}: no such manifest") from None
    except (ValueError, KeyError, TypeError) as error:
        raise SourceError(f"{path}: not a sources manifest ({type(error).__name__}: {error})") \
            from None
    return manifest


def default_destination(path: Path) -> Path:
    return Path.home() / ".cache" / "kvfuzz" / "sdist" / path.name.removesuffix(SUFFIX)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def materialise(manifest: Path, source: Path, destination: Path | None = None) -> Path:
    """Every file of `manifest` copied from `source` into `destination`, each checked against
    its pinned sha256 first (nothing is copied when one is missing or differs)."""
    entries = read_manifest(manifest)["files"]
    destination = destination or default_destination(manifest)
    for entry in entries:
        found = source / entry["path"]
        if not found.is_file():
            raise SourceError(f"{found}: missing (the manifest {manifest.name} needs it)")
        digest = sha256(found)
        if digest != entry["sha256"]:
            raise SourceError(f"{found}: sha256 {digest[:16]}..., the manifest pins "
                              f"{entry['sha256'][:16]}... (commit {entry.get('commit', '?')})")
    for entry in entries:
        target = destination / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / entry["path"], target)
    return destination


def in_place(manifest: Path, destination: Path | None = None) -> bool:
    """Whether every file of `manifest` is in `destination`, as pinned (the tests that need
    them skip otherwise)."""
    destination = destination or default_destination(manifest)
    try:
        return all((destination / e["path"]).is_file()
                   and sha256(destination / e["path"]) == e["sha256"]
                   for e in read_manifest(manifest)["files"])
    except SourceError:
        return False


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kvfuzz.bench.upstream_sources",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", help="a name (sglang-0.5.23-tests) or a .sources.json path")
    parser.add_argument("--from", dest="source", required=True, type=Path,
                        help="a local copy holding the manifest's paths")
    parser.add_argument("--to", type=Path, default=None,
                        help="where to put them (default ~/.cache/kvfuzz/sdist/NAME)")
    args = parser.parse_args(argv)
    try:
        path = manifest_path(args.manifest)
        destination = materialise(path, args.source.expanduser(), args.to)
    except SourceError as error:
        print(f"upstream_sources: {error}", file=sys.stderr)
        return 2
    print(f"{len(read_manifest(path)['files'])} files, sha256 checked -> {destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
