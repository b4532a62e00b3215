"""The answer counter with the default model's own tokenizer: counting a text by its pieces
between quotes, each piece once, gives the count of the text whole, exactly; a piece already
counted is not tokenized again; what it remembers stays under its bound; a tokenizer whose
tokens may span a quote counts every text whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fathom
from fathom.config import Settings
from fathom.server import answer_tokens
from fathom.server.answer_tokens import AnswerTokens, cuts_at_quotes

SOURCES = sorted((Path(fathom.__file__).parent / "server").glob("*.py"))[:12]


class Recording:
    """The real tokenizer, with every text it is asked to encode recorded."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.asked: list[str] = []

    def encode_batch(self, texts: list[str], **kwargs: Any) -> Any:
        self.asked += texts
        return self.tokenizer.encode_batch(texts, **kwargs)


@pytest.fixture(scope="module")
def default_tokenizer() -> Any:
    from tokenizers import Tokenizer

    folder = Settings().local_model_path
    assert AnswerTokens.from_folder(folder).by_pieces  # the default model's tokenizer is BERT's kind
    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def texts() -> list[str]:
    """Answers' kinds of text: source as the SDK sends it (JSON, every non-ASCII character
    escaped) and as it is, quotes escaped and not, words past WordPiece's 100 characters,
    CJK, accents, box drawing, the tokenizer's own tokens, quotes alone and at both ends."""
    out = []
    for path in SOURCES:
        source = path.read_text(encoding="utf-8")
        out += [source, json.dumps({"snippet": source, "path": str(path)}, separators=(",", ":"))]
        out.append(json.dumps({"snippet": source}, ensure_ascii=False))
    out += [
        '"' + "x" * 150 + '"y' + "z" * 99 + '"',
        'naïve "café" 東京の"ソース" ┌──┐ "',
        '""""',
        '"',
        "",
        'say \\"hi\\"\n\t"end',
        'the "[MASK]" and [SEP]"[CLS] tokens, "[PAD]x"',
        json.dumps({"table": "│ a │ b │", "emoji": "🙂", "ctrl": "\u0007\u0301"}),
    ]
    return out


def test_counting_by_pieces_is_the_whole_count_exactly(default_tokenizer):
    whole = AnswerTokens(default_tokenizer, key="whole")
    pieces = AnswerTokens(default_tokenizer, key="pieces", by_pieces=True)
    sample = texts()
    assert pieces.count(sample) == whole.count(sample)
    # And again, now from what it remembers, one text at a time and joined.
    assert [pieces.total(t) for t in sample] == whole.count(sample)
    joined = "".join(sample)
    assert pieces.total(joined) == whole.total(joined)


def test_a_piece_counted_once_is_not_tokenized_again(default_tokenizer):
    recording = Recording(default_tokenizer)
    counter = AnswerTokens(recording, key="pieces", by_pieces=True)
    results = [json.dumps({"rank": i, "snippet": f"def f{i}(): return {i}"}) for i in range(5)]
    costs = counter.count(results)
    recording.asked.clear()
    page = json.dumps({"results": [json.loads(r) for r in results], "found": 5})
    total = counter.total(page)
    # Only the page's own keys and brackets are new; every hit's pieces were counted with the
    # results.
    assert sorted(recording.asked) == sorted(["results", ": [{", "}, {", "}], ", "found", ": 5}"])
    assert total == AnswerTokens(default_tokenizer, key="whole").total(page)
    assert total > sum(costs) - 5  # the hits are in it


def test_what_it_remembers_stays_under_its_bound(default_tokenizer, monkeypatch):
    monkeypatch.setattr(answer_tokens, "PIECES_HELD", 64 * 40)  # about 14 short pieces
    counter = AnswerTokens(default_tokenizer, key="pieces", by_pieces=True)
    whole = AnswerTokens(default_tokenizer, key="whole")
    words = [f"piece number {i} of many" for i in range(400)]
    text = '"'.join(words)
    assert counter.total(text) == whole.total(text)
    assert 0 < counter._held_bytes <= answer_tokens.PIECES_HELD and 0 < len(counter._held) < 20
    assert "piece number 399 of many" in counter._held and "piece number 0 of many" not in counter._held
    huge = "y " * 40  # over PIECES_HELD // 64: counted, not kept
    assert counter.total(huge) == whole.total(huge) and huge not in counter._held


def test_a_tokenizer_whose_tokens_may_span_a_quote_counts_whole():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "a": 1, '"': 2, 'a"': 3}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[("a", '"')], unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # keeps `a"` one word: the merge spans it
    assert not cuts_at_quotes(bpe)
    counter = AnswerTokens.from_folder(None)  # no tokenizer: the estimate
    assert not counter.by_pieces and counter.total("abcdef") == 2
    recording = Recording(bpe)
    spanning = AnswerTokens(recording, key="bpe", by_pieces=cuts_at_quotes(bpe))
    assert spanning.total('a"a') == 2  # `a"` + `a`: by pieces it would be 3
    assert recording.asked == ['a"a']


def test_an_added_token_holding_a_quote_makes_it_count_whole():
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(Settings().local_model_path) / "tokenizer.json"))
    assert cuts_at_quotes(tokenizer)
    tokenizer.add_tokens(['x"y'])  # matched in the text before anything cuts it
    assert not cuts_at_quotes(tokenizer)
