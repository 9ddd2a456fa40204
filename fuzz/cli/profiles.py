"""`--profile NAME`, shared by `kvfuzz diff` and `kvfuzz mutate`: a target's generator profile
whose inputs alone run (`Target.alone`), checked before anything runs, and the profiles each
target knows, for the commands' help."""

from __future__ import annotations

from kvfuzz.fuzz.cli.args import UsageError
from kvfuzz.fuzz.targets import TARGETS


def known_profiles() -> str:
    """Each target's profiles, for `--help`: "kvmanager's profiles: 'scheduler', ..."."""
    return "; ".join(f"{name}'s profiles: {', '.join(map(repr, target.profiles()))}"
                     for name, target in TARGETS.items() if target.profiles())


def check_profile(target: str, profile: str | None) -> None:
    """`--profile` names a profile of the one target named (a `UsageError` otherwise)."""
    if profile is None:
        return
    if target == "all":
        raise UsageError(f"--profile {profile!r} names a profile of one target: kvfuzz diff "
                         f"TARGET --profile NAME")
    try:
        TARGETS[target].alone(profile)
    except ValueError as error:
        raise UsageError(f"--profile: {error}") from None
