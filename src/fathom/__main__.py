"""`python -m fathom`: the same command line as `fathom`, for an environment whose scripts
folder is not on PATH."""

import sys

from fathom.cli.launch import main

sys.exit(main(prog_name="fathom"))  # `fathom mcp` and the spawned daemon: the fast path
