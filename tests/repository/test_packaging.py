"""Every module is installed: setup.py finds the packages (the top-level folders map to `kvfuzz.*`
subpackages). An editable install finds unlisted ones anyway, so a module missing from a plain
`pip install .` would work in this checkout and break for users: the wheel is what is checked."""

import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT
from tests.repository.import_graph import LAYERS


def test_setup_finds_every_layer():
    layers = {name for name in LAYERS if name != "kvfuzz"}
    text = (ROOT / "setup.py").read_text()
    assert all(f'"{name}"' in text for name in layers), layers


@pytest.mark.slow  # builds the wheel
def test_the_wheel_holds_every_module(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(ROOT)], check=True,
                   capture_output=True, cwd=tmp_path)
    [wheel] = tmp_path.glob("kvfuzz-*.whl")
    installed = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"kvfuzz/{path.relative_to(ROOT / folder)}" if folder == "kvfuzz" else
                f"kvfuzz/{folder}/{path.relative_to(ROOT / folder)}"
                for folder in LAYERS for path in (ROOT / folder).rglob("*.py")
                if "__pycache__" not in path.parts}
    expected.add("kvfuzz/impl/upstream.lock")  # what `kvfuzz upstream fetch` installs
    assert sorted(expected - installed) == [], "modules a plain pip install leaves out"
