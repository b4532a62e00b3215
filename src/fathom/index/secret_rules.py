"""The secret scanner's rule file: one entry per family of key material, as data.

Each rule is a name (what a redaction marker and a `Finding` say), the keywords that must occur
in a text before its regular expression runs (a plain substring test, so ordinary code pays a
few `in` checks per rule), the expression, and where the families come from: they follow the
families of gitleaks' published default rule file (`config/gitleaks.toml`; `follows` names the
rule ids), written here from each provider's documented key shape (fixed prefix, alphabet,
length). A family gitleaks does not carry (Discord webhooks, Azure storage keys, PuTTY keys,
OpenRouter keys) is marked so. Keeping up means comparing this table with that file: a new
family is one more entry here and one more planted key and near miss in
`tests/index/secret_fixtures.py`, which the tests require of every rule.

What a rule matches is what gets redacted: the named group `secret` when the expression has
one (the token of a webhook URL, the key of a connection string), else the whole match; a rule
with an `end` extends its match to the end marker of its block (a private key's
`-----END ... PRIVATE KEY-----`), whatever lies between.

It owns the table only: the scan, the generic `password = "..."` judgement and the redaction
live in `fathom.index.secrets`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    keywords: tuple[str, ...]  # the expression runs only when one of these is in the text
    pattern: re.Pattern[str]
    lowered: bool = False  # keywords are looked up in the lower-cased text
    end: re.Pattern[str] | None = None  # a block's end marker: the match extends to it
    follows: tuple[str, ...] = ()  # the gitleaks rule ids of the family; () where it has none


def rule(
    name: str,
    keywords: tuple[str, ...],
    pattern: str,
    *,
    flags: int = 0,
    lowered: bool = False,
    end: str | None = None,
    follows: tuple[str, ...] = (),
) -> Rule:
    return Rule(
        name, keywords, re.compile(pattern, flags), lowered, re.compile(end) if end else None, follows
    )


# Between a key block's BEGIN marker and its body: escaped or real line breaks, the quotes,
# `+` and `.` of string literals joined across lines (`"-----BEGIN...-----\n"\n  "MIIE..."`),
# line continuations, and PEM headers (`Proc-Type: 4,ENCRYPTED`).
_JOIN = r"""(?:\\[nr]|\s|["'`+.,\\]|[A-Za-z-]+:[^\n]{0,200}\n)*"""

RULES: tuple[Rule, ...] = (
    # The block's body must follow: code that only names the marker (a PEM parser) is no key.
    rule(
        "private-key",
        ("PRIVATE KEY",),
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----" + _JOIN + r"[A-Za-z0-9+/]{40,}",
        end=r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----",
        follows=("private-key",),
    ),
    rule(
        "putty-private-key",
        ("PuTTY-User-Key-File",),
        r"PuTTY-User-Key-File-\d: [\s\S]{0,400}Private-Lines: \d+",
        end=r"Private-MAC: [0-9a-fA-F]+",
    ),
    # AWS's own published example key ends in EXAMPLE: documentation, let through.
    rule(
        "aws-access-key",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b(?<!EXAMPLE)",
        follows=("aws-access-token",),
    ),
    rule(
        "gcp-service-account", ("private_key_id",), r"\"private_key_id\"\s*:\s*\"(?P<secret>[0-9a-f]{40})\""
    ),
    rule("google-api-key", ("AIza",), r"\bAIza[0-9A-Za-z_-]{35}\b", follows=("gcp-api-key",)),
    rule(
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b",
        follows=("github-pat", "github-oauth", "github-app-token", "github-refresh-token"),
    ),
    rule(
        "github-fine-grained-token",
        ("github_pat_",),
        r"\bgithub_pat_[A-Za-z0-9_]{60,255}\b",
        follows=("github-fine-grained-pat",),
    ),
    rule(
        "gitlab-token",
        ("glpat-", "glptt-", "gldt-", "glrt-", "GR1348941"),
        r"\b(?:glpat-|glptt-|gldt-|glrt-|GR1348941)[A-Za-z0-9_-]{20,}",
        follows=("gitlab-pat",),
    ),
    rule(
        "slack-token",
        ("xox",),
        r"\bxox[abposre]-(?:\d+-)+[A-Za-z0-9-]{10,}",
        follows=("slack-bot-token", "slack-user-token"),
    ),
    rule(
        "slack-app-token", ("xapp-",), r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}", follows=("slack-app-token",)
    ),
    rule(
        "slack-webhook",
        ("hooks.slack.com",),
        r"hooks\.slack\.com/(?:services|workflows)/(?P<secret>[A-Za-z0-9+/]{20,})",
        follows=("slack-webhook-url",),
    ),
    rule(
        "stripe-key",
        ("_live_", "_test_", "_prod_"),
        r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{20,}\b",
        follows=("stripe-access-token",),
    ),
    rule("anthropic-key", ("sk-ant-",), r"\bsk-ant-[A-Za-z0-9_-]{40,}", follows=("anthropic-api-key",)),
    rule("openrouter-key", ("sk-or-",), r"\bsk-or-v\d-[A-Za-z0-9]{32,}"),
    rule(
        "openai-key",
        ("sk-",),
        r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"
        r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}|[A-Za-z0-9]{48}\b)",
        follows=("openai-api-key",),
    ),
    rule("huggingface-token", ("hf_",), r"\bhf_[A-Za-z0-9]{34,}\b", follows=("huggingface-access-token",)),
    rule("npm-token", ("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b", follows=("npm-access-token",)),
    rule("pypi-token", ("pypi-AgE",), r"\bpypi-AgE[A-Za-z0-9_-]{50,}", follows=("pypi-upload-token",)),
    rule(
        "jwt",
        ("eyJ",),
        r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}",
        follows=("jwt",),
    ),
    # `SG.` + 22 + `.` + 43 characters of the URL-safe alphabet.
    rule(
        "sendgrid-key",
        ("SG.",),
        r"\bSG\.[A-Za-z0-9_-]{20,24}\.[A-Za-z0-9_-]{40,46}\b",
        follows=("sendgrid-api-token",),
    ),
    # An API key (`SK`) or account (`AC`) id is 32 hex digits after its prefix, a shape common
    # enough elsewhere that it counts only in a text that names Twilio.
    rule(
        "twilio-key", ("twilio",), r"\b(?:SK|AC)[0-9a-fA-F]{32}\b", lowered=True, follows=("twilio-api-key",)
    ),
    rule(
        "digitalocean-token",
        ("dop_v1_", "doo_v1_", "dor_v1_"),
        r"\bdo[por]_v1_[a-f0-9]{64}\b",
        follows=("digitalocean-pat", "digitalocean-access-token", "digitalocean-refresh-token"),
    ),
    # The URL is the credential: whoever has it can post. Its id is not secret, its token is.
    rule(
        "discord-webhook",
        ("discord.com/api/webhooks", "discordapp.com/api/webhooks"),
        r"discord(?:app)?\.com/api/webhooks/\d{15,25}/(?P<secret>[A-Za-z0-9_-]{50,100})",
    ),
    # Storage accounts' connection strings (`AccountKey=`, 88 base64 characters) and Service
    # Bus / Event Hubs' (`SharedAccessKey=`, 44).
    rule(
        "azure-storage-key",
        ("accountkey=", "sharedaccesskey="),
        r"(?:AccountKey|SharedAccessKey)=(?P<secret>[A-Za-z0-9+/]{40,100}={0,2})",
        flags=re.IGNORECASE,
        lowered=True,
    ),
)

# The two judged rules of `fathom.index.secrets`, beside the table's: a credential's name
# assigned a random-looking literal, and a password inside a URL.
ASSIGNED, URL_PASSWORD = "assigned-credential", "url-password"
NAMES: tuple[str, ...] = (*(r.name for r in RULES), ASSIGNED, URL_PASSWORD)
