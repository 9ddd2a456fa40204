"""The released engines kvfuzz drives (SGLang and vLLM, pinned in `upstream.lock`), fetched into
kvfuzz's own cache folder and importable from there, without touching the user's environment.

`fetch()` runs `pip install --no-deps --target` of exactly the lock's pins into a temporary
folder beside the final one and renames it into place when pip succeeds, so an interrupted or
failed fetch leaves nothing half-installed. The folder's name carries the lock's hash: a
changed pin fetches anew and leaves the old folder alone. `activate()` appends the folder to
`sys.path` (after everything else: a package the user installed always wins), and kvfuzz calls
it when it is imported, so commands, worker processes, the Python API and the pytest plugin
all see the same engines. `KVFUZZ_CACHE` moves the cache; `KVFUZZ_UPSTREAM=off` ignores it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LOCK = Path(__file__).with_name("upstream.lock")
ENGINES = ("sglang", "vllm")


class FetchError(RuntimeError):
    """The engines could not be fetched (no registry, no disk); one line."""


def pins() -> list[str]:
    return [line.strip() for line in LOCK.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def pinned(package: str) -> str | None:
    """The release of `package` the lock pins (the one kvfuzz's adapters are written for)."""
    return next((pin.split("==")[1] for pin in pins() if pin.split("==")[0] == package), None)


def cache_root() -> Path:
    base = os.environ.get("KVFUZZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvfuzz")
    return Path(base).absolute()


def folder() -> Path:
    """Where the lock's pins live once fetched: named after the engines and the lock's hash."""
    engines = "+".join(p.replace("==", "-") for p in pins() if p.split("==")[0] in ENGINES)
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:12]
    return cache_root() / "upstream" / f"{engines}-{digest}"


def fetched() -> bool:
    return (folder() / ".complete").is_file()


def activate() -> bool:
    """Put the fetched engines on `sys.path` (last); whether they are there."""
    if os.environ.get("KVFUZZ_UPSTREAM") == "off" or not fetched():
        return False
    path = str(folder())
    if path not in sys.path:
        sys.path.append(path)
        importlib.invalidate_caches()  # a folder fetched by this process is looked at afresh
    return True


def installed() -> bool:
    """Whether both engines import (from the user's environment or the cache)."""
    return all(importlib.util.find_spec(name) is not None for name in ENGINES)


def fetch(progress=lambda line: None) -> Path:
    """The engines installed in the cache (a no-op when they are); `FetchError` in one line."""
    final = folder()
    if fetched():
        activate()
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    progress(f"fetching {' and '.join(p for p in pins() if p.split('==')[0] in ENGINES)} "
             f"with {len(pins()) - len(ENGINES)} packages they import into {final} "
             f"(once; about 1.5 GB, a minute or two)")
    staging = Path(tempfile.mkdtemp(prefix=".fetching-", dir=final.parent))
    log = staging.with_suffix(".log")
    try:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input",
                   "--disable-pip-version-check", "--target", str(staging), "-r", str(LOCK)]
        with open(log, "w") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise FetchError(f"pip could not install {LOCK.name} into the cache "
                             f"(exit {done.returncode}): {_last_error(log)}; full log {log}")
        (staging / ".complete").write_text("\n".join(pins()) + "\n")
        if final.exists():  # a stale, incomplete folder from a crash before the rename
            shutil.rmtree(final)
        os.rename(staging, final)
        log.unlink(missing_ok=True)
    except OSError as error:
        raise FetchError(f"cannot fetch into {final.parent}: {error.strerror or error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    activate()
    return final


def _last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
             if line.strip() and not line.startswith("WARNING: Location")]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]
