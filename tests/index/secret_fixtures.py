"""Fake credentials of every rule family the scanner knows, built at test time from pieces
(and a seeded generator), so this repository holds no literal that a secret scanner (or a
forge's push protection) would flag; a near miss for each family; and a project folder holding
them: credential files by name (left out whole), and code and config with keys embedded beside
ordinary functions (indexed with the keys redacted).

    from tests.index.secret_fixtures import fake_keys, near_misses, write_secret_project
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def private_key_block(rng: random.Random, kind: str = "RSA ") -> str:
    body = "\n".join(_rand(rng, B64, 64) for _ in range(8))
    marker = "PRIVATE" + " KEY-----"
    return f"-----BEGIN {kind}{marker}\n{body}\n-----END {kind}{marker}\n"


@dataclass(frozen=True)
class Planted:
    """One fake key of a rule family: `text`, the literal as written in a file (a key, a URL,
    a connection string), and `secret`, the part of it that must never be served. `context`:
    a line the family needs beside it (Twilio's ids count only in a text naming Twilio)."""

    text: str
    secret: str = ""
    context: str = ""

    def __post_init__(self) -> None:
        if not self.secret:
            object.__setattr__(self, "secret", self.text)


def _two_parts(rng: random.Random) -> str:
    return _rand(rng, ALNUM + "_-", 22) + "." + _rand(rng, ALNUM + "_-", 43)


def fake_keys(seed: int = 27) -> dict[str, Planted]:
    """One fake key per provider rule (`secret_rules.RULES`), by the rule's name."""
    rng = random.Random(seed)
    azure_key = _rand(rng, B64, 86) + "=="
    discord_token = _rand(rng, ALNUM + "_-", 68)
    keys = {
        "private-key": private_key_block(rng),
        "putty-private-key": "PuTTY-User-Key-" + "File-3: ssh-rsa\nEncryption: none\nComment: ops\n"
        "Public-Lines: 2\n"
        + _rand(rng, B64, 64)
        + "\n"
        + _rand(rng, B64, 40)
        + "\nPrivate-Lines: 2\n"
        + _rand(rng, B64, 64)
        + "\n"
        + _rand(rng, B64, 44)
        + "\nPrivate-MAC: "
        + _rand(rng, HEX, 64)
        + "\n",
        "aws-access-key": "AK" + "IA" + _rand(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16),
        "google-api-key": "AI" + "za" + _rand(rng, ALNUM + "_-", 35),
        "github-token": "gh" + "p_" + _rand(rng, ALNUM, 36),
        "github-fine-grained-token": "github" + "_pat_" + _rand(rng, ALNUM + "_", 82),
        "gitlab-token": "glp" + "at-" + _rand(rng, ALNUM, 20),
        "slack-token": "xo"
        + "xb-"
        + _rand(rng, string.digits, 12)
        + "-"
        + _rand(rng, string.digits, 13)
        + "-"
        + _rand(rng, ALNUM, 24),
        "slack-app-token": "xa"
        + "pp-1-A"
        + _rand(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 10)
        + "-"
        + _rand(rng, string.digits, 13)
        + "-"
        + _rand(rng, HEX, 64),
        "stripe-key": "sk" + "_live_" + _rand(rng, ALNUM, 24),
        "openai-key": "sk-" + "proj-" + _rand(rng, ALNUM + "_-", 64),
        "anthropic-key": "sk-" + "ant-api03-" + _rand(rng, ALNUM + "_-", 93) + "AA",
        "openrouter-key": "sk-" + "or-v1-" + _rand(rng, HEX, 64),
        "huggingface-token": "h" + "f_" + _rand(rng, ALNUM, 34),
        "npm-token": "np" + "m_" + _rand(rng, ALNUM, 36),
        "pypi-token": "pypi-" + "AgE" + _rand(rng, ALNUM + "_-", 70),
        "jwt": _b64url({"alg": "HS256", "typ": "JWT"})
        + "."
        + _b64url({"sub": "1234567890", "name": "Ops", "iat": 1700000000})
        + "."
        + _rand(rng, ALNUM + "_-", 43),
        "sendgrid-key": "S" + "G." + _two_parts(rng),
        "twilio-key": "S" + "K" + _rand(rng, HEX, 32),
        "digitalocean-token": "do" + "p_v1_" + _rand(rng, HEX, 64),
    }
    planted = {rule: Planted(key) for rule, key in keys.items()}
    planted["twilio-key"] = Planted(keys["twilio-key"], context="# the Twilio client's API key")
    hook_id = _rand(rng, string.digits, 19)
    planted["slack-webhook"] = Planted(
        *_secret_in(
            "https://hooks." + "slack.com/services/{}",
            "T0" + _rand(rng, ALNUM, 8) + "/B0" + _rand(rng, ALNUM, 8) + "/" + _rand(rng, ALNUM, 24),
        )
    )
    planted["discord-webhook"] = Planted(
        *_secret_in("https://disc" + "ord.com/api/webhooks/" + hook_id + "/{}", discord_token)
    )
    planted["azure-storage-key"] = Planted(
        *_secret_in(
            "DefaultEndpointsProtocol=https;AccountName=opsstore;Account" + "Key={};"
            "EndpointSuffix=core.windows.net",
            azure_key,
        )
    )
    planted["gcp-service-account"] = Planted(*_secret_in('"private_key_id": "{}"', _rand(rng, HEX, 40)))
    return planted


def _secret_in(template: str, secret: str) -> tuple[str, str]:
    return template.format(secret), secret


def near_misses(seed: int = 28) -> dict[str, tuple[str, str]]:
    """For every rule (the provider rules and the two judged ones), a text that looks close to
    its family and must not be flagged, and the path it is scanned under."""
    rng = random.Random(seed)
    hexes = _rand(rng, HEX, 64)
    marker = "PRIVATE" + " KEY-----"
    return {
        "private-key": (
            f'HEADER = "-----BEGIN RSA {marker}\\n"\nif line == HEADER:\n    start = i\n',
            "pem.py",
        ),
        "putty-private-key": ("# a PuTTY-User-Key-File-3 header starts the file\n", "ppk.py"),
        "aws-access-key": ('key = "AK' + 'IAIOSFODNN7EXAMPLE"\n', "docs.py"),  # AWS's published example
        "google-api-key": ('key = "AI' + 'za-is-too-short"\n', "maps.py"),
        "github-token": ('sample = "gh' + "p_" + _rand(rng, ALNUM, 20) + '"\n', "gh.py"),
        "github-fine-grained-token": ('prefix = "github' + '_pat_"\n', "gh.py"),
        "gitlab-token": ('prefix = "glp' + 'at-"\n', "gl.py"),
        "slack-token": ("xo" + "xb-tokens start with xoxb\n", "notes.txt"),
        "slack-app-token": ("xa" + "pp-1-tokens are app-level\n", "notes.txt"),
        "slack-webhook": ("see https://hooks." + "slack.com/services/ for the URL\n", "README.md"),
        "stripe-key": ('mode = "sk' + '_live_"\n', "pay.py"),
        "anthropic-key": ('prefix = "sk-' + 'ant-"\n', "llm.py"),
        "openrouter-key": ('prefix = "sk-' + 'or-v1-"\n', "llm.py"),
        "openai-key": ('flag = "sk-' + 'learn"\n', "ml.py"),
        "huggingface-token": ('name = "h' + 'f_transfer"\n', "hub.py"),
        "npm-token": ('name = "np' + 'm_config_cache"\n', "npm.js"),
        "pypi-token": ('prefix = "pypi-' + 'AgE"\n', "upload.py"),
        "jwt": ('header = "ey' + 'JhbGciOiJIUzI1NiJ9"\n', "auth.py"),
        "sendgrid-key": ("version = S" + "G.version.major\n", "sg.py"),
        # Twilio's shape with no word of Twilio in the text: a hash, not a key.
        "twilio-key": ('digest = "S' + "K" + _rand(rng, HEX, 32) + '"\n', "cache.py"),
        "digitalocean-token": ('sample = "do' + "p_v1_" + hexes[:40] + '"\n', "do.py"),
        "discord-webhook": ("post to https://disc" + "ord.com/api/webhooks/<id>/<token>\n", "README.md"),
        "azure-storage-key": (
            "conn = 'DefaultEndpointsProtocol=https;AccountName=x;Account" + "Key=<key>'\n",
            "storage.py",
        ),
        "gcp-service-account": ('{"private_key_id": "<key id>"}\n', "sa_template.json"),
        "assigned-credential": ('password: "change' + 'me-password-123"\n', "config/database.yml"),
        "url-password": ("--to postgresql://user:password@host:port/database\n", "cli.py"),
    }


def random_password(seed: int = 5) -> str:
    rng = random.Random(seed)
    return _rand(rng, ALNUM, 10) + "#" + _rand(rng, string.digits, 3) + "!"


def config_password(seed: int = 6) -> str:
    """A password with `$` and `!` in it, as YAML quotes one (`Hx7$kL9!...`)."""
    rng = random.Random(seed)
    return _rand(rng, ALNUM, 3) + "$" + _rand(rng, ALNUM, 3) + "!" + _rand(rng, ALNUM, 6) + "7"


def json_password(seed: int = 7) -> str:
    """A password with `@` and parentheses in it (`P@ss(w0rd)2024...`)."""
    rng = random.Random(seed)
    return (
        _rand(rng, ALNUM, 1)
        + "@"
        + _rand(rng, ALNUM, 2)
        + "("
        + _rand(rng, ALNUM, 4)
        + ")"
        + _rand(rng, string.digits, 4)
        + _rand(rng, ALNUM, 4)
    )


def split_pem_python(rng: random.Random) -> tuple[str, str]:
    """A private key written as Python string literals joined across lines, as code that
    embeds one often has it, and the longest body line (what must not be served)."""
    block = private_key_block(rng)
    lines = block.strip("\n").split("\n")
    literal = "\n".join(f'    "{line}\\n"' for line in lines)
    return f"SIGNING_KEY = (\n{literal}\n)\n", max(lines[1:-1], key=len)


def split_pem_js(rng: random.Random) -> tuple[str, str]:
    """The same, as JavaScript concatenated with `+`."""
    block = private_key_block(rng)
    lines = block.strip("\n").split("\n")
    literal = " +\n".join(f'  "{line}\\n"' for line in lines)
    return f"const signingKey =\n{literal};\n", max(lines[1:-1], key=len)


@dataclass(repr=False)
class SecretProject:
    """What `write_secret_project` planted: `by_name` {path: a text only it holds} for the
    credential files left out whole; `redacted` {path: [the secrets in it]} and `beside`
    {path: the function or word beside them} for the files indexed with their secrets
    redacted; `plain` {path: a word only it holds} for ordinary files."""

    by_name: dict[str, str] = field(default_factory=dict)
    redacted: dict[str, list[str]] = field(default_factory=dict)
    beside: dict[str, str] = field(default_factory=dict)
    plain: dict[str, str] = field(default_factory=dict)

    @property
    def secrets(self) -> list[str]:
        """Every text that must never be served."""
        return [*self.by_name.values(), *(s for found in self.redacted.values() for s in found)]

    @property
    def credential_files(self) -> list[str]:
        return sorted(self.by_name)

    @property
    def redacted_files(self) -> list[str]:
        return sorted(self.redacted)

    def __repr__(self) -> str:  # what a failing assertion prints: paths, never a secret
        return (
            f"SecretProject(credential files {self.credential_files}, redacted files "
            f"{self.redacted_files}, plain files {sorted(self.plain)})"
        )


def assert_serves_none(answer: str, secrets: Sequence[str], where: str) -> None:
    """Fail if `answer` holds any of `secrets`, naming each by its index: a failing test
    quotes no secret (no traceback, whose locals would)."""
    leaked = [i for i, secret in enumerate(secrets) if secret in answer]
    if leaked:
        pytest.fail(f"{where}: secrets #{leaked} served", pytrace=False)


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_secret_project(root: Path, seed: int = 27) -> SecretProject:
    """A project with every credential file kind by name, code and config files with keys of
    every rule family embedded beside an ordinary function (or setting), and ordinary files."""
    rng = random.Random(seed + 1)
    out = SecretProject()
    _credential_files(root, rng, random_password(seed), fake_keys(seed), out)
    for rule, key in fake_keys(seed).items():
        module = rule.replace("-", "_")
        fn = f"publish_with_{module}"
        if rule == "gcp-service-account":
            pem = private_key_block(rng, "").replace("\n", "\\n")
            rel = f"config/gcp_{module}.json"
            text = "{" + key.text + ', "private_key": "' + pem + '", "project_id": "' + fn + '"}\n'
            secrets = [key.secret, pem.split("\\n")[1]]
        elif rule in ("private-key", "putty-private-key"):
            rel = f"src/keys_{module}.py"
            text = f'KEY = """{key.text}"""\n\n\ndef {fn}():\n    return KEY\n'
            secrets = [max(key.text.splitlines()[1:-1], key=len)]
        else:
            rel = f"src/keys_{module}.py"
            context = f"{key.context}\n" if key.context else ""
            text = f'{context}value = "{key.text}"\n\n\ndef {fn}():\n    return value\n'
            secrets = [key.secret]
        _put(root, rel, text)
        out.redacted[rel], out.beside[rel] = secrets, fn
    _redacted_forms(root, rng, seed, out)
    _plain_files(root, out)
    return out


def _credential_files(
    root: Path, rng: random.Random, pw: str, keys: dict[str, Planted], out: SecretProject
) -> None:
    """Credential files by name: their contents may be unremarkable, the name says it."""

    def put(rel: str, text: str, needle: str) -> None:
        _put(root, rel, text)
        out.by_name[rel] = needle

    db_pw = "DATABASE_" + "PASSWORD=" + pw
    put(".env", f"{db_pw}\nDEBUG=0\n", db_pw)
    put(".env.production", f"STRIPE_KEY={keys['stripe-key'].text}\n", keys["stripe-key"].text)
    put("id_rsa", private_key_block(rng), "PRIVATE KEY")
    put("deploy/id_ed25519", private_key_block(rng, "OPENSSH "), "OPENSSH PRIVATE")
    put("id_dsa", private_key_block(rng, "DSA "), "DSA PRIVATE")
    put("id_ecdsa", private_key_block(rng, "EC "), "EC PRIVATE")
    put("certs/server.key", private_key_block(rng), "PRIVATE KEY")
    put("certs/server.pem", private_key_block(rng), "PRIVATE KEY")
    put("certs/client.p12", "bundle-" + _rand(rng, ALNUM, 20) + "\n", "bundle-")
    put("certs/client.pfx", "bundle-" + _rand(rng, ALNUM, 20) + "\n", "bundle-")
    put("vault.kdbx", "kdbx-" + _rand(rng, ALNUM, 20) + "\n", "kdbx-")
    auth = "_auth" + "Token=" + keys["npm-token"].text
    put(".npmrc", f"//registry.npmjs.org/:{auth}\n", auth)
    put(
        ".pypirc",
        "[pypi]\nusername = __token__\npassword = pypi-" + _rand(rng, ALNUM, 60) + "\n",
        "username = __token__",
    )
    put(".netrc", f"machine api.example.org login ops password {pw}\n", f"password {pw}")
    put(".git-credentials", f"https://ops:{pw}@git.example.org\n", pw)
    put(
        ".aws/credentials",
        "[default]\naws_access_key_id = "
        + keys["aws-access-key"].text
        + "\naws_secret_access_key = "
        + _rand(rng, B64, 40)
        + "\n",
        keys["aws-access-key"].text,
    )
    put(".ssh/config", "Host prod\n  IdentityFile ~/.ssh/prod_key\n", "IdentityFile")
    put(".gnupg/gpg.conf", "default-key 0x" + _rand(rng, HEX.upper(), 16) + "\n", "default-key")
    put(
        "credentials.json",
        json.dumps({"installed": {"client_secret": "GOCSPX-" + _rand(rng, ALNUM, 28)}}),
        "GOCSPX-",
    )
    put(
        "keys/service-account.json",
        json.dumps({"type": "service_account", "client_email": "ops@proj.iam"}),
        "ops@proj.iam",
    )
    put("terraform.tfstate", json.dumps({"version": 4, "outputs": {"db_password": {"value": pw}}}), pw)
    put(
        "terraform.tfstate.backup",
        json.dumps({"version": 4, "serial": 7, "lineage": "tfstate-lineage"}),
        "tfstate-lineage",
    )
    put("secrets.yaml", f"api:\n  signing: {pw}\n", f"signing: {pw}")
    put("deploy/secrets.yml", "db:\n  user: ops-admin-user\n", "ops-admin-user")


def _redacted_forms(root: Path, rng: random.Random, seed: int, out: SecretProject) -> None:
    """Keys in the forms the scanner once missed: quoted config literals with `$` and
    parentheses, a key split into string literals, more than one token of a family."""

    def put(rel: str, text: str, secrets: list[str], beside: str) -> None:
        _put(root, rel, text)
        out.redacted[rel], out.beside[rel] = secrets, beside

    pw, yaml_pw, json_pw = random_password(seed), config_password(seed), json_password(seed)
    put(
        "config/database.yml",
        f'production:\n  adapter: postgresql\n  password: "{yaml_pw}"\n  pool_plainly_sized: 5\n',
        [yaml_pw],
        "pool_plainly_sized",
    )
    put(
        "config/app.json",
        json.dumps({"password": json_pw, "region": "region-plainly-named"}, indent=2),
        [json_pw],
        "region-plainly-named",
    )
    client_secret = _rand(rng, ALNUM, 30) + "9"
    put(
        "deploy/app.yaml",
        f"service:\n  client_secret: {client_secret}\n  replicas_plainly: 2\n",
        [client_secret],
        "replicas_plainly",
    )
    put(
        "web/settings.js",
        f'export const api = {{ apiKey: "{pw}" }};\n\nexport function settingsPlainly() {{}}\n',
        [pw],
        "settingsPlainly",
    )
    text, body = split_pem_python(rng)
    put(
        "src/signing_split.py",
        text + "\n\ndef upload_report_to_bucket(report):\n    return SIGNING_KEY, report\n",
        [body],
        "upload_report_to_bucket",
    )
    text, body = split_pem_js(rng)
    put(
        "web/signing_split.js",
        text + "\nexport function signReportPlainly(report) {\n  return report;\n}\n",
        [body],
        "signReportPlainly",
    )
    oauth = "do" + "o_v1_" + _rand(rng, HEX, 64)
    refresh = "do" + "r_v1_" + _rand(rng, HEX, 64)
    app_hook = "https://disc" + "ordapp.com/api/webhooks/" + _rand(rng, string.digits, 18) + "/"
    app_token = _rand(rng, ALNUM + "_-", 68)
    account = "A" + "C" + _rand(rng, HEX, 32)
    put(
        "src/more_tokens.py",
        "from twilio.rest import Client\n\n"
        f'DO_OAUTH = "{oauth}"\nDO_REFRESH = "{refresh}"\nHOOK = "{app_hook}{app_token}"\n'
        f'ACCOUNT = "{account}"\n\n\ndef notify_channel_plainly(message):\n    return Client(ACCOUNT), message\n',
        [oauth, refresh, app_token, account],
        "notify_channel_plainly",
    )


def _plain_files(root: Path, out: SecretProject) -> None:
    """Ordinary files, with a word only each holds: served."""
    plain = {
        "src/app.py": (
            'def add_numbers_plainly(a, b):\n    """Add two numbers."""\n'
            '    password = os.environ["DB_PASSWORD"]\n    return a + b\n',
            "add_numbers_plainly",
        ),
        "src/settings.py": (
            "SECRET_KEY = settings_from_env()\nPASSWORD_MIN = 12\napi_key: str | None = None\n",
            "settings_from_env",
        ),
        "web/main.js": (
            "export function renderGreetingPlainly(name) {\n  return `hi ${name}`;\n}\n",
            "renderGreetingPlainly",
        ),
        "deploy/app_plain.yaml": (
            "service:\n  replicas: 3\n  password: ${DB_PASSWORD}\n"
            "  token: changeme\n  rolloutPlainly: true\n",
            "rolloutPlainly",
        ),
        "README.md": ("# Plainly\n\nCopy `.env.example` and set `DATABASE_PASSWORD`.\n", "Plainly"),
    }
    for rel, (text, word) in plain.items():
        _put(root, rel, text)
        out.plain[rel] = word
