"""The folder `kvfuzz mutate --also-run` puts first on the test command's PYTHONPATH: its
`sitecustomize` makes one module import from a mutated copy of its file (`also_run.py`)."""

import os

FOLDER = os.path.dirname(os.path.abspath(__file__))
