import sys

from kvfuzz.fuzz.cli.main import command

sys.exit(command())
