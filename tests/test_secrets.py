"""Secrets stay out of the index: the scanner's rules, the walker's skip (by name and by
content, counted as `secret` and named by path), the take-back by a `.fathomignore` `!path`
line, and `fathom store verify` over an index written before the rule existed.

The fake keys are built at test time (tests/secret_fixtures.py): this file holds none.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import starlette
from typer.testing import CliRunner

import fathom
from fathom.cli import app
from fathom.config import Settings
from fathom.index import walker
from fathom.index.secrets import find_secret, scan, secret_by_name
from fathom.index.walker import SECRET, Selection, walk
from fathom.service import Fathom
from tests.fleet_fixtures import HashEmbedder
from tests.secret_fixtures import fake_keys, random_password, write_secret_project

runner = CliRunner()


def rules(text: str, path: str = "x.py") -> set[str]:
    return {f.rule for f in scan(text, path)}


# ---------------------------------------------------------------- the scanner


@pytest.mark.parametrize("rule", sorted(fake_keys()))
def test_each_rule_finds_its_key_and_says_where_never_what(rule: str):
    key = fake_keys()[rule]
    text = f"import os\n\n\nvalue = {json.dumps(key)}\n" if rule != "gcp-service-account" else \
        "{\n  \"type\": \"service_account\",\n  " + key + "\n}\n"
    findings = list(scan(text, "config/module.py"))
    assert rule in {f.rule for f in findings}, findings
    assert {f.line for f in findings if f.rule == rule} <= {3, 4}
    # A finding is a rule and a line: nothing of the key is in it.
    for f in findings:
        assert key[:12] not in repr(f) and key[-12:] not in repr(f)


@pytest.mark.parametrize("text, path", [
    ("password: {pw}\n", "config/database.yml"),
    ("DB_PASSWORD={pw}\n", "settings.env.txt"),
    ("db_password = \"{pw}\"\n", "app/settings.py"),
    ("{{\"client_secret\": \"{pw}\"}}\n", "oauth.json"),
    ("const cfg = {{ apiKey: '{pw}' }};\n", "web/cfg.js"),
    ("AWS_SECRET_ACCESS_KEY={pw}\n", "deploy/vars.sh"),
    ("url = \"postgresql://app:{pw}@db.internal/prod\"\n", "app/db.py"),
])
def test_a_credential_assigned_a_random_value_is_found(text: str, path: str):
    assert find_secret(text.format(pw=random_password()), path) is not None


@pytest.mark.parametrize("text, path", [
    ("password = os.environ[\"DB_PASSWORD\"]\n", "app.py"),
    ("password = \"\"\n", "app.py"),
    ("password=\"\"\n", ".envrc.txt"),
    ("password = \"changeme\"\n", "app.py"),
    ("password: changeme123\n", "config.yml"),
    ("token: ${GITHUB_TOKEN}\n", "ci.yml"),
    ("api_key: \"{{ vault_api_key }}\"\n", "deploy.yml"),
    ("secret_key = settings.SECRET_KEY\n", "app.py"),
    ("password = get_password(user)\n", "app.py"),
    ("password = new_password9\n", "app.py"),
    ("api_key: Optional[str] = None\n", "app.py"),
    ("token_type = \"bearer\"\n", "auth.py"),
    ("password_encryption = scram-sha-256\n", "postgresql.conf"),
    ("key = \"AKIAIOSFODNN7EXAMPLE\"\n", "docs.py"),  # AWS's own published example
    ("if line == \"-----BEGIN PRIVATE KEY-----\":\n    start = i\n", "pem.py"),
    ("--to postgresql://user:password@host:port/database\n", "cli.py"),
    ("token = \"<your-token-here>\"\n", "README.md"),
    ("# tokens: words+symbols are a lower bound\n", "tokens.py"),
    ("tokenizer_info_str = \"#version:\"\n", "convert.py"),
])
def test_ordinary_code_and_placeholders_are_not_secrets(text: str, path: str):
    assert find_secret(text, path) is None, list(scan(text, path))


def _flagged(folder: Path) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            try:
                text = path.read_text("utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if find_secret(text, name) is not None:
                out.append(str(path.relative_to(folder)))
    return out


def test_real_codebases_are_not_flagged():
    """Starlette as installed, and this project's own source: no file is a secret."""
    assert _flagged(Path(starlette.__file__).parent) == []
    assert _flagged(Path(fathom.__file__).parent) == []


@pytest.mark.parametrize("rel", [
    ".env", ".env.local", ".env.example", "prod.env", "id_rsa", "id_rsa.pub", "deploy/id_dsa",
    "id_ecdsa", "id_ed25519", "tls/server.key", "ca.pem", "client.p12", "client.pfx",
    "vault.kdbx", ".npmrc", ".pypirc", ".netrc", ".git-credentials", ".aws/config",
    "home/.aws/credentials", ".ssh/known_hosts", ".gnupg/pubring.kbx", "credentials.json",
    "credentials-prod.json", "service-account.json", "my-project-1a2b3c4d5e6f.json",
    "terraform.tfstate", "infra/terraform.tfstate.backup", "secrets.yaml", "config/secrets.yml",
])
def test_credential_files_by_name(rel: str):
    assert secret_by_name(rel)


@pytest.mark.parametrize("rel", [
    "app.py", "credentials.py", "auth/credentials.go", "environment.py", "env.py", "config.json",
    "package.json", "tsconfig.json", "README.md", "keys.py", "token.py", "secrets_test.py",
    "docs/keys.md", "terraform/main.tf",
])
def test_code_about_credentials_is_not_a_credential_file(rel: str):
    assert not secret_by_name(rel)


# ---------------------------------------------------------------- the walker


def test_the_walk_leaves_every_secret_out_named_by_path(tmp_path: Path):
    secret, served = write_secret_project(tmp_path / "p")
    result = walk(tmp_path / "p")
    assert sorted(f.path for f in result.files) == sorted(served)
    assert result.skipped[SECRET] == len(secret) and result.secrets == sorted(secret)
    for f in result.files:
        for needle in secret.values():
            assert needle not in f.text
    # The watcher's filter agrees for the files it can judge by name.
    selection = Selection(tmp_path / "p")
    assert not selection.admits(".env") and not selection.admits(".aws/credentials")
    assert selection.admits("src/app.py")


def test_only_a_fathomignore_line_naming_the_file_takes_it_back(tmp_path: Path):
    root = tmp_path / "p"
    secret, _ = write_secret_project(root)
    # Neither a folder's negation, nor a .gitignore negation, nor an include glob will do.
    (root / ".fathomignore").write_text("!config/\n!src/\n")
    (root / ".gitignore").write_text("!.env\n")
    result = walk(root, include=["**/*.py", ".env"])
    assert result.skipped[SECRET] == len(secret)

    (root / ".fathomignore").write_text("*.log\n!config/database.yml\n!/.env\n!src/keys_jwt.py\n")
    result = walk(root)
    kept = {f.path: f.text for f in result.files}
    assert {"config/database.yml", ".env", "src/keys_jwt.py"} <= set(kept)
    assert secret["config/database.yml"] in kept["config/database.yml"]
    assert result.skipped[SECRET] == len(secret) - 3
    assert "config/database.yml" not in result.secrets
    assert Selection(root).admits(".env") and Selection(root).taken_back("src/keys_jwt.py")
    assert not Selection(root).taken_back("src/keys_jwt_x.py")

    # A nested .fathomignore names files below it.
    (root / ".fathomignore").unlink()
    (root / "config" / ".fathomignore").write_text("!database.yml\n")
    assert "config/database.yml" in {f.path for f in walk(root).files}


def test_the_content_rule_is_asked_in_the_read_step(tmp_path: Path):
    """Every reader that goes through the walker's read gets the rule: `Survey.read`."""
    root = tmp_path / "p"
    (root / "src").mkdir(parents=True)
    key = fake_keys()["github-token"]
    (root / "src" / "client.py").write_text(f"TOKEN = '{key}'\n")
    (root / "src" / "plain.py").write_text("def f():\n    return 1\n")
    listed = walker.survey(root)
    read = {c.rel: listed.read(c) for c in listed.candidates}
    assert read["src/client.py"] is None and read["src/plain.py"] is not None
    assert listed.result.skipped[SECRET] == 1 and listed.result.secrets == ["src/client.py"]


# ---------------------------------------------------------------- store verify


def _service(data: Path) -> Fathom:
    return Fathom(Settings(data_dir=data), encoder=HashEmbedder(width=8))


def _cli(service: Fathom, *args: str):
    return runner.invoke(app, list(args), obj={"fathom": service}, env={"COLUMNS": "250"})


def _disk_holds(folder: Path, needle: str) -> list[str]:
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and raw in p.read_bytes()]


def test_store_verify_reports_and_repair_removes_secrets_indexed_by_an_older_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "p"
    secret, served = write_secret_project(root)
    (root / ".fathomignore").write_text("!src/keys_jwt.py\n")
    data = tmp_path / "data"
    # An older build: no rule by name, none by content.
    with monkeypatch.context() as old:
        old.setattr(walker, "secret_by_name", lambda rel: False)
        old.setattr(walker, "find_secret", lambda text, path="": None)
        result = _cli(_service(data), "index", str(root), "--project", "p")
        assert result.exit_code == 0, result.output
    aws = fake_keys()["aws-access-key"]
    assert _disk_holds(data / "lance", aws), "the old build indexed the key"

    result = _cli(_service(data), "store", "verify", "p")
    assert result.exit_code == 1, result.output
    assert "secrets" in result.output and ".aws/credentials" in result.output
    assert "config/database.yml" in result.output
    assert "src/keys_jwt.py" not in result.output  # taken back by the project: not a problem
    for needle in secret.values():
        assert needle not in result.output  # named by path, never quoted
    checks = asyncio.run(_service(data).verify_store("p"))
    found = {path for c in checks for p in c.problems if p.kind == "secrets" for path in p.paths}
    # (the old build left the certs/ files out too, as "data")
    assert found == {p for p in secret if not p.startswith("certs/")} - {"src/keys_jwt.py"}

    result = _cli(_service(data), "store", "verify", "p", "--repair")
    assert result.exit_code == 0, result.output
    assert "deleted" in result.output
    assert "no problems found" in _cli(_service(data), "store", "verify", "p").output
    # Gone from the disk too (LanceDB keeps deleted rows in old versions until collected).
    assert _disk_holds(data / "lance", aws) == []
    # What is not a secret is still there, and searchable.
    service = _service(data)
    hits = asyncio.run(service.search("add_numbers_plainly", project="p"))
    assert any(h.path == "src/app.py" for h in hits)
