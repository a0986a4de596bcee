"""Exact prompt lengths with a real Hugging Face ``tokenizers`` tokenizer (a dev dependency, so never skipped).

The tokenizers are trained here, offline, from perfkit's own word list: no hub download. Lengths are
counted with the tokenizer object the test built, not the one perfkit loaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from perfkit.errors import ConfigError
from perfkit.loadgen import prompts
from perfkit.loadgen.prompts import WORDS, load_tokenizer, make_prompt, make_prompts

LENGTHS = [1, 2, 9, 128, 300, 1000]


def _bpe() -> Tokenizer:
    """A byte-level BPE (GPT-2's scheme): merges across words make lengths non-trivial."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [" ".join(np.random.default_rng(i).choice(WORDS, 50)) for i in range(200)]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet))
    return tok


def _word_level() -> Tokenizer:
    """One token per word of a vocabulary that lacks half of perfkit's words (those become [UNK])."""
    vocab = {"[UNK]": 0} | {w: i + 1 for i, w in enumerate(WORDS[::2])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    return tok


def _count(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("build", [_bpe, _word_level])
def test_prompts_have_the_exact_token_counts(tmp_path, build):
    tok = build()
    (tmp_path / "model").mkdir()
    tok.save(str(tmp_path / "model" / "tokenizer.json"))
    prompts._load.cache_clear()
    texts, exact = make_prompts(LENGTHS, np.random.default_rng(8), tmp_path / "model")
    assert exact
    assert [_count(tok, t) for t in texts] == LENGTHS
    assert len(set(texts)) == len(texts)
    # one at a time, from the file path, and from the loaded object: the same exactness
    for n in (3, 77):
        text, one_exact = make_prompt(n, np.random.default_rng(n), tmp_path / "model" / "tokenizer.json")
        assert one_exact and _count(tok, text) == n
        text, one_exact = make_prompt(n, np.random.default_rng(n), load_tokenizer(tmp_path / "model"))
        assert one_exact and _count(tok, text) == n


def test_a_shared_prefix_is_the_same_tokens_in_every_prompt(tmp_path):
    tok = _bpe()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    prompts._load.cache_clear()
    texts, exact = make_prompts([200, 250, 300], np.random.default_rng(3), path, shared_prefix_tokens=64)
    assert exact and [_count(tok, t) for t in texts] == [200, 250, 300]
    heads = {tuple(tok.encode(t, add_special_tokens=False).ids[:64]) for t in texts}
    assert len(heads) == 1


def test_a_file_that_is_no_tokenizer_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "1.0", "model": 3}', encoding="utf-8")
    prompts._load.cache_clear()
    with pytest.raises(ConfigError, match="not a tokenizer.json") as err:
        load_tokenizer(bad)
    assert str(err.value).startswith(str(bad)) and "\n" not in str(err.value)
