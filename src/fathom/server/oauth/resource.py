"""This server as an OAuth 2.1 protected resource: its metadata document (RFC 9728) and the
`WWW-Authenticate` challenge of a 401 that points a client at it, as the MCP authorization
specification asks, so a client that speaks only OAuth finds the authorization server by itself.

It owns the resource URL (`FATHOM_OAUTH_RESOURCE`: the MCP endpoint's public URL, which is
also what access tokens must name as their audience), where the metadata lives (RFC 9728's
well-known URL for that resource, and the root one), and the challenge's parameters.

It refuses to check tokens (`access_tokens`, `introspection`) or to speak for the
authorization server: it names it, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fathom.errors import ConfigError

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def check_resource_url(url: str) -> str:
    """The resource URL, if it is an absolute http(s) URL without a fragment (RFC 8707)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise ConfigError(
            f"FATHOM_OAUTH_RESOURCE must be this server's MCP URL as clients reach it, e.g. "
            f"https://fathom.example.com/mcp (absolute http(s), no fragment); got {url!r}"
        )
    return url


@dataclass(frozen=True)
class ResourceServer:
    """The protected resource: its URL, its authorization servers and the scopes it asks for."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes: tuple[str, ...] = ()

    @property
    def _parts(self) -> tuple[str, str]:
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")

    @property
    def metadata_url(self) -> str:
        """RFC 9728 section 3.1: the well-known path, then the resource's own path."""
        origin, path = self._parts
        return origin + WELL_KNOWN + path

    def metadata_paths(self) -> list[str]:
        """The paths that serve the metadata on this server: the resource's and the root one (a
        client that knows only the server's origin asks there)."""
        path = self._parts[1]
        return list(dict.fromkeys([WELL_KNOWN + path, WELL_KNOWN]))

    def metadata(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
            "resource_name": "Fathom",
        }
        if self.scopes:
            document["scopes_supported"] = list(self.scopes)
        return document

    def challenge(
        self, *, error: str | None = None, description: str | None = None, realm: str = "fathom"
    ) -> str:
        """A `WWW-Authenticate: Bearer` value: the realm, `resource_metadata`, the scopes, and
        an RFC 6750 error when a token was sent and refused."""
        params = [f'realm="{realm}"', f'resource_metadata="{self.metadata_url}"']
        if self.scopes:
            params.append(f'scope="{" ".join(self.scopes)}"')
        if error:
            params.append(f'error="{error}"')
        if description:
            params.append(f'error_description="{_quoted(description)}"')
        return "Bearer " + ", ".join(params)


def _quoted(text: str) -> str:
    """RFC 6750's error_description: printable ASCII without `"` or `\\`."""
    return "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "'" if c == '"' else " " for c in text)
