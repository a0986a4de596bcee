"""Synthetic prompts of a given length in tokens, for ``perfkit bench``.

Without a tokenizer, a prompt of *n* tokens is *n* words drawn from :data:`WORDS`: 1,024 of the
most common English words (wordfreq's ranking) that are each one token, with a leading space, in
the GPT-2, cl100k_base (GPT-4), o200k_base (GPT-4o), Llama 2 and Llama 3 vocabularies; the first
word of a prompt is one of the :data:`N_STARTERS` that are one token without the space too. Space-
separated, such text encodes to exactly *n* tokens with those five tokenizers (checked on 200
random prompts of 1-300 words each, special tokens not counted), but other models' tokenizers
(Qwen, Mistral, Gemma ...) may split a word: the length is then approximate and
:func:`make_prompt` says so (``exact=False``).

With a tokenizer (a ``tokenizer.json``, or a model folder holding one; needs the optional
``tokenizers`` package), the text is encoded, trimmed or padded and re-encoded until it has exactly
*n* tokens, not counting the special tokens (a BOS) or the chat template the server adds: the
server's ``usage.prompt_tokens`` is *n* plus those.

Every prompt is drawn from the caller's seeded generator, so prompts differ and a prefix cache
gets no free hits, unless ``shared_prefix_tokens`` asks for a common prefix (the same words in
every prompt, every run: drawn from :data:`PREFIX_SEED`), which measures the cache on purpose.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from perfkit.errors import ConfigError
from perfkit.sources.safeio import RefusedFile, read_capped
from perfkit.sources.safejson import load_json_bounded

_STARTER_TEXT = """
the to and of in is for that you it on with this was be as are have at he not by but from my or we
an your all so his they me if one can will just like about up out what has when more do no were who
had their there her which time get been would she new people how some also them now other its our
than good only after first him into know see two make over think any then could back these us want
because go well said way most much very where even should may here need really did right work year
years being day too going before off why made still take got many never those life say world down
great through last while best such love man home long look something use same used both every am
come part state three around between always better find help high little old since another does own
things under during game thing give house place school again next each without against end found
must show big feel sure team ever family keep might please put money free second someone away left
number city days lot name night play until company doing few let real called different having set
thought done getting government group looking public top women business care start system times week
anything case nothing person today change everything full live making point read yet bad four hard
mean once support tell including music power seen states stop water based call head men national
small white far job side though try went yes actually later less line order party run service
country open season thank children everyone general using area black law makes car face five kind
maybe per story working course games health important news within able book early friends
information local post thanks video young ago social talk court fact given half hand level mind
often single body coming control food hours office pay problem south true almost history known large
lost research room started taking win wrong along else girl matter pretty remember air bit friend
hit needs nice playing probably yeah class close comes past cause due happy human members months
move question series wait woman ask community data late leave north special watch either future
light low million short stay age buy deal rather reason red report soon third turn whether among
check development form heart services act although child fire fun living major media phone players
art building easy market near non plan quite six west works according available education final
former front list ready sometimes son street bring college current example heard meet program type
baby father process song study word action clear gets month outside self words board cost cut field
held instead main mother road thinking town energy fight fine force issue played points price rest
results running shows space term wife date land miss project site strong account especially eyes
include parents period position record similar total above club common film lead likely perfect
personal security share won center hold inside issues online player private return rights sense star
test view break event higher hour member middle needed present result sorry training answer boy
design girls gold gone interest king learn policy added alone average bank east hands hot medical
movie original park performance press received role sent worked worth bill books cool director
ground sound source usually value follow official production rate reading round save stand stuff tax
whatever amount blue drive eat fall fast felt green league management match model picture size step
trust central changes forward groups key mom page paid range review science trade upon character
chief cup football led lower natural property quality send style vote complete dog economic language
oil related stage terms title add article born met perhaps release technology turned written choice
code continue cover currently door events financial foreign hair legal pick race seven sign simple
staff super union walk bed built changed daily daughter figure hospital loss modern ones paper parts
popular published safe starting version voice whose writing earth goal internet practice rules sea
success ways access base below created deep mark missing offer pass professional released risk sleep
table ten truth ball box build card cases dark mine note percent piece products recent seeing
straight wall allowed boys culture growth pain places respect response river rock shall specific
standard write album charge cold create effect eight except eye limited moving network peace
provided required store student track via weight ahead allow anti beat brown capital committee
conference double gas normal population pressure radio station text western campaign content credit
cross female focus ice individual interesting join leading message region reported section sort
speed travel consider contact drop fair kid link positive sale extra forces jobs minute nature quick
sell unless agree clean computer episode favorite income justice levels manager photo posted scene
sold statement sun ability asking calling collection expected heavy includes knowledge particularly
search subject train wide
"""
_MORE_TEXT = """
however already enough told believe took came says trying following together whole president hope
least means others guys become several university anyone saying understand idea looks possible
wanted saw morning taken further minutes myself yourself asked behind political talking experience
chance march across gave himself students moment seems wants department hear summer beautiful goes
happened knew county couple happen industry problems weeks companies takes wish finally guess
society brought certain longer themselves tried areas became exactly giving meeting provide
questions relationship evidence lives countries federal feeling various attention brother cannot
looked involved itself serious decided decision enjoy entire poor situation website considered
council election increase lose seem simply began career difficult knows systems forget huge listen
okay sir towards waiting followed schools district minister visit wrote fans gives included married
speak century recently sales spent watching addition association difference expect island moved
plans potential treatment beginning certainly completely described despite husband kept loved miles
nearly particular previous quickly feet throughout tour welcome absolutely additional beyond
conditions earlier immediately leaving numbers significant studies winning construction movement
safety sounds spend teams announced coach continued costs definitely designed happens
"""
_STARTERS = _STARTER_TEXT.split()
_MORE = _MORE_TEXT.split()
WORDS: tuple[str, ...] = (*_STARTERS, *_MORE)
"""The vocabulary, by frequency within its two parts: starters first, then the words that are one
token only after a space."""
N_STARTERS = len(_STARTERS)
PREFIX_SEED = 20261118
"""Seed of the shared prefix's words: fixed, so every run and process sends the same prefix."""
MAX_PROMPT_TOKENS = 2**20
"""Longest prompt made (1,048,576 tokens, ~6.7 MB of text, ~60 ms to build): the longest context
windows served in practice are 1 M tokens (:data:`perfkit.loadgen.shapes.MAX_PROMPT_TOKENS`)."""
MAX_TOKENIZER_BYTES = 64 * 2**20
"""Largest tokenizer.json read: the biggest vocabularies (Gemma's 262k) take about 33 MB."""
FIT_ROUNDS = 8
"""Encode/trim/pad rounds before an exact length is given up (one or two suffice in practice)."""

_SPACED = np.array([" " + w for w in WORDS], dtype=object)
_SPACED_LIST: list[str] = _SPACED.tolist()


class Encoding(Protocol):
    ids: list[int]


class Tokenizer(Protocol):
    """What :func:`make_prompt` needs of a tokenizer: ``tokenizers.Tokenizer`` has it."""

    def encode(self, sequence: str, *, add_special_tokens: bool = ...) -> Encoding: ...

    def decode(self, ids: list[int]) -> str: ...


def make_prompt(
    n_tokens: int,
    rng: np.random.Generator,
    tokenizer: Tokenizer | str | Path | None = None,
    *,
    shared_prefix_tokens: int = 0,
) -> tuple[str, bool]:
    """``(text, exact)``: a prompt of ``n_tokens`` tokens, exactly when ``exact`` (module docstring).

    >>> text, exact = make_prompt(4, np.random.default_rng(0))
    >>> len(text.split()), exact
    (4, False)
    """
    n = _count(n_tokens, "prompt tokens", 1)
    k = _count(shared_prefix_tokens, "shared prefix tokens", 0)
    tok = _tokenizer(tokenizer)
    if tok is None:
        return _prefix_text(min(k, n)) + _words(n - min(k, n), rng, first=k == 0), False
    return _fit(tok, n, _exact_prefix(tok, k), k, rng)


def make_prompts(
    lengths: Any,
    rng: np.random.Generator,
    tokenizer: Tokenizer | str | Path | None = None,
    *,
    shared_prefix_tokens: int = 0,
) -> tuple[list[str], bool]:
    """``(texts, exact)``: one prompt per length in ``lengths`` (a plan's ``prompt_tokens``), as
    :func:`make_prompt` makes them but drawn in one go (100,000 prompts of 128 tokens: under a
    second); ``exact`` when every one has its exact length."""
    try:
        sizes = np.asarray(lengths, dtype=np.float64)
    except (TypeError, ValueError):
        sizes = np.array([np.nan])
    if (
        sizes.ndim != 1
        or (len(sizes) and not (sizes.min() >= 1 and sizes.max() <= MAX_PROMPT_TOKENS))
        or (sizes != np.floor(sizes)).any()
    ):
        raise ConfigError(f"prompt lengths must be one list of whole numbers from 1 to {MAX_PROMPT_TOKENS:,}")
    sizes = sizes.astype(np.int64)
    k = _count(shared_prefix_tokens, "shared prefix tokens", 0)
    tok = _tokenizer(tokenizer)
    if tok is not None:
        prefix = _exact_prefix(tok, k)
        fitted = [_fit(tok, int(n), prefix, k, rng) for n in sizes]
        return [t for t, _ in fitted], all(ok for _, ok in fitted)
    body = np.maximum(sizes - k, 0)
    ends = np.cumsum(body)
    flat = _SPACED[rng.integers(0, len(WORDS), int(ends[-1]) if len(ends) else 0)].tolist()
    if k == 0 and len(flat):  # each prompt's first word: a starter, without its space
        starts = ends - body
        flat_first = rng.integers(0, N_STARTERS, len(sizes)).tolist()
        texts = [
            WORDS[f] + "".join(flat[a + 1 : b])
            for f, a, b in zip(flat_first, starts.tolist(), ends.tolist(), strict=True)
        ]
        return texts, False
    prefix_text = _prefix_text(k)
    texts = [
        _prefix_text(int(n)) if n <= k else prefix_text + "".join(flat[b - m : b])
        for n, m, b in zip(sizes.tolist(), body.tolist(), ends.tolist(), strict=True)
    ]
    return texts, False


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from a ``tokenizer.json`` (or a folder holding one), read with
    a size bound. Raises :class:`~perfkit.errors.ConfigError` naming the file, or saying how to
    install ``tokenizers`` when it is missing."""
    return _load(str(path))


@lru_cache(maxsize=4)
def _load(path: str) -> Tokenizer:
    p = Path(path)
    p = p / "tokenizer.json" if p.is_dir() else p
    try:
        data = read_capped(p, MAX_TOKENIZER_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{p}: tokenizer file not found") from None
    except RefusedFile as err:
        raise ConfigError(f"{p}: tokenizer file refused: {err.reason}") from None
    except OSError as err:
        raise ConfigError(f"{p}: cannot read the tokenizer ({err.strerror or err})") from None
    try:
        module = importlib.import_module("tokenizers")
    except ImportError:
        raise ConfigError(
            f"{p}: exact prompt lengths need the tokenizers package: pip install tokenizers"
        ) from None
    try:
        tok: Tokenizer = module.Tokenizer.from_str(data.decode("utf-8", errors="replace"))
    except Exception as err:  # tokenizers raises plain Exceptions for a malformed file
        why = " ".join(str(err).split())[:200]
        raise ConfigError(f"{p}: not a tokenizer.json ({why or type(err).__name__})") from None
    return tok


def _tokenizer(tokenizer: Tokenizer | str | Path | None) -> Tokenizer | None:
    if tokenizer is None or (hasattr(tokenizer, "encode") and hasattr(tokenizer, "decode")):
        return tokenizer  # type: ignore[return-value]
    if isinstance(tokenizer, str | Path):
        return load_tokenizer(tokenizer)
    raise ConfigError(
        f"a tokenizer must be a tokenizer.json path or have encode/decode, not {type(tokenizer).__name__}"
    )


def _count(value: Any, what: str, low: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not low <= value <= MAX_PROMPT_TOKENS
    ):
        raise ConfigError(f"{what} must be a whole number from {low} to {MAX_PROMPT_TOKENS:,}, got {value!r}")
    return int(value)


def _words(n: int, rng: np.random.Generator, *, first: bool) -> str:
    """``n`` random words, each with its leading space, except a first (starter) word when ``first``."""
    if n <= 0:
        return ""
    idx = rng.integers(0, len(WORDS), n).tolist()
    if first:
        return WORDS[idx[0] * N_STARTERS // len(WORDS)] + "".join(map(_SPACED_LIST.__getitem__, idx[1:]))
    return "".join(map(_SPACED_LIST.__getitem__, idx))


@lru_cache(maxsize=64)
def _prefix_text(k: int) -> str:
    """The shared prefix of ``k`` words (``_prefix_text(j)`` starts ``_prefix_text(k)`` for j < k)."""
    return _words(k, np.random.default_rng(PREFIX_SEED), first=True) if k else ""


def _exact_prefix(tok: Tokenizer, k: int) -> str:
    """The shared prefix of exactly ``k`` tokens under ``tok`` ("" for none)."""
    if k == 0:
        return ""
    text, exact = _fit(tok, k, "", 0, np.random.default_rng(PREFIX_SEED))
    if not exact:
        raise ConfigError(f"cannot build a shared prefix of exactly {k} tokens with this tokenizer")
    return text


def _fit(tok: Tokenizer, n: int, prefix: str, k: int, rng: np.random.Generator) -> tuple[str, bool]:
    """``prefix`` (``k`` tokens) plus words, encoded and trimmed or padded until the whole is
    ``n`` tokens (the prefix's first ``n`` when it is longer); ``(text, False)`` if
    :data:`FIT_ROUNDS` rounds did not get there."""
    if k >= n:
        text = prefix if k == n else tok.decode(tok.encode(prefix, add_special_tokens=False).ids[:n])
        return text, len(tok.encode(text, add_special_tokens=False).ids) == n
    body = _words(n - k, rng, first=not prefix)
    for _ in range(FIT_ROUNDS):
        ids = tok.encode(prefix + body, add_special_tokens=False).ids
        if len(ids) == n:
            return prefix + body, True
        if len(ids) < n:
            body += _words(n - len(ids), rng, first=False)
        else:
            body = tok.decode(ids[k:n])
            if prefix and not body[:1].isspace():
                body = " " + body
    return prefix + body, False


# -- ShareGPT ---------------------------------------------------------------------------------------

MAX_SHAREGPT_BYTES = 64 * 2**20
"""Largest ShareGPT file read whole (its JSON objects take ~5x its size in memory): vLLM's usual
``ShareGPT_V3_unfiltered_cleaned_split.json`` (642 MB) is over it; take a subset first
(``jq '.[:20000]'``: ~25 MB)."""
CHARS_PER_TOKEN = 4
"""Without a tokenizer, a ShareGPT text's length in tokens is estimated as its characters over
this (English under GPT-style BPE vocabularies: about four characters a token)."""


def read_sharegpt(
    path: str | Path, n: int, seed: int, tokenizer: Tokenizer | str | Path | None = None
) -> tuple[list[str], np.ndarray, np.ndarray, str]:
    """``n`` requests from a ShareGPT file (vLLM's ``--dataset-name sharegpt``: a JSON list of
    ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``):
    each prompt is a conversation's first human turn and its output length the reply's length.
    Conversations are shuffled with ``seed`` and reused in turn when ``n`` is larger. Returns
    ``(prompts, prompt_tokens, output_tokens, note)``; lengths are exact with a tokenizer, else
    :data:`CHARS_PER_TOKEN` estimates. Raises :class:`~perfkit.errors.ConfigError` naming the file."""
    from perfkit.loadgen.shapes import MAX_OUTPUT_TOKENS
    from perfkit.loadgen.shapes import MAX_PROMPT_TOKENS as PLAN_MAX_PROMPT

    p = Path(path)
    try:
        data = read_capped(p, MAX_SHAREGPT_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{p}: ShareGPT file not found") from None
    except RefusedFile as err:
        raise ConfigError(
            f"{p}: ShareGPT file refused: {err.reason} (take a subset: jq '.[:20000]')"
        ) from None
    except OSError as err:
        raise ConfigError(f"{p}: cannot read the ShareGPT file ({err.strerror or err})") from None
    doc = load_json_bounded(data, source=str(p))  # refuses depth, value count, huge ints: file:line
    del data
    if not isinstance(doc, list):
        raise ConfigError(f"{p}: a ShareGPT file is a JSON list of conversations, not {type(doc).__name__}")
    pairs: list[tuple[str, str]] = []
    for entry in doc:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            continue
        k = next(
            (j for j, t in enumerate(turns) if isinstance(t, dict) and t.get("from") in ("human", "user")),
            None,
        )
        if k is None or k + 1 >= len(turns) or not isinstance(turns[k + 1], dict):
            continue
        prompt, reply = turns[k].get("value"), turns[k + 1].get("value")
        if isinstance(prompt, str) and isinstance(reply, str) and prompt.strip() and reply.strip():
            pairs.append((prompt, reply))
    del doc
    if not pairs:
        raise ConfigError(f"{p}: no conversation with a human turn and a reply (ShareGPT's 'conversations')")
    tok = _tokenizer(tokenizer)

    def count(text: str) -> int:
        if tok is not None:
            return len(tok.encode(text, add_special_tokens=False).ids)
        return -(-len(text) // CHARS_PER_TOKEN)

    order = np.random.default_rng(seed).permutation(len(pairs))
    prompts: list[str] = []
    p_len, o_len = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    lengths: dict[int, tuple[int, int]] = {}
    for i in range(n):
        j = int(order[i % len(order)])
        if j not in lengths:
            lengths[j] = (count(pairs[j][0]), count(pairs[j][1]))
        p_len[i], o_len[i] = lengths[j]
        prompts.append(pairs[j][0])
    if p_len.max() > PLAN_MAX_PROMPT:
        raise ConfigError(
            f"{p}: a prompt of {int(p_len.max()):,} tokens is over the {PLAN_MAX_PROMPT:,} limit"
        )
    p_len, o_len = p_len.clip(1), o_len.clip(1, MAX_OUTPUT_TOKENS)
    how = "tokenizer" if tok is not None else f"estimated: {CHARS_PER_TOKEN} characters a token"
    note = f"sharegpt {p.name}: {len(pairs):,} conversations, first human turn as prompt (lengths {how})"
    return prompts, p_len, o_len, note


def prompt_factory(
    seed: int, tokenizer: str | None, prompts: list[str] | None = None
) -> Callable[[int, int], str]:
    """Request i's prompt, built when it is sent (a long plan holds no prompts), or ``prompts[i]``
    (a dataset's texts; the warm-up's requests reuse them in turn)."""
    if prompts:
        return lambda i, tokens: prompts[i % len(prompts)]
    rng = np.random.default_rng(seed)
    tok = load_tokenizer(tokenizer) if tokenizer else None

    def prompt_for(i: int, tokens: int) -> str:
        return make_prompt(tokens, rng, tokenizer=tok)[0]

    return prompt_for
