"""`python -m fathom.cli`: the `fathom` command."""

import sys

from fathom.cli import app

sys.exit(app())
