"""The releases a history run drives, and each one installed in a folder of its own.

A release is installed the way a user tries one by hand (`docs/release-history.md`): its wheel
fetched with `pip download --no-deps`, then `pip install --no-deps --target` into
`<kvfuzz cache>/history/<package>-<version>`, never into the user's environment, and never with
its dependencies (pip would resolve torch): everything else it imports comes from kvfuzz's
upstream cache (`impl/upstream_cache.py`), as it does for the pinned release. Like that cache, a
folder is staged beside its final place and renamed into it when pip succeeds, so an
interrupted install leaves nothing half-installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvfuzz.impl import upstream_cache

# Every release on PyPI in the range the adapters read (issue 22: SGLang 0.5.10-0.5.23, vLLM
# 0.20.0-0.33.0), as of 2026-12; post releases and patch releases left out (a range keeps one
# release per minor version).
DEFAULT = {
    "sglang": tuple(f"0.5.{minor}" for minor in range(10, 24)),
    "vllm": tuple(f"0.{minor}.0" for minor in range(20, 34)),
}
_VERSION = re.compile(r"\d+(\.\d+){1,3}((a|b|rc|\.post|\.dev)\d+)?")


class ReleaseError(ValueError):
    """A release list that cannot be read, or a release that cannot be installed; one line."""


@dataclass(frozen=True, order=True)
class Release:
    package: str   # "sglang" or "vllm"
    version: str

    def __str__(self) -> str:
        return f"{self.package} {self.version}"

    @property
    def key(self) -> tuple:
        """Sorts 0.5.9 before 0.5.10."""
        return (self.package, tuple(int(part) for part in re.findall(r"\d+", self.version)))

    @property
    def pinned(self) -> bool:
        """The release kvfuzz's lock pins: its folder is kvfuzz's upstream cache."""
        return upstream_cache.pinned(self.package) == self.version


def parse_list(package: str, text: str) -> list[Release]:
    """`--sglang 0.5.17,0.5.20` (or `default`, or a range `0.5.17-0.5.20` of the default list)."""
    releases = []
    for item in (part.strip() for part in text.split(",")):
        if item == "default":
            releases += [Release(package, v) for v in DEFAULT[package]]
        elif "-" in item and all(_VERSION.fullmatch(end) for end in item.split("-", 1)):
            low, high = (Release(package, end).key for end in item.split("-", 1))
            chosen = [Release(package, v) for v in DEFAULT[package]
                      if low <= Release(package, v).key <= high]
            if not chosen:
                raise ReleaseError(f"--{package} {text}: no release of the default list lies "
                                   f"in {item}")
            releases += chosen
        elif _VERSION.fullmatch(item):
            releases.append(Release(package, item))
        else:
            raise ReleaseError(f"--{package} {text}: {item!r} is not a release (expected e.g. "
                               f"{DEFAULT[package][0]}, a range {DEFAULT[package][0]}-"
                               f"{DEFAULT[package][-1]}, or default)")
    return sorted(dict.fromkeys(releases), key=lambda r: r.key)


def folder(release: Release) -> Path:
    """Where `release` lives once installed (the upstream cache for the pinned release)."""
    if release.pinned:
        return upstream_cache.folder()
    return upstream_cache.cache_root() / "history" / f"{release.package}-{release.version}"


def installed(release: Release) -> bool:
    if release.pinned:
        return upstream_cache.fetched()
    return (folder(release) / ".complete").is_file()


def install(release: Release, find_links: str | None = None,
            progress=lambda line: None) -> Path:
    """`release` in its folder (a no-op when it is there); `ReleaseError` in one line."""
    final = folder(release)
    if installed(release):
        return final
    if release.pinned:
        try:
            return upstream_cache.fetch(progress)
        except upstream_cache.FetchError as error:
            raise ReleaseError(str(error)) from None
    final.parent.mkdir(parents=True, exist_ok=True)
    wheels = final.parent / "wheels"
    pin = f"{release.package}=={release.version}"
    progress(f"installing {pin} (--no-deps) into {final}")
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        links = ["--find-links", find_links] if find_links else []
        _pip(["download", "--no-deps", "--only-binary", ":all:", *links, "-d", str(wheels),
              pin], f"download {pin}")
        wheel = _wheel(wheels, release)
        _pip(["install", "--no-deps", "--target", str(staging), str(wheel)], f"install {wheel.name}")
        (staging / ".complete").write_text(pin + "\n")
        if final.exists():  # a stale folder from a crash before the rename
            shutil.rmtree(final)
        os.rename(staging, final)
    except OSError as error:
        raise ReleaseError(f"cannot install {pin} into {final}: "
                           f"{error.strerror or error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _wheel(wheels: Path, release: Release) -> Path:
    name = release.package.replace("-", "_")
    found = sorted(wheels.glob(f"{name}-{release.version}-*.whl"))
    if not found:
        raise ReleaseError(f"pip downloaded no wheel of {release.package}=={release.version} "
                           f"into {wheels}")
    return found[-1]


def _pip(arguments: list[str], what: str) -> None:
    command = [sys.executable, "-m", "pip", *arguments, "--no-input",
               "--disable-pip-version-check", "--quiet"]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        lines = [line.strip() for line in done.stdout.splitlines()
                 if line.strip() and not line.startswith("WARNING")]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["no output"]
        raise ReleaseError(f"pip could not {what} (exit {done.returncode}): {errors[-1][:300]}")
