"""Who may call the server's admin API: admin bearer tokens and scrape-only tokens, kept as
hashes under the data dir, and the checks the admin routes and `/metrics` depend on.

It owns `AdminAuth` (`admin.json`, or `FATHOM_ADMIN_TOKEN` at start) and `ScrapeAuth`
(`metrics.json`, `FATHOM_METRICS_TOKEN`: a Prometheus server never holds a token that can push
a key or change a policy). It never keeps a token itself, only its hash, and it imports nothing
of the server but its answers (`server.answers`), so the request guard and the MCP endpoint
can check a token without importing the admin API.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Callable
from pathlib import Path

from fastapi import Request

from fathom.config import atomic_write_text
from fathom.errors import ConfigError
from fathom.fleet.auth import hash_token
from fathom.server.answers import bearer_token, no_token_configured, unauthorized


class AdminAuth:
    """Admin bearer tokens, as hashes in `admin.json`."""

    FILENAME = "admin.json"

    def __init__(self, data_dir: Path, *, tokens: tuple[str, ...] = ()):
        self.path = Path(data_dir) / self.FILENAME
        self._hashes: list[str] = []
        if self.path.exists():
            try:
                self._hashes = list(json.loads(self.path.read_text()).get("token_hashes", []))
            except (ValueError, OSError, AttributeError) as exc:
                raise ConfigError(f"{self.path} is not a valid token record; fix or remove it") from exc
        added = [hash_token(t) for t in tokens if hash_token(t) not in self._hashes]
        if added:
            self._hashes += added
            self._save()

    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps({"token_hashes": self._hashes}, indent=2))

    @property
    def configured(self) -> bool:
        return bool(self._hashes)

    PREFIX = "fa"

    def issue(self) -> str:
        token = f"{self.PREFIX}_{secrets.token_urlsafe(32)}"
        self._hashes.append(hash_token(token))
        self._save()
        return token

    def replace(self, token: str | None = None) -> str | None:
        """Rotation: every token known so far stops working. `token` (one the operator set in the
        environment) becomes the only one; without it a fresh one is issued and returned, to be
        shown once."""
        self._hashes = [hash_token(token)] if token else []
        if token:
            self._save()
            return None
        return self.issue()

    def check(self, token: str | None) -> bool:
        if not token:
            return False
        h = hash_token(token)
        return any(hmac.compare_digest(h, x) for x in self._hashes)


class ScrapeAuth(AdminAuth):
    """Scrape-only tokens (`FATHOM_METRICS_TOKEN`): they open `/metrics` and nothing else."""

    FILENAME = "metrics.json"
    PREFIX = "fs"  # (`fm_` is an MCP token's)


def admin_dependency(auth: AdminAuth) -> Callable[[Request], None]:
    """The check every admin endpoint depends on."""

    def require_admin(request: Request) -> None:
        if not auth.configured:
            raise no_token_configured()
        if not auth.check(bearer_token(request)):
            raise unauthorized()

    return require_admin


def scrape_dependency(auth: AdminAuth, scrape: ScrapeAuth | None) -> Callable[[Request], None]:
    """`/metrics`: the admin token, or a scrape-only token."""

    def require_scraper(request: Request) -> None:
        token = bearer_token(request)
        if auth.check(token) or (scrape is not None and scrape.check(token)):
            return
        if not auth.configured and not (scrape is not None and scrape.configured):
            raise no_token_configured()
        raise unauthorized()

    return require_scraper
