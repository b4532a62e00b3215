"""Secrets stay out of the index: the scanner's rules (a planted key and a near miss for every
rule family), the generic rule judged by the kind of file, the redaction (values replaced,
every line where it was), the walker's skip of credential files by name (counted as `secret`,
named by path) and its redaction of key material in every other file (named in `redacted`), the
take-back by a `.fathomignore` `!path` line, and `fathom store verify` over an index written
before the rules existed.

The fake keys are built at test time (tests/index/secret_fixtures.py): this file holds none.
"""

from __future__ import annotations

import ast
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
from fathom.index.secret_rules import NAMES, RULES
from fathom.index.secrets import (
    Redacted,
    file_kind,
    find_secret,
    redact,
    scan,
    secret_by_name,
    secret_spans,
)
from fathom.index.walker import SECRET, Selection, read_one, walk
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import HashEmbedder
from tests.index.secret_fixtures import (
    assert_serves_none,
    config_password,
    fake_keys,
    json_password,
    near_misses,
    random_password,
    split_pem_js,
    split_pem_python,
    write_secret_project,
)

runner = CliRunner()


def rules(text: str, path: str = "x.py") -> set[str]:
    return {f.rule for f in scan(text, path)}


# ---------------------------------------------------------------- the rule families


def test_every_rule_family_has_a_planted_key_and_a_near_miss():
    """The rule file and the fixtures move together: a new family needs both."""
    assert sorted(fake_keys()) == sorted(r.name for r in RULES)
    assert sorted(near_misses()) == sorted(NAMES)


def _planted_text(rule: str) -> tuple[str, str]:
    key = fake_keys()[rule]
    if rule == "gcp-service-account":  # a key file's field: JSON, as the console writes it
        return '{\n  "type": "service_account",\n  ' + key.text + "\n}\n", "config/sa.json"
    context = key.context or "import os"
    return f"{context}\n\n\nvalue = {json.dumps(key.text)}\n", "config/module.py"


@pytest.mark.parametrize("rule", sorted(fake_keys()))
def test_each_rule_finds_its_key_and_says_where_never_what(rule: str):
    key = fake_keys()[rule]
    text, path = _planted_text(rule)
    findings = list(scan(text, path))
    assert rule in {f.rule for f in findings}, findings
    assert {f.line for f in findings if f.rule == rule} <= {3, 4}
    # A finding is a rule and a line: nothing of the key is in it.
    for f in findings:
        assert key.secret[:12] not in repr(f) and key.secret[-12:] not in repr(f)
    for span in secret_spans(text, path):
        assert key.secret[:12] not in repr(span)
    # Redacted: the secret is gone, the marker names the rule, every line is where it was.
    redacted = redact(text, path)
    assert_serves_none(redacted.text, [key.secret], rule)
    assert f"[REDACTED:{rule}]" in redacted.text
    assert rule in redacted.rules and redacted.text.count("\n") == text.count("\n")
    assert redacted.text.splitlines()[0] == text.splitlines()[0]


@pytest.mark.parametrize("rule", sorted(near_misses()))
def test_each_rule_passes_over_its_near_miss(rule: str):
    text, path = near_misses()[rule]
    assert list(scan(text, path)) == []
    assert redact(text, path).text == text


# ---------------------------------------------------------------- the generic rule


@pytest.mark.parametrize(
    "text, path",
    [
        ("password: {pw}\n", "config/database.yml"),
        ("DB_PASSWORD={pw}\n", "settings.env.txt"),
        ('db_password = "{pw}"\n', "app/settings.py"),
        ('{{"client_secret": "{pw}"}}\n', "oauth.json"),
        ("const cfg = {{ apiKey: '{pw}' }};\n", "web/cfg.js"),
        ("AWS_SECRET_ACCESS_KEY={pw}\n", "deploy/vars.sh"),
        ('url = "postgresql://app:{pw}@db.internal/prod"\n', "app/db.py"),
    ],
)
def test_a_credential_assigned_a_random_value_is_found(text: str, path: str):
    assert find_secret(text.format(pw=random_password()), path) is not None


@pytest.mark.parametrize(
    "text, path",
    [
        # A quoted literal in a config or data file is a literal, `$` and parentheses and all.
        ('production:\n  password: "{yaml}"\n', "config/database.yml"),
        ('{{\n  "password": "{json}"\n}}\n', "config/app.json"),
        ('[db]\npassword = "{yaml}"\n', "settings.ini"),
        ('db.password="{json}"\n', "app.properties"),
        ("[database]\npassword = '{json}'\n", "pyproject.toml"),
        ('DB_PASSWORD="{yaml}"\n', ".env.staging.txt"),
        ("DB_PASSWORD='{json}'\n", "prod.env"),
        # A placeholder word inside a random value does not make it a placeholder.
        ('password: "test{pw}"\n', "config/ci.yml"),
        ('api_key = "example-{pw}"\n', "app/client.py"),
    ],
)
def test_config_literals_and_values_holding_a_placeholder_word_are_found(text: str, path: str):
    text = text.format(yaml=config_password(), json=json_password(), pw=random_password())
    assert rules(text, path) == {"assigned-credential"}, text
    assert file_kind(path) in ("config", "code")


@pytest.mark.parametrize(
    "text, path",
    [
        ('password = os.environ["DB_PASSWORD"]\n', "app.py"),
        ('password = ""\n', "app.py"),
        ('password=""\n', ".envrc.txt"),
        ('password = "changeme"\n', "app.py"),
        ("password: changeme123\n", "config.yml"),
        ('password: "changeme123"\n', "config.yml"),
        ('password: "your-password-here"\n', "config.yml"),
        ('"api_key": "xxxxxxxxxxxxxxxx"\n', "settings.json"),
        ("token: ${GITHUB_TOKEN}\n", "ci.yml"),
        ('token: "${GITHUB_TOKEN}"\n', "ci.yml"),
        ('password: "$DB_PASSWORD"\n', "compose.yaml"),
        ('password: "%DB_PASSWORD%"\n', "deploy.yaml"),
        ('api_key: "{{ vault_api_key }}"\n', "deploy.yml"),
        ('password = "%(db_password)s"\n', "alembic.ini"),
        ('"bos_token": "<|endoftext|>"\n', "tokenizer_config.json"),
        ('"code": "self.tokens = min(self.capacity, self.tokens + 1)"\n', "probes.json"),
        ("secret_key = settings.SECRET_KEY\n", "app.py"),
        ("password = get_password(user)\n", "app.py"),
        ("password = new_password9\n", "app.py"),
        ("api_key: Optional[str] = None\n", "app.py"),
        ('token_type = "bearer"\n', "auth.py"),
        ("password_encryption = scram-sha-256\n", "postgresql.conf"),
        ("--to postgresql://user:password@host:port/database\n", "cli.py"),
        ('token = "<your-token-here>"\n', "README.md"),
        ("# tokens: words+symbols are a lower bound\n", "tokens.py"),
        ('tokenizer_info_str = "#version:"\n', "convert.py"),
        ('password = "[REDACTED:assigned-credential]"\n', "config.py"),  # a redaction already made
    ],
)
def test_ordinary_code_references_and_placeholders_are_not_secrets(text: str, path: str):
    assert find_secret(text, path) is None, list(scan(text, path))


@pytest.mark.parametrize("make, path", [(split_pem_python, "src/signing.py"), (split_pem_js, "web/sign.js")])
def test_a_private_key_split_into_string_literals_is_redacted_whole(make, path: str):
    import random

    text, body = make(random.Random(3))
    text += "\n\ndef upload_report_to_bucket(report):\n    return report\n"
    assert rules(text, path) == {"private-key"}
    redacted = redact(text, path).text
    assert_serves_none(redacted, [*fake_body_lines(text), "PRIVATE KEY"], path)
    # Every line where it was, the code beside untouched, and still code.
    assert redacted.count("\n") == text.count("\n")
    assert redacted.split("\n")[-3:] == text.split("\n")[-3:]
    if path.endswith(".py"):
        ast.parse(redacted)


def fake_body_lines(text: str) -> list[str]:
    """The base64 lines of a key written in `text` (64 characters, between quotes)."""
    return [part for line in text.splitlines() for part in line.split('"') if len(part) >= 60]


def test_redaction_keeps_line_numbers_and_is_final():
    keys = fake_keys()
    text = (
        'import os\n\n\nKEY = """' + keys["private-key"].text + '"""\n'
        'TOKEN = "' + keys["github-token"].text + '"  # used below\n\n\n'
        "def upload_report_to_bucket(report):\n    return KEY, TOKEN, report\n"
    )
    redacted = redact(text, "src/upload.py")
    assert redacted.rules == ("private-key", "github-token")
    before, after = text.split("\n"), redacted.text.split("\n")
    assert len(before) == len(after)
    line = next(i for i, ln in enumerate(before) if ln.startswith("def upload_report_to_bucket"))
    assert after[line] == before[line] and after[line + 1] == before[line + 1]
    assert after[line - 3] == 'TOKEN = "[REDACTED:github-token]"  # used below'
    assert list(scan(redacted.text, "src/upload.py")) == []  # nothing left to find
    assert redact(redacted.text, "src/upload.py").text == redacted.text


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


@pytest.mark.parametrize(
    "rel",
    [
        ".env",
        ".env.local",
        ".env.example",
        "prod.env",
        "id_rsa",
        "id_rsa.pub",
        "deploy/id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "tls/server.key",
        "ca.pem",
        "client.p12",
        "client.pfx",
        "vault.kdbx",
        ".npmrc",
        ".pypirc",
        ".netrc",
        ".git-credentials",
        ".aws/config",
        "home/.aws/credentials",
        ".ssh/known_hosts",
        ".gnupg/pubring.kbx",
        "credentials.json",
        "credentials-prod.json",
        "service-account.json",
        "my-project-1a2b3c4d5e6f.json",
        "terraform.tfstate",
        "infra/terraform.tfstate.backup",
        "secrets.yaml",
        "config/secrets.yml",
    ],
)
def test_credential_files_by_name(rel: str):
    assert secret_by_name(rel)


@pytest.mark.parametrize(
    "rel",
    [
        "app.py",
        "credentials.py",
        "auth/credentials.go",
        "environment.py",
        "env.py",
        "config.json",
        "package.json",
        "tsconfig.json",
        "README.md",
        "keys.py",
        "token.py",
        "secrets_test.py",
        "docs/keys.md",
        "terraform/main.tf",
    ],
)
def test_code_about_credentials_is_not_a_credential_file(rel: str):
    assert not secret_by_name(rel)


# ---------------------------------------------------------------- the walker


def test_the_walk_leaves_credential_files_out_and_redacts_keys_in_the_rest(tmp_path: Path):
    planted = write_secret_project(tmp_path / "p")
    result = walk(tmp_path / "p")
    kept = {f.path: f.text for f in result.files}
    assert sorted(kept) == sorted([*planted.redacted, *planted.plain])
    assert (
        result.skipped[SECRET] == len(planted.credential_files) and result.secrets == planted.credential_files
    )
    assert result.redacted == planted.redacted_files
    for rel, text in kept.items():
        assert_serves_none(text, planted.secrets, rel)
    # The code beside each key is there, at its own line.
    for rel, beside in planted.beside.items():
        on_disk = (tmp_path / "p" / rel).read_text()
        assert kept[rel].count("\n") == on_disk.count("\n")
        line = next(i for i, ln in enumerate(on_disk.split("\n")) if beside in ln)
        assert beside in kept[rel].split("\n")[line], rel
    # The watcher's filter agrees for the files it can judge by name.
    selection = Selection(tmp_path / "p")
    assert not selection.admits(".env") and not selection.admits(".aws/credentials")
    assert selection.admits("src/app.py") and selection.admits("src/keys_github_token.py")


def test_only_a_fathomignore_line_naming_the_file_takes_it_back(tmp_path: Path):
    root = tmp_path / "p"
    planted = write_secret_project(root)
    # Neither a folder's negation, nor a .gitignore negation, nor an include glob will do.
    (root / ".fathomignore").write_text("!config/\n!src/\n")
    (root / ".gitignore").write_text("!.env\n")
    result = walk(root, include=["**/*.py", ".env"])
    assert result.skipped[SECRET] == len(planted.credential_files)
    assert result.redacted == planted.redacted_files

    (root / ".fathomignore").write_text("*.log\n!config/database.yml\n!/.env\n!src/keys_jwt.py\n")
    result = walk(root)
    kept = {f.path: f.text for f in result.files}
    assert {"config/database.yml", ".env", "src/keys_jwt.py"} <= set(kept)
    # Taken back: whole, and as written.
    assert planted.redacted["config/database.yml"][0] in kept["config/database.yml"]
    assert planted.redacted["src/keys_jwt.py"][0] in kept["src/keys_jwt.py"]
    assert result.skipped[SECRET] == len(planted.credential_files) - 1
    assert {"config/database.yml", "src/keys_jwt.py"}.isdisjoint(result.redacted)
    assert Selection(root).admits(".env") and Selection(root).taken_back("src/keys_jwt.py")
    assert not Selection(root).taken_back("src/keys_jwt_x.py")

    # A nested .fathomignore names files below it.
    (root / ".fathomignore").unlink()
    (root / "config" / ".fathomignore").write_text("!database.yml\n")
    assert "config/database.yml" not in walk(root).redacted


def test_every_read_through_the_walker_gets_the_redacted_text(tmp_path: Path):
    """`Survey.read` (the index) and `read_one` (read_code's check against the disk, the
    agents' read_file) read the same redacted text; a credential file stays refused."""
    root = tmp_path / "p"
    (root / "src").mkdir(parents=True)
    key = fake_keys()["github-token"].text
    (root / "src" / "client.py").write_text(
        f"TOKEN = '{key}'\n\n\ndef upload_report_to_bucket():\n    return TOKEN\n"
    )
    (root / "src" / "plain.py").write_text("def f():\n    return 1\n")
    (root / ".env").write_text(f"TOKEN={key}\n")
    listed = walker.survey(root)
    read = {c.rel: listed.read(c) for c in listed.candidates}
    client = read["src/client.py"]
    assert client is not None
    assert_serves_none(client.text, [key], "src/client.py")
    assert client.text.startswith("TOKEN = '[REDACTED:github-token]'\n")
    assert "def upload_report_to_bucket" in client.text.split("\n")[3]
    assert listed.result.skipped[SECRET] == 1 and listed.result.secrets == [".env"]
    assert listed.result.redacted == ["src/client.py"]
    assert read_one(root, "src/client.py").text == client.text
    with pytest.raises(walker.ReadRefused, match="credential file"):
        read_one(root, ".env")


# ---------------------------------------------------------------- store verify


def _service(data: Path) -> Fathom:
    return Fathom(Settings(data_dir=data), encoder=HashEmbedder(width=8))


def _cli(service: Fathom, *args: str):
    return runner.invoke(app, list(args), obj={"fathom": service}, env={"COLUMNS": "250"})


def _disk_holds(folder: Path, needle: str) -> list[str]:
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and raw in p.read_bytes()]


def test_store_verify_reports_and_repair_removes_secrets_indexed_by_an_older_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = tmp_path / "p"
    planted = write_secret_project(root)
    (root / ".fathomignore").write_text("!src/keys_jwt.py\n")
    data = tmp_path / "data"
    # An older build: no rule by name, none by content.
    with monkeypatch.context() as old:
        old.setattr(walker, "secret_by_name", lambda rel: False)
        old.setattr(walker, "redact", lambda text, path="": Redacted(text, ()))
        result = _cli(_service(data), "index", str(root), "--project", "p")
        assert result.exit_code == 0, result.output
    aws, github = fake_keys()["aws-access-key"].text, fake_keys()["github-token"].text
    assert _disk_holds(data / "lance", aws) and _disk_holds(data / "lance", github), (
        "the old build indexed the keys"
    )

    result = _cli(_service(data), "store", "verify", "p")
    assert result.exit_code == 1, result.output
    assert "secrets" in result.output and ".aws/credentials" in result.output
    assert "config/app.json" in result.output  # (the first ten paths are named)
    assert "src/keys_jwt.py" not in result.output  # taken back by the project: not a problem
    assert_serves_none(result.output, planted.secrets, "store verify")  # named by path
    checks = asyncio.run(_service(data).verify_store("p"))
    found = {path for c in checks for p in c.problems if p.kind == "secrets" for path in p.paths}
    # (the old build left the certs/ files out too, as "data")
    assert found == {p for p in [*planted.by_name, *planted.redacted] if not p.startswith("certs/")} - {
        "src/keys_jwt.py"
    }

    result = _cli(_service(data), "store", "verify", "p", "--repair")
    assert result.exit_code == 0, result.output
    assert "deleted" in result.output
    assert "no problems found" in _cli(_service(data), "store", "verify", "p").output
    # Gone from the disk too (LanceDB keeps deleted rows in old versions until collected).
    assert _disk_holds(data / "lance", aws) == [] and _disk_holds(data / "lance", github) == []
    # The next index (this build) brings the code beside the keys back, redacted.
    result = _cli(_service(data), "index", str(root), "--project", "p")
    assert result.exit_code == 0, result.output
    taken_back = 1  # src/keys_jwt.py, as written
    assert f"{len(planted.redacted_files) - taken_back} files had secrets redacted" in result.output
    assert "config/app.json" in result.output
    assert "no problems found" in _cli(_service(data), "store", "verify", "p").output
    assert _disk_holds(data / "lance", github) == []
    service = _service(data)
    for word, rel in (
        ("add_numbers_plainly", "src/app.py"),
        ("publish_with_github_token", "src/keys_github_token.py"),
    ):
        hits = asyncio.run(service.search(word, project="p"))
        assert any(h.path == rel for h in hits), word
