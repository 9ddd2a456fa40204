"""Argument types and the parser class shared by the `kvfuzz` subcommands."""

from __future__ import annotations

import argparse
import re
import sys


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        print(f"kvfuzz: error: {message} (see kvfuzz --help)", file=sys.stderr)
        raise SystemExit(2)


def bounded(low: int, high: int, what: str):
    """An argument type: an integer in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what} in [{low:,}, {high:,}], got {text}")
        return value
    return parse


positive = bounded(1, 10**9, "a positive integer")  # --cases: past any run anyone waits for
jobs = bounded(1, 64, "a number of worker processes")  # each holds torch: ~250 MB
index = bounded(0, 2**62, "an input index")


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 86400], got {text}")
    return value


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def size(text: str) -> int:
    """Bytes from `4G`, `512M`, `1.5GiB`, `800MB` or a plain number of bytes (powers of 1024)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not found:
        raise argparse.ArgumentTypeError(f"expected a size such as 4G or 512M, got {text!r}")
    value = int(float(found[1]) * _UNITS[found[2].upper()])
    if not 64 << 20 <= value <= 1 << 50:
        raise argparse.ArgumentTypeError(f"expected a size from 64M up, got {text}")
    return value


class UsageError(ValueError):
    """A command line that cannot run (a missing device, an unwritable directory); one line."""


def check_device(name: str) -> None:
    """The torch device must exist here: otherwise every case would 'diverge' on it."""
    if name == "cpu":
        return
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as error:
        raise UsageError(f"--device {name}: {error}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0 or (device.index or 0) >= count:
            raise UsageError(f"--device {name}: this machine has {count} CUDA device(s)")
    elif device.type != "cpu":
        raise UsageError(f"--device {name}: only cpu and cuda devices are supported")


def duration(text: str) -> float:
    """'90', '90s', '10m', '1h', '1h30m' -> seconds."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text.strip())
    if not text.strip() or parts is None:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 10m or 1h, got {text!r}")
    hours, minutes, seconds = (int(p) if p else 0 for p in parts.groups())
    total = 3600 * hours + 60 * minutes + seconds
    if total < 1:
        raise argparse.ArgumentTypeError(f"duration must be at least 1 s, got {text!r}")
    return float(total)
