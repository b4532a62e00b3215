"""`python -m fathom.cli`: the `fathom` command (`fathom mcp` on its fast path: `launch`)."""

import sys

from fathom.cli.launch import main

sys.exit(main())
