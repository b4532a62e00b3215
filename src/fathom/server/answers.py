"""The HTTP answers every part of the server gives: the one shape of a refusal, the status of a
typed failure, validation problems without their input, and the answers to a missing or wrong
token.

It owns these shapes (`{"detail": {"message", "problems"}}`: each problem names what is wrong
and the fix) and the body limits of the routes that read their body by hand, so the request
guard, the admin API, the MCP endpoint and the token routes answer alike. It imports nothing of
the server: every other server module may use it, and it sits at the bottom of their imports.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from fathom.config import RoutingStateDamaged
from fathom.errors import ConfigError, FathomError
from fathom.fleet.protocol import describe

MAX_KEY_BODY = 64 * 1024
MAX_POLICY_BODY = 64 * 1024


def bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def unauthorized() -> HTTPException:
    return HTTPException(
        401,
        "admin token missing or wrong: send `Authorization: Bearer <admin token>` "
        "(the token `fathom server` printed once, or FATHOM_ADMIN_TOKEN)",
        headers={"WWW-Authenticate": "Bearer"},
    )


def no_token_configured() -> HTTPException:
    return HTTPException(
        503,
        "no admin token is configured: set FATHOM_ADMIN_TOKEN, or start "
        "`fathom server` once to have one issued",
    )


def refusal(status: int, message: str, problems: list[str] | None = None) -> HTTPException:
    """The one shape of a refusal: a message and every problem (each with its fix)."""
    return HTTPException(status, {"message": message, "problems": list(problems or [message])})


def damaged(exc: RoutingStateDamaged) -> HTTPException:
    """A state file the server cannot read: 503 (the request was fine), naming the fix."""
    return refusal(503, str(exc), exc.problems)


def failure_status(exc: FathomError) -> int:
    """The HTTP status of a typed failure: the caller's mistake is 400, a request the current
    state cannot serve (no provider for the role's model, a locked or damaged project) 409,
    storage that cannot serve now (a full disk, a lost database) 503."""
    from fathom.errors import DiskFull, StoreLost, UnknownJob
    from fathom.index.store import DamagedProject, ProjectLocked, UnknownProject

    if isinstance(exc, (UnknownProject, UnknownJob)):
        return 404
    if isinstance(exc, (ProjectLocked, DamagedProject)):
        return 409
    if isinstance(exc, RoutingStateDamaged):
        return 503  # the server's own state file: the request was fine
    if isinstance(exc, ConfigError):
        return 400
    if isinstance(exc, (DiskFull, StoreLost)) or type(exc).__name__ == "StoreUnavailable":
        return 503
    return 409  # the request is fine but conflicts with the state (no provider serves it, ...)


def failure_response(exc: FathomError) -> JSONResponse:
    message = str(exc)
    return JSONResponse(
        status_code=failure_status(exc), content={"detail": {"message": message, "problems": [message]}}
    )


def describe_body(exc: ValidationError) -> str:
    """Field paths and messages without input values (the key must never be echoed)."""
    return "; ".join(body_problems(exc)[:5]) or describe(exc)


def body_problems(exc: ValidationError | Any) -> list[str]:
    """Each validation error as `field: message`, never with the input value."""
    errors = (
        exc.errors(include_input=False, include_url=False, include_context=False)
        if isinstance(exc, ValidationError)
        else exc.errors()
    )
    out = []
    for err in errors:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "body"
        out.append(f"{loc}: {err.get('msg', 'invalid')}")
    return out
