"""The packages, found rather than listed (pyproject.toml holds everything else): the
repository's top-level folders install as subpackages of `kvfuzz`, and every folder with an
`__init__.py` below them is a package, so a new target's folders need no entry anywhere."""

from setuptools import find_packages, setup

LAYERS = ("strategies", "oracle", "impl", "fuzz", "bench")

setup(
    package_dir={"kvfuzz": "kvfuzz", **{f"kvfuzz.{layer}": layer for layer in LAYERS}},
    packages=["kvfuzz", *(f"kvfuzz.{name}" for name in
                          find_packages(include=[f"{layer}*" for layer in LAYERS]))],
)
