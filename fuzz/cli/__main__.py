import sys

from kvfuzz.fuzz.cli.main import main

sys.exit(main())
