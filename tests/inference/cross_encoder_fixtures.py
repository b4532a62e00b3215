"""A tiny random cross-encoder built in the test (a BERT with one label over a small
word-piece vocabulary, `word_pieces`), saved as a model folder: nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = (
    "the a of to in is it and def return class self import from for if else none true "
    "false parse header request response retry after cookie url path file read write "
    "json encode decode date time tax price total invoice customer order cart sum"
).split()


def word_pieces() -> list[str]:
    """The tiny models' word-piece vocabulary: BERT's special tokens, `WORDS`, single
    characters (whole and continuing) and punctuation."""
    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    return [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *WORDS,
        *chars,
        *(f"##{c}" for c in chars),
        *"_.,:;()[]{}=+-*/'\"#%",
    ]


def build_cross_encoder(folder: Path, seed: int = 7) -> Path:
    """A tiny random cross-encoder (BERT, one label) saved as a model folder."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = word_pieces()
    torch.manual_seed(seed)
    # A wider initialisation than BERT's 0.02, so a random model's scores differ by input.
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        num_labels=1,
        initializer_range=0.3,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(folder)
    return folder
