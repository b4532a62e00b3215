"""`fathom eval`: question sets made from a project's own code, asked three ways, through the
real CLI with the real local encoder on a small project whose answers are known."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fathom.cli import app
from fathom.errors import ConfigError
from fathom.index.eval_sets import (
    Documented,
    EvalQuery,
    docstring_queries,
    identifier_queries,
    read_questions,
    sample,
    strip_docstrings,
    words_of,
)

PROJECT = {
    "intervals.py": '''
        def merge_intervals(spans):
            """Combine overlapping ranges into the fewest disjoint ones."""
            out = []
            for start, end in sorted(spans):
                if out and start <= out[-1][1]:
                    out[-1][1] = max(out[-1][1], end)
                else:
                    out.append([start, end])
            return out
        ''',
    "colors.py": '''
        def hex_to_rgb(value):
            """Turn a web colour code into its red, green and blue parts."""
            value = value.lstrip("#")
            return tuple(int(value[i:i + 2], 16) for i in (0, 2, 4))
        ''',
    "cache.py": '''
        from collections import OrderedDict


        class LeastRecentlyUsed:
            """Keep the entries read lately and forget the oldest beyond a size."""

            def __init__(self, size):
                self.size = size
                self.entries = OrderedDict()

            def get(self, key):
                self.entries.move_to_end(key)
                return self.entries[key]

            def put(self, key, value):
                self.entries[key] = value
                if len(self.entries) > self.size:
                    self.entries.popitem(last=False)
        ''',
    "shapes.py": '''
        import math


        def circle_area(radius):
            """Compute the area of a circle from its radius."""
            if radius < 0:
                raise ValueError("negative radius")
            return math.pi * radius ** 2
        ''',
    "text.py": '''
        import re


        def slugify_title(title):
            """Turn a page title into a lowercase url slug."""
            words = re.findall(r"[a-z0-9]+", title.lower())
            return "-".join(words)


        def count_vowels(word):
            """Count how many vowels appear in a word."""
            return sum(1 for ch in word.lower() if ch in "aeiou")
        ''',
}

QUESTIONS = """\
- question: convert a hex colour string to rgb
  file: colors.py
- question: evict old entries from a cache
  file: cache.py
# Expected in the wrong file on purpose: a question the search cannot answer right.
- question: make a url slug from a title
  file: shapes.py
"""


def write(root: Path) -> Path:
    for rel, text in PROJECT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    return root


# --------------------------------------------------------------------------- the sets


def test_strip_docstrings_blanks_them_line_for_line():
    source = textwrap.dedent('''
        """Module words."""


        class Box:
            """A box.

            More about it."""

            def open(self):
                """Open the lid of the box."""
                return 1


        def only_doc():
            """Nothing else here."""
        ''').lstrip()
    text, found = strip_docstrings(source)
    assert len(text.splitlines()) == len(source.splitlines())
    assert "box." not in text and "Open the lid" not in text and "Module words" not in text
    assert [(d.name, d.line) for d in found] == [("Box", 4), ("Box.open", 9), ("only_doc", 14)]
    assert text.splitlines()[8:11] == ["    def open(self):", "", "        return 1"]
    assert text.splitlines()[14] == "    pass"  # a body that was only a docstring stays valid
    compile(text, "x.py", "exec")
    assert strip_docstrings("def broken(:\n")[0] == "def broken(:\n"


def test_questions_come_one_per_answer():
    documented = {
        "a.py": [
            Documented("f", 1, "Parse the header line.\n\nMore."),
            Documented("g", 5, "Short one."),  # under three words
            Documented("__init__", 9, "Build the whole thing now."),
            Documented("h", 12, "Parse the header line."),
        ],  # asked twice
        "tests/test_a.py": [Documented("k", 1, "Check the parser works well.")],
        "b.py": [Documented("Box.open", 3, "Open the lid of the box.")],
    }
    assert docstring_queries(documented) == [EvalQuery("Open the lid of the box", "docstring", "b.py", 3)]
    sources = {
        "m.py": "class BackgroundTasks:\n    def add_task(self): pass\n    def run(self): pass\n",
        "n.py": "def add_task(): pass\n",
    }
    assert identifier_queries(sources) == [EvalQuery("background tasks", "identifier", "m.py", 1)]
    assert words_of("HTTPTransport") == "http transport"
    assert words_of("get_environment_proxies") == "get environment proxies"
    assert sample(list(range(10)), 4) == [0, 2, 5, 7]


def test_questions_file_is_checked_before_use(tmp_path):
    good = tmp_path / "q.json"
    good.write_text(json.dumps([{"question": "where is x", "file": "./a.py"}]))
    assert read_questions(good, {"a.py"}) == [EvalQuery("where is x", "questions", "a.py")]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"question": "where is x", "file": "gone.py"}]))
    with pytest.raises(ConfigError, match="entry 1 .* expects 'gone.py'"):
        read_questions(bad, {"a.py"})
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="does not parse"):
        read_questions(bad, {"a.py"})
    bad.write_text(json.dumps([{"file": "a.py"}]))
    with pytest.raises(ConfigError, match='needs a non-empty "question"'):
        read_questions(bad, {"a.py"})


def test_a_labelled_set_in_semble_benchmarks_form_is_read_with_every_answer_file(tmp_path):
    labelled = tmp_path / "labels.json"
    labelled.write_text(
        json.dumps(
            [
                {
                    "query": "how are redirects followed",
                    "category": "architecture",
                    "relevant": ["src/client.py", {"path": "src/models.py", "start_line": 3, "end_line": 9}],
                    "secondary": ["src/client.py", "src/utils.py"],
                },
            ]
        )
    )
    [q] = read_questions(labelled, {"src/client.py", "src/models.py", "src/utils.py"})
    assert q == EvalQuery(
        "how are redirects followed", "questions", "src/client.py", others=("src/models.py", "src/utils.py")
    )
    assert q.answered_by("src/utils.py", 40, 60) and not q.answered_by("src/other.py", 1, 9)
    with pytest.raises(ConfigError, match="entry 1 .* expects 'src/utils.py'"):
        read_questions(labelled, {"src/client.py", "src/models.py"})
    labelled.write_text(json.dumps([{"query": "x", "relevant": []}]))
    with pytest.raises(ConfigError, match='labelled "query" with its "relevant" files'):
        read_questions(labelled, {"a.py"})


# --------------------------------------------------------------------------- the command

# (set, mode) -> (MRR@10, hit@1, hit@3, file@3), measured with all-MiniLM-L6-v2. The keyword
# half misses the two docstring questions whose words the code does not use (merge_intervals,
# hex_to_rgb): were the docstrings still in the searched copy, it would find all six. The
# third question expects the wrong file on purpose: the vector half ranks shapes.py 4th
# (MRR (1 + 1 + 1/4) / 3), and keyword search does not hold it at all.
EXPECTED = {
    ("docstring", "vector"): (1.0, 1.0, 1.0, 1.0),
    ("docstring", "keyword"): (0.6667, 0.6667, 0.6667, 0.6667),
    ("docstring", "fused"): (1.0, 1.0, 1.0, 1.0),
    ("identifier", "vector"): (1.0, 1.0, 1.0, 1.0),
    ("identifier", "keyword"): (1.0, 1.0, 1.0, 1.0),
    ("identifier", "fused"): (1.0, 1.0, 1.0, 1.0),
    ("questions", "vector"): (0.75, 0.6667, 0.6667, 1.0),
    ("questions", "keyword"): (0.6667, 0.6667, 0.6667, 0.6667),
    # One result per file: the second file asked for reaches the top 3 (hit@3 1.0).
    ("questions", "fused"): (0.7778, 0.6667, 1.0, 1.0),
}


@pytest.mark.slow
def test_eval_prints_known_figures_and_leaves_the_data_dir_alone(tmp_path):
    root = write(tmp_path / "proj")
    questions = tmp_path / "questions.yaml"
    questions.write_text(QUESTIONS)
    data = tmp_path / "data"
    runner = CliRunner()
    res = runner.invoke(
        app, ["--data-dir", str(data), "eval", str(root), "--questions", str(questions), "--json"]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    figures = {
        (s["name"], m["mode"]): (m["mrr"], m["hit1"], m["hit3"], m["file3"])
        for s in report["sets"]
        for m in s["modes"]
    }
    assert {s["name"]: s["queries"] for s in report["sets"]} == {
        "docstring": 6,
        "identifier": 6,
        "questions": 3,
    }
    assert figures == EXPECTED
    assert report["files"] == 5 and report["chunks"] > 0 and report["chunks_per_s"] > 0
    assert not data.exists()  # evaluated in a temporary data dir, never the user's

    table = runner.invoke(app, ["--data-dir", str(data), "eval", str(root), "--sets", "identifier"])
    assert table.exit_code == 0, table.output
    assert "identifier: 6 questions" in table.stdout and "docstring:" not in table.stdout


def test_eval_refuses_bad_input_before_indexing(tmp_path):
    root = write(tmp_path / "proj")
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps([{"question": "where is the cache", "file": "nowhere.py"}]))
    runner = CliRunner()
    res = runner.invoke(
        app, ["eval", str(root), "--questions", str(bad), "--data-dir", str(tmp_path / "data")]
    )
    assert res.exit_code == 2
    assert "expects 'nowhere.py'" in res.output
    res = runner.invoke(
        app, ["eval", str(root), "--sets", "docstring,riddles", "--data-dir", str(tmp_path / "data")]
    )
    assert res.exit_code == 2 and "unknown question set" in res.output
    assert not (tmp_path / "data").exists()


def test_eval_measures_the_model_fathom_models_use_chose(tmp_path, monkeypatch):
    """The temporary data dir has no models.json: the user's choice is carried over, and the
    report names the model it measured."""
    import asyncio

    from fathom.config import Settings
    from fathom.inference.model_choice import EmbedModel, ModelChoice, save_choice
    from fathom.service.evaluation import evaluate

    monkeypatch.delenv("FATHOM_LOCAL_MODEL_PATH", raising=False)
    folder = tmp_path / "enc"  # never loaded: the run stops once the model is named
    data = tmp_path / "data"
    data.mkdir()
    save_choice(data, ModelChoice(embed=EmbedModel("team/tiny", str(folder), 32)))
    said: list[str] = []

    class Seen(Exception):
        pass

    def progress(line: str) -> None:
        said.append(line)
        if line.startswith("indexing"):
            raise Seen  # the model is known: no need to index with it

    with pytest.raises(Seen):
        asyncio.run(
            evaluate(
                Settings(data_dir=data),
                write(tmp_path / "proj"),
                sets=["identifier"],
                limit=3,
                progress=progress,
            )
        )
    assert said[-1] == "indexing 5 files with local:team/tiny"
    assert sorted(p.name for p in data.iterdir()) == ["models.json"]  # the user's dir untouched
