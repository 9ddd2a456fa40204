"""Builds `<fuzzer>_seed_corpus.zip` for each atheris target from the JSON corpus (OSS-Fuzz and
ClusterFuzzLite pick these up next to the fuzzer binaries).

    python -m kvfuzz.fuzz.campaign.seed_corpus --out "$OUT" [corpus/ ...]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import zipfile
from pathlib import Path

from kvfuzz.fuzz.campaign.specs import REPO, SPECS


def build(out: Path, corpus_dirs) -> dict[str, int]:
    """One zip per target whose corpus inputs encode to bytes; returns inputs per zip."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for spec in SPECS.values():
        seeds = list(spec.seeds([str(d) for d in corpus_dirs]))
        if not seeds:
            continue
        path = out / f"fuzz_{spec.name}_seed_corpus.zip"  # the fuzzer build.sh names so
        temporary = path.with_name(f".tmp-{path.name}")
        names = set()
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            for data in seeds:
                name = hashlib.sha1(data).hexdigest()  # libFuzzer's own naming: no duplicates
                if name not in names:
                    names.add(name)
                    archive.writestr(name, data)
        os.replace(temporary, path)
        written[path.name] = len(names)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="*", default=[str(REPO / "corpus")])
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    for name, count in build(args.out, args.corpus).items():
        print(f"{args.out / name}: {count} seed input(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
