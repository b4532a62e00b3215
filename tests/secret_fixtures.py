"""Fake credentials of every kind the walker must keep out, built at test time from pieces
(and a seeded generator), so this repository holds no literal that a secret scanner would
flag; and a project folder holding them, in credential files and embedded in code.

    from tests.secret_fixtures import fake_keys, write_secret_project
"""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

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


def fake_keys(seed: int = 27) -> dict[str, str]:
    """One fake key per content rule, by the rule's name."""
    rng = random.Random(seed)
    return {
        "private-key": private_key_block(rng),
        "aws-access-key": "AK" + "IA" + _rand(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16),
        "google-api-key": "AI" + "za" + _rand(rng, ALNUM + "_-", 35),
        "github-token": "gh" + "p_" + _rand(rng, ALNUM, 36),
        "github-fine-grained-token": "github" + "_pat_" + _rand(rng, ALNUM + "_", 82),
        "gitlab-token": "glp" + "at-" + _rand(rng, ALNUM, 20),
        "slack-token": "xo" + "xb-" + _rand(rng, string.digits, 12) + "-"
                       + _rand(rng, string.digits, 13) + "-" + _rand(rng, ALNUM, 24),
        "stripe-key": "sk" + "_live_" + _rand(rng, ALNUM, 24),
        "openai-key": "sk-" + "proj-" + _rand(rng, ALNUM + "_-", 64),
        "anthropic-key": "sk-" + "ant-api03-" + _rand(rng, ALNUM + "_-", 93) + "AA",
        "openrouter-key": "sk-" + "or-v1-" + _rand(rng, HEX, 64),
        "huggingface-token": "h" + "f_" + _rand(rng, ALNUM, 34),
        "npm-token": "np" + "m_" + _rand(rng, ALNUM, 36),
        "jwt": _b64url({"alg": "HS256", "typ": "JWT"}) + "."
               + _b64url({"sub": "1234567890", "name": "Ops", "iat": 1700000000}) + "."
               + _rand(rng, ALNUM + "_-", 43),
        "gcp-service-account": '"private_key_id": "' + _rand(rng, HEX, 40) + '"',
    }


def random_password(seed: int = 5) -> str:
    rng = random.Random(seed)
    return _rand(rng, ALNUM, 10) + "#" + _rand(rng, string.digits, 3) + "!"


def write_secret_project(root: Path, seed: int = 27) -> tuple[dict[str, str], dict[str, str]]:
    """A project with every credential file kind by name, code files with embedded keys of
    every kind, and ordinary files. Returns ({path: the secret it holds} for every file that
    must stay out, {path: a word only it holds} for the ordinary files that must be served)."""
    rng = random.Random(seed + 1)
    keys = fake_keys(seed)
    pw = random_password(seed)
    secret: dict[str, str] = {}

    def put(rel: str, text: str, needle: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        secret[rel] = needle

    # Credential files, by name (their contents may be unremarkable: the name says it).
    db_pw = "DATABASE_" + "PASSWORD=" + pw
    put(".env", f"{db_pw}\nDEBUG=0\n", db_pw)
    put(".env.production", f"STRIPE_KEY={keys['stripe-key']}\n", keys["stripe-key"])
    put("id_rsa", private_key_block(rng), "PRIVATE KEY")
    put("deploy/id_ed25519", private_key_block(rng, "OPENSSH "), "OPENSSH PRIVATE")
    put("id_dsa", private_key_block(rng, "DSA "), "DSA PRIVATE")
    put("id_ecdsa", private_key_block(rng, "EC "), "EC PRIVATE")
    put("certs/server.key", private_key_block(rng), "PRIVATE KEY")
    put("certs/server.pem", private_key_block(rng), "PRIVATE KEY")
    put("certs/client.p12", "bundle-" + _rand(rng, ALNUM, 20) + "\n", "bundle-")
    put("certs/client.pfx", "bundle-" + _rand(rng, ALNUM, 20) + "\n", "bundle-")
    put("vault.kdbx", "kdbx-" + _rand(rng, ALNUM, 20) + "\n", "kdbx-")
    auth = "_auth" + "Token=" + keys["npm-token"]
    put(".npmrc", f"//registry.npmjs.org/:{auth}\n", auth)
    put(".pypirc", "[pypi]\nusername = __token__\npassword = pypi-" + _rand(rng, ALNUM, 60) + "\n",
        "username = __token__")
    put(".netrc", f"machine api.example.org login ops password {pw}\n", f"password {pw}")
    put(".git-credentials", f"https://ops:{pw}@git.example.org\n", pw)
    put(".aws/credentials", "[default]\naws_access_key_id = " + keys["aws-access-key"]
        + "\naws_secret_access_key = " + _rand(rng, B64, 40) + "\n", keys["aws-access-key"])
    put(".ssh/config", "Host prod\n  IdentityFile ~/.ssh/prod_key\n", "IdentityFile")
    put(".gnupg/gpg.conf", "default-key 0x" + _rand(rng, HEX.upper(), 16) + "\n", "default-key")
    put("credentials.json", json.dumps({"installed": {"client_secret": "GOCSPX-" + _rand(rng, ALNUM, 28)}}),
        "GOCSPX-")
    put("keys/service-account.json", json.dumps({"type": "service_account", "client_email": "ops@proj.iam"}),
        "ops@proj.iam")
    put("terraform.tfstate", json.dumps({"version": 4, "outputs": {"db_password": {"value": pw}}}), pw)
    put("terraform.tfstate.backup", json.dumps({"version": 4, "serial": 7, "lineage": "tfstate-lineage"}),
        "tfstate-lineage")
    put("secrets.yaml", f"api:\n  signing: {pw}\n", f"signing: {pw}")
    put("deploy/secrets.yml", "db:\n  user: ops-admin-user\n", "ops-admin-user")
    # Credentials inside ordinary files: found by what they hold.
    put("config/database.yml", f"production:\n  adapter: postgresql\n  password: {pw}\n",
        f"password: {pw}")
    for rule, key in keys.items():
        module = rule.replace("-", "_")
        if rule == "private-key":
            put(f"src/keys_{module}.py", f'KEY = """{key}"""\n', key.splitlines()[1])
        elif rule == "gcp-service-account":
            text = "{" + key + ', "private_key": "' + private_key_block(rng, "").replace("\n", "\\n") + '"}'
            put(f"config/gcp_{module}.json", text, key)
        else:
            put(f"src/keys_{module}.py", f'value = "{key}"\n\n\ndef client():\n    return value\n', key)
    put("web/settings.js", f'export const api = {{ apiKey: "{pw}" }};\n', pw)
    put("deploy/app.yaml", f"service:\n  client_secret: {_rand(rng, ALNUM, 30)}9\n", "client_secret")

    # Ordinary files, with a word only each holds: served.
    plain = {
        "src/app.py": ("def add_numbers_plainly(a, b):\n    \"\"\"Add two numbers.\"\"\"\n"
                       "    password = os.environ[\"DB_PASSWORD\"]\n    return a + b\n", "add_numbers_plainly"),
        "src/settings.py": ("SECRET_KEY = settings_from_env()\nPASSWORD_MIN = 12\n"
                            "api_key: str | None = None\n", "settings_from_env"),
        "web/main.js": ("export function renderGreetingPlainly(name) {\n  return `hi ${name}`;\n}\n",
                        "renderGreetingPlainly"),
        "deploy/app_plain.yaml": ("service:\n  replicas: 3\n  password: ${DB_PASSWORD}\n"
                                  "  token: changeme\n  rolloutPlainly: true\n", "rolloutPlainly"),
        "README.md": ("# Plainly\n\nCopy `.env.example` and set `DATABASE_PASSWORD`.\n", "Plainly"),
    }
    served = {}
    for rel, (text, word) in plain.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        served[rel] = word
    return secret, served
