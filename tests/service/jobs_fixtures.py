"""Projects for the job tests: `write_big_project` writes one whose index takes long enough
to be stopped mid-run.
"""

from __future__ import annotations

from pathlib import Path


def write_big_project(root: Path, files: int = 60, functions: int = 6) -> Path:
    for i in range(files):
        path = root / f"pkg{i % 6}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "\n\n".join(
                f'def step_{i}_{j}(value):\n    """Stage {j} of pipeline {i}: scale and shift."""\n'
                f"    total = value * {j + 1} + {i}\n    return total - {j}\n"
                for j in range(functions)
            )
        )
    return root
