"""`python -m perfsuite` runs the command line."""

import sys

from perfsuite.cli import main

sys.exit(main())
