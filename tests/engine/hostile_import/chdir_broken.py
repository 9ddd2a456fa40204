"""Moves to / at import and is wrong on every batch of two requests or more: its findings must
land where the supervisor says (the --corpus it was given), whatever the worker's directory."""
import os

from kvfuzz.impl.paged.mutants import extend_owner_left_bisect as alloc_extend  # noqa: F401

os.chdir("/")
