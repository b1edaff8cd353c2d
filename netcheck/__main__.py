import sys

from netcheck.cli import main

sys.exit(main())
