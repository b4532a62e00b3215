"""The operator's cloud budget override, kept in `budget.json` under the data dir so a restart
keeps it. Only a number: nothing else of the budget is stored.
"""

from __future__ import annotations

import json
from pathlib import Path

from fathom.config import atomic_write_text
from fathom.errors import ConfigError


class BudgetRecord:
    """The operator's budget override, in `budget.json`, so a restart keeps it. Only a number."""

    FILENAME = "budget.json"

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / self.FILENAME

    def load(self) -> int | None:
        try:
            value = json.loads(self.path.read_text()).get("override")
        except FileNotFoundError:
            return None
        except (ValueError, OSError, AttributeError) as exc:
            raise ConfigError(f"{self.path} is not a valid budget record: {exc}; fix or remove it") from exc
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def save(self, override: int | None) -> None:
        atomic_write_text(self.path, json.dumps({"override": override}))
