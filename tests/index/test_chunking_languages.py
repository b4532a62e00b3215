"""Chunking of the languages and formats beyond the first nine: definitions with their symbol
and kind (C#, Ruby, PHP, Kotlin, Swift, Scala, Lua, shell), and the structure of config and
data files (SQL, YAML, TOML, JSON, Terraform, Dockerfile, Markdown front matter).

Every expectation below was written from reading the fixture in tests/chunking_samples/:
(symbol, kind, first line, last line) of each chunk, in order."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fathom.index.chunk import Chunk
from fathom.index.chunking import Limits, chunk_file, detect_language, source_lines

SAMPLES = Path(__file__).parents[1] / "chunking_samples"
# Small bounds make every sample big enough that classes split into their methods.
SMALL = Limits(max_lines=8, max_chars=400)
DEFAULT = Limits()

Row = tuple[str | None, str | None, int, int]


def rows(chunks: list[Chunk], table: str = "code") -> list[Row]:
    return [(c.symbol, c.kind, c.start_line, c.end_line) for c in chunks if c.table == table]


def assert_slices_and_covers(text: str, chunks: list[Chunk]) -> None:
    lines = source_lines(text)
    covered: set[int] = set()
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), chunk
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line]), chunk
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    missing = [n for n, line in enumerate(lines, 1) if line.strip() and n not in covered]
    assert not missing, f"lines never indexed: {missing}"


CODE: dict[str, tuple[str, list[Row]]] = {
    "Sample.cs": (
        "csharp",
        [
            (None, None, 1, 2),  # usings
            ("Shop.Billing.Invoice", None, 4, 9),  # namespace line, doc comment, class header, field
            ("Shop.Billing.Invoice.Invoice", "method", 11, 16),  # constructor and the one-line property
            ("Shop.Billing.Invoice.Total", "method", 18, 24),  # with the class's closing brace
            ("Shop.Billing.IPricing", "class", 26, 29),
            ("Shop.Billing.Currency", "class", 31, 32),  # with the namespace's closing brace
        ],
    ),
    "sample.rb": (
        "ruby",
        [
            ("Shipping.RateTable", None, 1, 6),  # require, module line, comment, class header
            ("Shipping.RateTable.initialize", "method", 8, 10),
            ("Shipping.RateTable.rate", "method", 12, 15),
            ("Shipping.RateTable.load", "method", 17, 20),  # `def self.load`, and the class's `end`
            ("Shipping.default_zone", "method", 22, 25),
            ("quote", "function", 27, 29),  # a top-level `def` is a function
        ],
    ),
    "sample.php": (
        "php",
        [
            (None, None, 1, 5),  # <?php, `namespace App\Mail;`, use
            ("Transport", "class", 7, 10),
            ("SmtpTransport", None, 12, 17),  # doc comment, class header, property
            ("SmtpTransport.__construct", "method", 19, 21),
            ("SmtpTransport.send", "method", 23, 28),
            ("welcome", "function", 30, 33),
        ],
    ),
    "sample.kt": (
        "kotlin",
        [
            (None, None, 1, 3),
            ("Item", "class", 5, 5),
            ("Cart", None, 7, 8),
            ("Cart.add", "method", 9, 11),
            ("Cart.total", "method", 13, 14),
            ("Cart.Companion", "class", 16, 19),  # an unnamed companion is `Companion`
            ("Prices", "class", 21, 25),  # an `object`
            ("main", "function", 27, 29),
        ],
    ),
    "sample.swift": (
        "swift",
        [
            ("Shape", "class", 1, 5),  # the import leads into the protocol
            ("Circle", "class", 7, 14),  # a struct, with its doc comment
            ("Canvas.init", "method", 16, 19),  # the class header is too small alone
            ("Canvas.add", "method", 21, 24),
            ("Canvas", "class", 26, 30),  # `extension Canvas`
            ("Unit", "class", 32, 32),
            ("describe", "function", 34, 36),
        ],
    ),
    "sample.scala": (
        "scala",
        [
            (None, None, 1, 3),
            ("Account", "class", 5, 7),  # a trait
            ("Ledger", None, 9, 11),
            ("Ledger.post", "method", 13, 15),
            ("Ledger.balance", "method", 17, 18),
            ("Ledger", "class", 20, 22),  # the companion `object Ledger`
            ("Posting", "class", 24, 24),
            ("summarize", "function", 26, 27),
        ],
    ),
    "sample.lua": (
        "lua",
        [
            (None, None, 1, 5),  # a table and a metatable are no definitions
            ("Queue.new", "method", 7, 9),
            ("Queue.push", "method", 11, 13),  # `Queue:push`
            ("Queue.pop", "method", 15, 17),
            ("encode", "function", 19, 21),  # `local function`
            ("drain", "function", 23, 27),  # `local drain = function`, then `return Queue`
        ],
    ),
    "sample.sh": (
        "shell",
        [
            (None, None, 1, 4),
            ("log", "function", 6, 9),
            ("archive", "function", 11, 15),  # `function archive {`
            ("prune", "function", 17, 19),
            (None, None, 21, 25),  # the script's main loop
        ],
    ),
}

# A pyproject.toml or package.json fixture would be read by the tools (ruff takes a nested
# pyproject.toml with a [tool.ruff] table as its config): the samples are named sample.*.
FORMATS: dict[str, tuple[str, Limits, list[Row]]] = {
    "schema.sql": (
        "sql",
        SMALL,
        [
            ("customers", None, 1, 5),
            ("public.orders", None, 7, 11),
            ("orders_by_customer", None, 13, 13),  # an index by its own name, not its table's
            ("big_orders", None, 15, 18),
            (None, None, 20, 20),  # an INSERT defines nothing
            ("order_count", "function", 22, 24),
            ("public.orders", None, 26, 26),  # ALTER TABLE
        ],
    ),
    "compose.yaml": (
        "yaml",
        SMALL,
        [
            (None, None, 1, 3),  # one-line keys are context, not units
            ("services.web", None, 5, 11),  # `services` is too big: cut into its services
            ("services.db", None, 12, 15),
            ("volumes", None, 17, 20),  # the `---` and the next document's one-line key join it
            ("metadata", None, 21, 22),
        ],
    ),
    "sample.json": (
        "json",
        SMALL,
        [
            (None, None, 1, 4),
            ("scripts", None, 5, 9),
            ("dependencies", None, 10, 13),
            ("browserslist", None, 14, 19),  # the one-line "engines" and the brace join it
        ],
    ),
    "sample.toml": (
        "toml",
        SMALL,
        [
            ("build-system", None, 1, 4),
            ("project", None, 6, 10),  # too big: its multi-line key goes on its own
            ("project.dependencies", None, 11, 14),
            ("tool.ruff.lint", None, 16, 17),
            ("tool.mypy.overrides", None, 19, 21),
        ],
    ),
    "main.tf": (
        "terraform",
        SMALL,
        [
            ("terraform", None, 1, 3),
            ("provider.aws", None, 5, 7),
            ("var.region", None, 9, 12),
            ("aws_instance.web", None, 14, 17),  # comment, header and one-line attributes
            ("aws_instance.web.tags", None, 19, 22),
            ("data.aws_ami.ubuntu", None, 24, 27),
            ("module.vpc", None, 29, 32),
            ("output.web_ip", None, 34, 36),
        ],
    ),
    "Dockerfile": (
        "dockerfile",
        DEFAULT,
        [
            (None, None, 1, 2),  # the syntax directive and the global ARG
            ("builder", None, 4, 9),  # the continued RUN stays in its stage
            ("runtime", None, 11, 20),  # the heredoc's `from shop import …` starts no stage
            ("gcr.io/distroless/python3", None, 22, 23),  # unnamed: its image; lower-case `from`
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(CODE))
def test_definitions_of_each_language_with_symbol_and_kind(name):
    language, expected = CODE[name]
    text = (SAMPLES / name).read_text()
    assert detect_language(name) == (language, "code")
    chunks = chunk_file(name, text, limits=SMALL)
    assert rows(chunks) == expected
    assert {c.language for c in chunks} == {language}
    assert_slices_and_covers(text, chunks)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_structure_of_each_config_and_data_format(name):
    language, limits, expected = FORMATS[name]
    text = (SAMPLES / name).read_text()
    assert detect_language(name) == (language, "code")
    chunks = chunk_file(name, text, limits=limits)
    assert rows(chunks) == expected
    assert_slices_and_covers(text, chunks)


def test_small_config_units_stay_whole_with_default_bounds():
    compose = chunk_file("compose.yaml", (SAMPLES / "compose.yaml").read_text())
    assert [c.symbol for c in compose] == [None, "services", "volumes", "metadata"]
    terraform = chunk_file("main.tf", (SAMPLES / "main.tf").read_text())
    assert ("aws_instance.web", None, 14, 22) in rows(terraform)


def test_markdown_front_matter_is_a_section_of_its_own():
    text = (SAMPLES / "post.md").read_text()
    chunks = chunk_file("blog/post.md", text)
    assert rows(chunks, "docs") == [
        ("front matter", None, 1, 5),
        (None, None, 7, 7),
        ("Walking", None, 9, 11),
        ("Chunking", None, 13, 15),
    ]
    # A bare `layout: post` is too small to stand alone: it leads into the first section.
    small = chunk_file("a.md", "---\nlayout: post\n---\n# Title\n\nA body long enough to be a section.\n")
    assert rows(small, "docs") == [("Title", None, 1, 6)]
    # TOML front matter (Hugo) is no setext heading either.
    hugo = "+++\ntitle = 'Release notes for the spring version of the shop'\n+++\n\nText of the notes, long enough to be a paragraph of its own.\n"
    assert rows(chunk_file("notes.md", hugo), "docs") == [("front matter", None, 1, 3), (None, None, 5, 5)]


def test_module_functions_in_ruby_are_methods_and_kotlin_objects_host_methods():
    ruby = "module Util\n  def helper\n    1\n  end\n\n  def other\n    2\n  end\nend\n"
    assert rows(chunk_file("util.rb", ruby, limits=Limits(max_lines=4, max_chars=400))) == [
        ("Util.helper", "method", 1, 4),
        ("Util.other", "method", 6, 9),
    ]
    kotlin = "object Db {\n    fun open() {\n        connect()\n    }\n\n    fun close() {\n        disconnect()\n    }\n}\n"
    assert rows(chunk_file("Db.kt", kotlin, limits=Limits(max_lines=4, max_chars=400))) == [
        ("Db.open", "method", 1, 4),
        ("Db.close", "method", 6, 9),
    ]


def test_long_definitions_are_windowed_and_keep_symbol_and_kind():
    body = "\n".join(f"  echo step {i} of the long deployment script" for i in range(120))
    text = f"deploy() {{\n{body}\n}}\n"
    chunks = chunk_file("deploy.sh", text)
    assert len(chunks) >= 3
    assert {(c.symbol, c.kind) for c in chunks} == {("deploy", "function")}
    assert all(
        len(c.text) <= DEFAULT.max_chars and c.end_line - c.start_line + 1 <= DEFAULT.max_lines
        for c in chunks
    )
    assert_slices_and_covers(text, chunks)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/Api.cs", "csharp"),
        ("lib/tasks/db.rake", "ruby"),
        ("index.php", "php"),
        ("build.gradle.kts", "kotlin"),
        ("App.swift", "swift"),
        ("Main.scala", "scala"),
        ("init.lua", "lua"),
        ("run.bash", "shell"),
        ("config.fish", "fish"),
        ("db/schema.sql", "sql"),
        (".github/workflows/ci.yml", "yaml"),
        ("Cargo.toml", "toml"),
        ("tsconfig.json", "json"),
        ("infra/main.tf", "terraform"),
        ("nomad.hcl", "hcl"),
        ("Dockerfile", "dockerfile"),
        ("Dockerfile.prod", "dockerfile"),
        ("docker/api.Dockerfile", "dockerfile"),
        ("Containerfile", "dockerfile"),
    ],
)
def test_detect_language_of_new_formats(path, expected):
    assert detect_language(path) == (expected, "code")


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("a.cs", "namespace X {\n class {\n"),
        ("a.rb", "class A\n  def\nend end\n"),
        ("a.sql", "CREATE TABLE (;\nSELECT FROM WHERE;\n"),
        ("a.yaml", "a: [\n  - b\n: :\n"),
        ("a.toml", "[x\ny = \n[[z]]\n"),
        ("a.json", '{"a": {"b": [1, 2,\n'),
        ("a.tf", 'resource "x" {\n  a = {\n'),
        ("Dockerfile", "RUN x <<EOF\nFROM y\n"),  # an unclosed heredoc: no stage at all
        ("a.lua", "local f = function(\n"),
        ("a.md", "---\ntitle: never closed\n# Heading\n\nbody\n"),
    ],
)
def test_broken_files_never_raise_and_lose_no_line(path, text, caplog):
    chunks = chunk_file(path, text)
    assert not [r for r in caplog.records if r.name == "fathom.index.chunking"]
    if detect_language(path)[1] == "code":
        assert_slices_and_covers(text, chunks)


# Lines each format is made of, shuffled into files that are mostly broken: the syntax path
# must hold up on them (no fallback to windows, no line lost, every chunk a true slice).
FRAGMENTS = {
    "a.cs": ["namespace N {", "}", "class C {", "void M() {", "/// d", "#if X", "#endif", "record R(int A);"],
    "a.rb": ["module M", "class C", "def m", "def self.s", "end", "# c", "class << self"],
    "a.php": ["<?php", "namespace A;", "class C {", "function f() {", "}", "/** d */", "?>"],
    "a.kt": ["class C {", "}", "fun f() {", "object O {", "companion object {", "/** d */"],
    "a.swift": ["class C {", "}", "func f() {", "extension C {", "init() {}", "/// d"],
    "a.scala": ["class C {", "}", "def f = {", "object O {", "trait T", "/** d */"],
    "a.lua": ["function M.f()", "end", "local f = function()", "local x = {", "}", "-- c"],
    "a.sh": ["f() {", "}", "function g {", "if x; then", "fi", "# c", "cat <<EOF", "EOF"],
    "a.sql": [
        "CREATE TABLE t (",
        ");",
        "CREATE FUNCTION f() AS $$",
        "$$;",
        "INSERT INTO t VALUES (1);",
        "-- c",
    ],
    "a.yaml": ["a:", "  b:", "    - c", "---", "d: e", "# c", "  f: |"],
    "a.json": ["{", "}", '"a": {', '"b": [', "],", '"c": 1,'],
    "a.tf": ['resource "a" "b" {', "}", "  x = {", '  dynamic "y" {', "# c", "locals {"],
    "Dockerfile": ["FROM a AS b", "RUN x \\", "  from y", "RUN <<EOF", "EOF", "# c", "ARG Z"],
    "a.md": ["---", "+++", "title: x", "# H", "text", "..."],
}


@st.composite
def files(draw):
    path = draw(st.sampled_from(sorted(FRAGMENTS)))
    pieces = st.one_of(st.sampled_from(FRAGMENTS[path] + ["", "  "]), st.text(max_size=20))
    lines = draw(st.lists(pieces, max_size=80))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return path, ending.join(lines) + ending


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(file=files(), limits=st.sampled_from([DEFAULT, Limits(max_lines=6, max_chars=120)]))
def test_any_mix_of_a_formats_lines_chunks_cleanly(caplog, file, limits):
    path, text = file
    caplog.clear()
    chunks = chunk_file(path, text, limits=limits)
    assert not [r for r in caplog.records if r.name == "fathom.index.chunking"]
    lines = source_lines(text)
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), chunk
        raw = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert chunk.text == raw or (chunk.start_line == chunk.end_line and chunk.text in raw), chunk
    if detect_language(path)[1] == "code":
        covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
        assert not [n for n, line in enumerate(lines, 1) if line.strip() and n not in covered]
