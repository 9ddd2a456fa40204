"""The `kvfuzz` command (`main.py`); `python -m kvfuzz.fuzz.cli` runs it too."""

from kvfuzz.fuzz.cli.main import main

__all__ = ["main"]
