"""`python -m fathom`: the same command line as `fathom`, for an environment whose scripts
folder is not on PATH."""

from fathom.cli import app

app(prog_name="fathom")
