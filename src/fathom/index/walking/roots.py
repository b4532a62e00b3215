"""The roots a walk may start from: system folders refused as a root (even through a link),
the allowed index roots as real paths, and a project folder that now resolves elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fathom.config import REFUSED_ROOTS
from fathom.errors import ConfigError


class RefusedRoot(ConfigError):
    def __init__(self, path: str, refused: str):
        self.path, self.refused = path, refused
        via = "" if os.path.realpath(path) == path else f" (it leads to {os.path.realpath(path)})"
        super().__init__(
            f"refusing to index {path}{via}: {refused} is a system folder, not a project. "
            f"Give the path of a project folder (the refused folders are set by "
            f"FATHOM_REFUSED_ROOTS)."
        )


def check_root(root: Path | str, refused: Iterable[str] = REFUSED_ROOTS) -> Path:
    """`root` resolved (links followed), or `RefusedRoot` when it is a system folder or lies
    inside one. `/` refuses only itself: every path lies under it."""
    given = str(root)
    real = Path(os.path.realpath(os.path.expanduser(given)))
    for folder in refused:
        base = Path(os.path.realpath(folder))
        if real == base or (base != Path(base.anchor) and base in real.parents):
            raise RefusedRoot(given, str(folder))
    return real


def resolve_roots(raw: Iterable[str | Path]) -> list[Path]:
    """The allowed index roots (FATHOM_INDEX_ROOTS), as real paths: a link out of a root is
    out."""
    return [Path(os.path.realpath(Path(r).expanduser())) for r in raw if str(r).strip()]


def under_roots(real: Path, roots: Iterable[Path]) -> bool:
    """Whether the real path `real` is one of `roots` (real paths) or lies inside one: the one
    test of "inside the index roots", for `index_project` and for every live sync."""
    return any(real == r or real.is_relative_to(r) for r in roots)


def root_moved(registered: Path | str, roots: Iterable[Path] = ()) -> str | None:
    """Why the folder a project was indexed from can no longer be read as that project, or
    None. `registered` is the real path it was indexed from (its record's root). A folder that
    now resolves elsewhere (replaced by a link, or a link on the way) is refused: following
    it would index another folder under the project's name, possibly one outside `roots`
    (the real index roots) that no token may index."""
    registered = Path(registered)
    try:
        real = Path(os.path.realpath(registered))
    except (OSError, RuntimeError, ValueError):
        return f"the project folder {registered} cannot be resolved"
    if real == registered:
        return None
    roots = list(roots)
    if under_roots(registered, roots) and not under_roots(real, roots):
        return (
            f"the project folder now resolves outside the index roots: {registered} leads to "
            f"{real}, and the roots are {', '.join(map(str, roots))}"
        )
    return f"the project folder now resolves to another folder: {registered} leads to {real}"
