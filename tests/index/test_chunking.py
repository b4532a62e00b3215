"""Chunking: syntax-aware code chunks per language, docs along headings, line windows for
everything else, and no exception on any input."""

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


def outline(chunks: list[Chunk], table: str = "code") -> list[tuple[str | None, int, int]]:
    return [(c.symbol, c.start_line, c.end_line) for c in chunks if c.table == table]


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def assert_slices(text: str, chunks: list[Chunk]) -> None:
    """Every chunk's text is the raw source of its line range (or part of one long line)."""
    lines = source_lines(text)
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), chunk
        raw = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert chunk.text == raw or (chunk.start_line == chunk.end_line and chunk.text in raw), chunk


def assert_covers(text: str, chunks: list[Chunk]) -> None:
    lines = source_lines(text)
    covered = set()
    for chunk in chunks:
        if chunk.table == "code":
            covered.update(range(chunk.start_line, chunk.end_line + 1))
    missing = [n for n, line in enumerate(lines, 1) if line.strip() and n not in covered]
    assert not missing, f"lines never indexed: {missing}"


# --- per language ----------------------------------------------------------------------

EXPECTED = {
    "sample.py": [
        (None, 1, 6),  # module docstring and imports
        ("Invoice", 9, 14),  # decorator, class header, docstring, fields
        ("Invoice.total", 16, 18),
        ("Invoice.tax", 20, 22),  # with the comment right above it
        ("render", 25, 26),
        (None, 29, 30),  # the __main__ block
    ],
    "sample.js": [
        (None, 1, 3),
        ("RetryQueue", 5, 6),  # doc comment and class line
        ("RetryQueue.constructor", 7, 11),
        ("RetryQueue.push", 13, 16),
        ("RetryQueue.drain", 18, 23),  # with the closing brace of the class
        ("backoff", 25, 27),
        ("jitter", 29, 29),
    ],
    "sample.ts": [
        ("Route", 1, 6),  # the lone import leads into the interface
        ("Router", 8, 9),
        ("Router.add", 11, 13),
        ("Router.match", 15, 18),
        ("normalize", 20, 22),
    ],
    "sample.tsx": [("Props", 1, 3), ("Greeting", 5, 7), ("Farewell", 9, 11)],
    "sample.go": [
        (None, 1, 6),
        ("Entry", 8, 12),
        ("Cache", 14, 18),
        ("Cache.Get", 20, 27),  # a method over 8 lines: windows that keep the symbol
        ("Cache.Get", 27, 29),
        ("New", 31, 33),
    ],
    "sample.rs": [
        ("Counter", 1, 7),  # use, doc comment, derive attribute, struct
        ("Counter.add", 9, 12),  # `impl Counter {` joins its first method
        ("Counter.get", 14, 17),
        ("tokenize", 19, 21),
    ],
    "Sample.java": [
        (None, 1, 4),
        ("OrderRepository", 6, 8),
        ("OrderRepository.OrderRepository", 10, 11),
        ("OrderRepository.save", 13, 15),
        ("OrderRepository.count", 17, 20),
    ],
    "sample.c": [("buffer", 1, 7), ("buffer_new", 9, 15), ("buffer_free", 17, 20)],
    "sample.cpp": [
        ("geo", 1, 4),
        ("geo.Polygon.Polygon", 6, 8),
        ("geo.Polygon.perimeter", 10, 14),
        ("geo.Polygon", 16, 18),  # private section and closing brace
        ("geo.area", 20, 24),
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_code_is_chunked_along_syntax(name):
    text = sample(name)
    chunks = chunk_file(name, text, limits=SMALL)
    assert outline(chunks) == EXPECTED[name]
    language, _ = detect_language(name)
    assert {c.language for c in chunks} == {language}
    assert_slices(text, chunks)
    assert_covers(text, chunks)


def test_small_definitions_stay_whole_with_default_bounds():
    chunks = chunk_file("billing/invoice.py", sample("sample.py"))
    assert outline(chunks) == [(None, 1, 6), ("Invoice", 9, 22), ("render", 25, 26), (None, 29, 30)]
    assert all(c.path == "billing/invoice.py" for c in chunks)


def test_namespaces_never_hide_their_members():
    chunks = chunk_file("geo.cpp", sample("sample.cpp"))
    assert [c.symbol for c in chunks] == ["geo", "geo.Polygon", "geo.area"]
    rust = "mod net {\n    pub fn dial() {}\n\n    pub fn listen() {}\n}\n"
    assert [c.symbol for c in chunk_file("lib.rs", rust)] == ["net.dial", "net.listen"]


def test_large_class_splits_into_methods_and_windows_keep_the_symbol():
    methods = "\n".join(
        f"    def method_{i}(self, x):\n        y = x * {i}\n        return y + {i}\n" for i in range(30)
    )
    long_body = "\n".join(f"        total += step_{i}(value)" for i in range(150))
    text = f"class Engine:\n    '''Runs steps.'''\n\n{methods}\n    def run(self, value):\n        total = 0\n{long_body}\n        return total\n"
    chunks = chunk_file("engine.py", text)
    symbols = [c.symbol for c in chunks if c.table == "code"]
    assert "Engine.method_0" in symbols and "Engine.method_29" in symbols
    run = [c for c in chunks if c.symbol == "Engine.run"]
    assert len(run) >= 3  # 150 lines cut into windows, every one still named
    assert run[0].start_line == text.splitlines().index("    def run(self, value):") + 1
    assert run[-1].end_line == len(text.splitlines())
    for chunk in chunks:
        assert len(chunk.text) <= Limits().max_chars
        assert chunk.end_line - chunk.start_line + 1 <= Limits().max_lines
    assert_covers(text, chunks)
    assert_slices(text, chunks)


def test_python_docstrings_also_go_to_the_docs_table():
    text = (
        '"""Storage engine: pages, the buffer pool and write-ahead logging."""\n'
        "import os\n"
        "class Pool:\n"
        '    """Keeps hot pages in memory and writes dirty ones back on eviction."""\n\n'
        "    def evict(self):\n"
        '        """x"""\n'
        "        return None\n"
    )
    docs = [c for c in chunk_file("pool.py", text) if c.table == "docs"]
    assert [(c.symbol, c.start_line, c.end_line) for c in docs] == [(None, 1, 1), ("Pool", 4, 4)]
    assert all(c.language == "python" for c in docs)  # one-word docstrings are left out


def test_a_docstring_only_module_is_not_emitted_twice_under_one_chunk_id():
    text = '"""Helpers for reading configuration files from the data directory."""\n'
    chunks = chunk_file("pkg/__init__.py", text)
    assert [(c.table, c.start_line, c.end_line) for c in chunks] == [("code", 1, 1)]


def test_top_level_code_between_definitions_is_indexed():
    text = "import os\n\nA = 1\n\ndef f():\n    return A\n\nB = os.environ.get('HOME', 'somewhere-else')\n\ndef g():\n    return B\n"
    chunks = chunk_file("m.py", text, limits=Limits(max_lines=4, max_chars=200))
    assert_covers(text, chunks)
    assert ("f", 5, 6) in outline(chunks) and ("g", 10, 11) in outline(chunks)


# --- docs ------------------------------------------------------------------------------

MARKDOWN = """\
# Fathom

Semantic code search you host yourself, with a longer introduction than a heading.

## Install

### From source

Clone the repository and run make.

```sh
# this is a shell comment, not a heading
make demo
```

### From PyPI

pip install fathom, then run the server on your machine.

## Usage

Run `fathom index .` then `fathom search "query"` to find code.
"""


def test_markdown_is_split_along_headings_with_heading_paths():
    chunks = chunk_file("README.md", MARKDOWN)
    assert {c.table for c in chunks} == {"docs"} and {c.language for c in chunks} == {"markdown"}
    assert outline(chunks, "docs") == [
        ("Fathom", 1, 3),
        ("Fathom > Install > From source", 5, 14),  # the empty "Install" section joins it
        ("Fathom > Install > From PyPI", 16, 18),
        ("Fathom > Usage", 20, 22),
    ]
    assert_slices(MARKDOWN, chunks)


def test_big_sections_are_windowed_and_keep_their_heading():
    paragraphs = "\n\n".join(
        f"Paragraph {i} explains one more detail of the protocol at length." for i in range(80)
    )
    text = f"# Protocol\n\n## Frames\n\n{paragraphs}\n\n## Errors\n\nNone yet, but soon there will be some.\n"
    chunks = chunk_file("docs/protocol.md", text)
    frames = [c for c in chunks if c.symbol == "Protocol > Frames"]
    assert len(frames) > 2
    assert all(len(c.text) <= Limits().max_chars for c in chunks)
    assert chunks[-1].symbol == "Protocol > Errors"


def test_rst_titles_nest_by_order_of_first_use():
    text = """\
=======
 Guide
=======

Intro paragraph that says what this guide covers, in enough words.

Install
=======

Get it from the package index with pip, or build it from the sources.

From source
-----------

Run the build script in the repository root, then install the wheel.

Usage
=====

Call the command line tool with a path to index and a query to search.
"""
    chunks = chunk_file("docs/guide.rst", text)
    assert outline(chunks, "docs") == [
        ("Guide", 1, 5),
        ("Guide > Install", 7, 10),
        ("Guide > Install > From source", 12, 15),
        ("Guide > Usage", 17, 20),
    ]


def test_plain_text_and_extensionless_readme_are_docs():
    text = "Fathom\n======\n\nA search server.\n\nUsage\n-----\n\nRun it and point your editor at it.\n"
    chunks = chunk_file("README", text)
    assert [c.symbol for c in chunks] == ["Fathom", "Fathom > Usage"]
    assert {(c.language, c.table) for c in chunks} == {("text", "docs")}
    notes = chunk_file("notes.txt", "just some notes\nwithout any heading\n")
    assert outline(notes, "docs") == [(None, 1, 2)]


# --- other files -----------------------------------------------------------------------


def test_other_files_get_line_windows_in_the_code_table():
    text = "\n".join(f"key_{i} = {i}" for i in range(100)) + "\n"
    chunks = chunk_file("settings.ini", text)  # INI has no grammar here (TOML has: see test_formats)
    assert {(c.language, c.table, c.symbol) for c in chunks} == {("ini", "code", None)}
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 100
    assert all(c.end_line - c.start_line + 1 <= Limits().window_lines for c in chunks)
    assert_covers(text, chunks)
    assert_slices(text, chunks)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/app.py", ("python", "code")),
        ("web/App.tsx", ("tsx", "code")),
        ("web/app.ts", ("typescript", "code")),
        ("web/app.mjs", ("javascript", "code")),
        ("main.go", ("go", "code")),
        ("lib.rs", ("rust", "code")),
        ("A.java", ("java", "code")),
        ("x.h", ("c", "code")),
        ("x.hpp", ("cpp", "code")),
        ("README.md", ("markdown", "docs")),
        ("docs/index.rst", ("rst", "docs")),
        ("notes.txt", ("text", "docs")),
        ("README", ("text", "docs")),
        ("CHANGELOG", ("text", "docs")),
        ("Makefile", ("make", "code")),
        ("Dockerfile", ("dockerfile", "code")),
        ("pyproject.toml", ("toml", "code")),
        ("run.sh", ("shell", "code")),
        ("weird.xyz", ("text", "code")),
    ],
)
def test_detect_language(path, expected):
    assert detect_language(path) == expected


# --- robustness ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("a.py", ""),
        ("a.py", "\n\n  \n\t\n"),
        ("a.py", "def f(:\n  x = \n\nclass A\n  pass\n"),  # syntax errors
        ("a.js", "function f() {\r\n  return 1;\r\n}\r\n"),  # CRLF
        ("a.go", "package x\rfunc f() {}\r"),  # old Mac line ends
        ("a.c", "int f(void) {\n\treturn 0;\t\n}\n" * 3),  # tabs
        ("a.js", "var a=" + "1+" * 20000 + "1;\n"),  # one very long line
        ("a.md", "#\n##\n```\nunclosed fence\n"),
        ("a.rst", "===\n===\n===\n"),
        ("a.py", "\x00\ud800\ufeff\u2028def f(): pass\n"),
        ("a.cpp", "#ifdef X\n" * 200 + "int f() { return 0; }\n"),
    ],
)
def test_weird_input_never_raises(path, text, caplog):
    chunks = chunk_file(path, text)
    assert not [r for r in caplog.records if r.name == "fathom.index.chunking"]
    assert_slices(text, chunks)
    if detect_language(path)[1] == "code":
        assert_covers(text, chunks)


def test_crlf_line_numbers_match_the_lines_an_editor_shows():
    chunks = chunk_file("a.js", "// x\r\n\r\nfunction f() {\r\n  return 1;\r\n}\r\n")
    assert outline(chunks) == [("f", 1, 5)]
    assert "\r" not in chunks[0].text


def test_long_lines_are_sliced_to_the_size_bound():
    text = "x = '" + "a" * 10_000 + "'\n"
    chunks = chunk_file("blob.py", text)
    assert len(chunks) >= 7 and all(len(c.text) <= Limits().max_chars for c in chunks)
    assert "".join(c.text for c in chunks) == text.rstrip("\n")


FRAGMENTS = {
    "a.py": [
        "def f(x):",
        "    return x",
        "class A:",
        "    def m(self):",
        "        pass",
        "import os",
        "@dec",
        "# note",
        '"""doc"""',
        "    '''",
        "if x:",
        ")",
        "(",
    ],
    "a.js": [
        "function f() {",
        "}",
        "class A {",
        "  m() { return 1; }",
        "const g = () => {",
        "};",
        "export default {",
        "// c",
        "/*",
        "*/",
    ],
    "a.go": ["package p", "func F() {", "}", "type T struct {", "func (t *T) M() {", "// c", 'import "x"'],
    "a.rs": ["fn f() {", "}", "impl A {", "mod m {", "/// d", "#[derive(Debug)]", "struct S;"],
    "Main.java": ["class A {", "}", "void m() {", "interface I {", "enum E { X;", "/** d */"],
    "a.cpp": [
        "namespace n {",
        "}",
        "class K {",
        "};",
        "#ifdef X",
        "#endif",
        "template <class T>",
        "int f() {",
        'extern "C" {',
    ],
    "a.md": ["# Title", "## Sub", "```", "text", "---", "===", "Para"],
    "a.rst": ["Title", "=====", "-----", "text", "~~~~~"],
    "a.toml": ["[x]", "a = 1", ""],
}


@st.composite
def files(draw):
    path = draw(st.sampled_from(sorted(FRAGMENTS)))
    pieces = st.one_of(
        st.sampled_from(FRAGMENTS[path] + ["", "  ", "\t"]),
        st.text(max_size=30),
    )
    lines = draw(st.lists(pieces, max_size=120))
    ending = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return path, ending.join(lines) + draw(st.sampled_from(["", ending]))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(file=files(), limits=st.sampled_from([Limits(), Limits(max_lines=6, max_chars=120)]))
def test_chunks_are_valid_slices_and_code_covers_every_line(caplog, file, limits):
    path, text = file
    caplog.clear()
    chunks = chunk_file(path, text, limits=limits)
    # The syntax path itself must hold up; the line-window fallback is for true surprises.
    assert not [r for r in caplog.records if r.name == "fathom.index.chunking"]
    assert_slices(text, chunks)
    if detect_language(path)[1] == "code":
        assert_covers(text, chunks)


def test_chunking_from_several_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor

    texts = {name: sample(name) for name in EXPECTED}
    expected = {name: outline(chunk_file(name, text, limits=SMALL)) for name, text in texts.items()}
    jobs = [name for name in sorted(texts) for _ in range(6)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda n: (n, outline(chunk_file(n, texts[n], limits=SMALL))), jobs))
    assert all(result == expected[name] for name, result in results)
