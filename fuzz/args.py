"""Argument types and the parser class shared by the `kvfuzz` subcommands."""

from __future__ import annotations

import argparse
import re
import sys


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        print(f"kvfuzz: error: {message} (see kvfuzz --help)", file=sys.stderr)
        raise SystemExit(2)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


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
