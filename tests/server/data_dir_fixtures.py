"""What a data dir may hold at rest: `wider_than_private` lists every file under a folder
wider than 0600 and every folder wider than 0700.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def wider_than_private(root: Path) -> list[str]:
    """Every file under `root` wider than 0600 and every folder wider than 0700 (links aside)."""
    found = []
    for folder, _dirs, files in os.walk(root):
        for path, widest in [(folder, 0o700), *((os.path.join(folder, f), 0o600) for f in files)]:
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & ~widest:
                found.append(f"{oct(stat.S_IMODE(st.st_mode))} {os.path.relpath(path, root)}")
    return found
