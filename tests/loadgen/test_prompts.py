"""Synthetic prompts: approximate by word count without a tokenizer, exact with one."""

from __future__ import annotations

import time

import numpy as np
import pytest

from perfkit.errors import ConfigError
from perfkit.loadgen import prompts
from perfkit.loadgen.prompts import N_STARTERS, WORDS, load_tokenizer, make_prompt, make_prompts


def test_the_vocabulary_is_plain_common_words():
    assert len(WORDS) == 1024 and len(set(WORDS)) == len(WORDS)
    assert all(w.isascii() and w.isalpha() and w.islower() for w in WORDS)
    assert 0 < N_STARTERS < len(WORDS)
    assert {"the", "and", "people", "time"} <= set(WORDS[:N_STARTERS])


def test_without_a_tokenizer_a_prompt_is_n_words_and_says_it_is_approximate():
    rng = np.random.default_rng(0)
    for n in (1, 2, 17, 128, 3000):
        text, exact = make_prompt(n, rng)
        words = text.split(" ")
        assert len(words) == n and not exact
        assert set(words) <= set(WORDS) and words[0] in WORDS[:N_STARTERS]


def test_prompts_are_seeded_and_differ_per_request():
    a = [make_prompt(64, np.random.default_rng(1))[0] for _ in range(2)]
    assert a[0] == a[1]  # same seed, same prompt
    rng = np.random.default_rng(1)
    texts = [make_prompt(64, rng)[0] for _ in range(200)]
    assert len({tuple(t.split(" ")[:16]) for t in texts}) == 200  # no two share a first 16-token block


def test_a_shared_prefix_is_the_same_in_every_prompt():
    rng = np.random.default_rng(2)
    texts = [make_prompt(100, rng, shared_prefix_tokens=32)[0] for _ in range(50)]
    heads = {" ".join(t.split(" ")[:32]) for t in texts}
    tails = {" ".join(t.split(" ")[32:48]) for t in texts}
    assert len(heads) == 1 and len(tails) == 50
    assert all(len(t.split(" ")) == 100 for t in texts)
    other_run = make_prompt(100, np.random.default_rng(99), shared_prefix_tokens=32)[0]
    assert other_run.startswith(heads.pop() + " ")  # fixed across runs and processes
    short, _ = make_prompt(8, rng, shared_prefix_tokens=32)  # shorter than the prefix: its start
    assert texts[0].startswith(short + " ") and len(short.split(" ")) == 8


def test_make_prompts_in_bulk_is_fast():
    rng = np.random.default_rng(3)
    start = time.perf_counter()
    texts, exact = make_prompts(np.full(100_000, 128), rng)
    elapsed = time.perf_counter() - start
    assert len(texts) == 100_000 and not exact
    assert {len(t.split(" ")) for t in texts[:1000]} == {128}
    assert len(set(texts[:1000])) == 1000
    assert elapsed < 5.0  # measured 0.7 s on a shared 2-core machine


def test_make_prompts_takes_a_plans_lengths():
    lengths = np.array([3, 1, 40, 7], dtype=np.int32)
    texts, _ = make_prompts(lengths, np.random.default_rng(4), shared_prefix_tokens=5)
    assert [len(t.split(" ")) for t in texts] == [3, 1, 40, 7]
    assert texts[3].split(" ")[:5] == texts[2].split(" ")[:5]
    assert texts[0].split(" ") == texts[2].split(" ")[:3]  # shorter than the prefix: its start
    with pytest.raises(ConfigError, match="prompt lengths"):
        make_prompts([3, 0], np.random.default_rng(0))
    with pytest.raises(ConfigError, match="prompt lengths"):
        make_prompts([2.5], np.random.default_rng(0))
    with pytest.raises(ConfigError, match="prompt lengths"):
        make_prompts(["many"], np.random.default_rng(0))


@pytest.mark.parametrize("n, prefix", [(0, 0), (True, 0), (5, -1), (2**25, 0)])
def test_bad_lengths_are_refused(n, prefix):
    with pytest.raises(ConfigError):
        make_prompt(n, np.random.default_rng(0), shared_prefix_tokens=prefix)


class _Encoding:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class PieceTokenizer:
    """A stand-in with the ``tokenizers.Tokenizer`` interface: every word is cut into pieces of up to
    ``piece`` letters (the first carrying the word's leading space), so most words take 2-3
    tokens and a prompt's length must be found by encoding, trimming and padding."""

    def __init__(self, piece: int = 3) -> None:
        self.piece = piece
        self.vocab: dict[str, int] = {}
        self.inverse: list[str] = []

    def _id(self, token: str) -> int:
        if token not in self.vocab:
            self.vocab[token] = len(self.inverse)
            self.inverse.append(token)
        return self.vocab[token]

    def encode(self, sequence: str, *, add_special_tokens: bool = True) -> _Encoding:
        ids = [self._id("<s>")] if add_special_tokens else []
        word = ""
        for ch in sequence + " ":
            if ch == " " and word.strip():
                chunks = [word[: self.piece + 1]] + [
                    word[i : i + self.piece] for i in range(self.piece + 1, len(word), self.piece)
                ]
                ids += [self._id(c) for c in chunks]
                word = ch
            else:
                word += ch
        return _Encoding(ids)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.inverse[i] for i in ids if self.inverse[i] != "<s>")


class EvenTokenizer(PieceTokenizer):
    """Every encoding has an even number of tokens: an odd length cannot be reached."""

    def encode(self, sequence: str, *, add_special_tokens: bool = True) -> _Encoding:
        ids = super().encode(sequence, add_special_tokens=add_special_tokens).ids
        return _Encoding(ids + [self._id(".")] if len(ids) % 2 else ids)


def test_with_a_tokenizer_the_length_is_exact():
    tok = PieceTokenizer()
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 5, 16, 127, 128, 1000):
        text, exact = make_prompt(n, rng, tok)
        assert exact and len(tok.encode(text, add_special_tokens=False).ids) == n, n
    words = make_prompt(64, rng)[0].split(" ")
    assert len(tok.encode(" ".join(words), add_special_tokens=False).ids) > 64  # the words alone overshoot


def test_an_exact_shared_prefix():
    tok = PieceTokenizer()
    texts, exact = make_prompts([40, 50, 64, 20, 7], np.random.default_rng(6), tok, shared_prefix_tokens=20)
    assert exact
    assert [len(tok.encode(t, add_special_tokens=False).ids) for t in texts] == [40, 50, 64, 20, 7]
    prefix = texts[3]
    assert all(t.startswith(prefix) for t in texts[:3]) and len(set(texts)) == 5
    assert prefix.startswith(texts[4])  # shorter than the prefix: its first 7 tokens
    one, exact_one = make_prompt(30, np.random.default_rng(60), tok, shared_prefix_tokens=20)
    assert exact_one and one.startswith(prefix)  # the same prefix in every call


def test_an_unreachable_length_is_not_called_exact():
    text, exact = make_prompt(7, np.random.default_rng(7), EvenTokenizer())
    assert not exact and text


def test_a_tokenizer_must_have_encode_and_decode():
    with pytest.raises(ConfigError, match="encode/decode"):
        make_prompt(5, np.random.default_rng(0), tokenizer=42)  # type: ignore[arg-type]


def test_tokenizer_files_are_checked(tmp_path):
    prompts._load.cache_clear()
    with pytest.raises(ConfigError, match="tokenizer file not found"):
        load_tokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(ConfigError, match="tokenizer file not found"):
        load_tokenizer(tmp_path)  # a model folder without one
    bad = tmp_path / "bad.json"
    bad.write_text("{not a tokenizer", encoding="utf-8")
    # tokenizers is a dev dependency; its exact lengths: tests/loadgen/test_prompts_tokenizer.py
    with pytest.raises(ConfigError, match="not a tokenizer.json") as err:
        load_tokenizer(bad)
    assert str(err.value).startswith(str(bad)) and "\n" not in str(err.value)
