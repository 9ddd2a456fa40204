"""`twice` for `kvfuzz mutate --also-run`'s tests: a function kvfuzz's mamba traces never call,
in a module that imports nothing, so the test command (a Python run once unmutated and once per
mutant) starts bare. From `mutate_fixture`, which imports torch, each run cost some 2 CPU s."""


def twice(value: int) -> int:
    return value * 2
