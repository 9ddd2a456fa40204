"""Every package folder is installed: pyproject.toml lists packages by name (the top-level folders
map to `kvfuzz.*` subpackages), and an editable install finds unlisted ones anyway, so a folder
missing from the list works in this checkout and breaks a plain `pip install .`."""

import tomllib

from tests.conftest import ROOT


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for name, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join((name, *relative.parts)))
    assert sorted(found - listed) == [], "package folders missing from pyproject.toml"
    assert sorted(listed - found) == [], "pyproject.toml lists packages that do not exist"
