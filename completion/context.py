"""Workspace context: what the prompt shows the model besides the lines above the cursor.

A front end hands the engine `ContextChunk`s (types.py): whole open documents, regions
the user recently edited, definitions of names near the cursor, snippets a client sent
(llama.cpp's `input_extra`, Tabby's `declarations`). `assemble` turns them, the text
before the cursor (already tokenized and windowed by the engine) and the text after it
into the prompt's tokens:

1. Pieces. A document is split into pieces at definitions (a `def`/`class`/`function`
   line at the top level or one indent in, or any top-level paragraph), small
   neighbours merged, long ones cut into windows; other chunks are one piece each.
2. Ranking. The identifiers around the cursor (`WINDOW_BEFORE` lines above, without
   the word being typed, and `WINDOW_AFTER` below) are compared with each piece's:
   Jaccard similarity, plus a bonus for every name the piece *defines* that is used
   near the cursor, plus recency (the chunk's rank by time) and a kind bonus (edits and
   definitions the caller picked). A document piece sharing no name is dropped.
3. Deduplication. A piece whose significant lines are mostly (`DUPLICATE_SHARE`)
   already in the prompt (the document near the cursor or a better piece) is dropped.
4. Budget. Pieces are taken best first while their tokens fit in the budget; the first
   that does not fit is cut to its leading lines (a definition's head) if enough budget
   is left. The rendered context is measured again and trimmed until it fits.
5. Layout. The chosen pieces are laid out oldest first (by chunk time, then path and
   position), grouped per file: a file header with the path (a comment in the
   document's language) or the family's file-separator and repo-name tokens
   (fim.py). The context goes first, then the document: what changes on every keystroke
   is at the end, so the model's KV cache keeps the context across keystrokes, and a
   piece that changes invalidates only the pieces after it — recently edited ones,
   which change most, sit last. The pieces the last prompt of the same document
   showed get a bonus (`STICKY_BONUS`), so typing does not swap them for slightly
   better ones and re-prefill everything after them.

With a FIM template the suffix goes between the sentinels; without one it is shown only
when `suffix_as_context` (a header and the first lines after the cursor, before the
document), which the engine leaves off unless measured to help.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import pairwise

from .fim import FimTemplate
from .types import ContextChunk

WINDOW_BEFORE = 40  # lines above the cursor whose names rank pieces
WINDOW_AFTER = 10  # lines below it
DEDUP_BEFORE = 200  # lines above the cursor that count as already shown
PIECE_LINES = 30  # a longer piece is cut into windows of this many lines
MERGE_LINES = 12  # neighbouring pieces are merged while they stay this short
MIN_CUT_TOKENS = 32  # a piece is cut to fit only when this much budget is left
DUPLICATE_SHARE = 0.8
SUFFIX_TOKENS = 256  # text after the cursor shown to a FIM model (or as context)
MAX_CHUNKS = 512  # chunks considered per request, most recent first
MAX_CHUNK_CHARS = 1_000_000  # a longer chunk is cut
MAX_PIECES = 8192
DEFINE_BONUS = 0.25
STICKY_BONUS = 0.2  # for a piece the previous prompt of the same document showed
RECENCY_BONUS = 0.15
KIND_BONUS = {"document": 0.0, "snippet": 0.05, "edit": 0.1, "definition": 0.2}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_IDENT_TAIL = re.compile(r"[A-Za-z0-9_]*\Z")
_COMMON = frozenset(keyword.kwlist) | {
    "self",
    "cls",
    "None",
    "True",
    "False",
    "function",
    "const",
    "let",
    "var",
    "this",
    "null",
    "true",
    "false",
    "new",
    "public",
    "private",
    "static",
    "void",
    "int",
    "str",
    "string",
    "return",
    "import",
    "from",
}
_DEFINES = re.compile(
    r"^[ \t]*(?:export\s+)?(?:async\s+)?(?:def|class|function|fn|func|struct|enum|interface|type|trait)\s+"
    r"([A-Za-z_][A-Za-z0-9_]*)"
    r"|^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=\n]*)?=(?!=)",
    re.MULTILINE,
)
_DEF_LINE = re.compile(
    r"(?:export\s+)?(?:async\s+)?(?:def|class|function|fn|func|struct|enum|interface|impl|trait)\b|@"
)
_HASH_COMMENT = {
    "python",
    "py",
    "pyi",
    "ruby",
    "rb",
    "shellscript",
    "sh",
    "bash",
    "zsh",
    "yaml",
    "yml",
    "toml",
    "r",
    "perl",
    "pl",
    "makefile",
    "dockerfile",
    "elixir",
    "ex",
    "exs",
    "julia",
    "jl",
    "nim",
    "powershell",
    "ps1",
    "coffeescript",
    "cmake",
    "conf",
    "ini",
}
_DASH_COMMENT = {"lua", "sql", "haskell", "hs", "elm", "ada", "vhdl"}


@dataclass(frozen=True)
class Piece:
    """A ranked part of a chunk."""

    text: str  # ends with a newline
    path: str | None
    time: float | None
    kind: str
    source: int  # index of its chunk in the request
    line: int  # first line, 0-based, within its chunk
    score: float = 0.0


@dataclass
class Prompt:
    tokens: list[int]  # what the model reads before the completion, BOS included
    tail: list[int]  # the tokens right before the completion in its own segment (CPC's context)
    context_tokens: int = 0  # tokens of other files, file headers and the suffix
    pieces: list[Piece] = field(default_factory=list)


# Text ---------------------------------------------------------------------------------------


def identifiers(text: str) -> frozenset[str]:
    """Names of three or more characters, without keywords and other very common words."""
    return frozenset(_IDENT.findall(text)) - _COMMON


def defined_names(text: str) -> frozenset[str]:
    """Names a piece defines: `def`/`class`/`function` ... and top-level assignments."""
    return frozenset(a or b for a, b in _DEFINES.findall(text)) - _COMMON


def comment_for(language: str | None, path: str | None) -> str:
    """The line-comment marker of the document's language (from its id or file suffix)."""
    lang = (language or "").lower().lstrip(".")
    if not lang and path and "." in path.rsplit("/", 1)[-1]:
        lang = path.rsplit(".", 1)[-1].lower()
    if lang in _HASH_COMMENT:
        return "#"
    if lang in _DASH_COMMENT:
        return "--"
    return "//"


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))


def _significant(line: str) -> str | None:
    s = line.strip()
    return s if len(s) >= 4 else None


@lru_cache(maxsize=256)
def _pieces_of(text: str, kind: str) -> tuple[tuple[int, str, frozenset, frozenset], ...]:
    """(first line, text, identifiers, defined names) of each piece of a chunk."""
    text = text[:MAX_CHUNK_CHARS]
    lines = text.splitlines(keepends=True)
    if not lines:
        return ()
    if kind != "document":
        spans = [(0, len(lines))]
    else:
        starts = [0]
        prev_blank = True
        prev_decorator = False
        for i, line in enumerate(lines):
            s = line.strip()
            if i and s and not prev_decorator:
                ind = _indent(line)
                if (ind <= 4 and _DEF_LINE.match(s)) or (ind == 0 and prev_blank and s[0] not in ")]}"):
                    starts.append(i)
            if s:
                prev_decorator = s.startswith("@")
            prev_blank = not s
        starts.append(len(lines))
        spans = []
        for a, b in pairwise(starts):
            if spans and (b - spans[-1][0]) <= MERGE_LINES:
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((a, b))
        cut = []
        for a, b in spans:
            while b - a > PIECE_LINES:
                cut.append((a, a + PIECE_LINES))
                a += PIECE_LINES
            cut.append((a, b))
        spans = cut
    out = []
    for a, b in spans[:MAX_PIECES]:
        body = "".join(lines[a:b])
        if not body.strip():
            continue
        if not body.endswith("\n"):
            body += "\n"
        out.append((a, body, identifiers(body), defined_names(body)))
    return tuple(out)


@lru_cache(maxsize=4096)
def _encode(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text))


def count_tokens(tokenizer, text: str) -> int:
    return len(_encode(tokenizer, text))


# Selection ----------------------------------------------------------------------------------


def _window(prefix: str, suffix: str) -> tuple[frozenset[str], set[str]]:
    """(names around the cursor, significant lines of the document already shown)."""
    head = prefix[: len(prefix) - len(_IDENT_TAIL.search(prefix[-256:]).group(0))]
    before = head.rsplit("\n", DEDUP_BEFORE)  # only the lines used: a long file is not split whole
    after = suffix.split("\n", WINDOW_AFTER + 1)[:WINDOW_AFTER]
    names = identifiers("\n".join(before[-WINDOW_BEFORE:]) + "\n" + "\n".join(after))
    shown = {s for line in (*before[-DEDUP_BEFORE:], *after) if (s := _significant(line))}
    return names, shown


def piece_key(p: Piece) -> tuple:
    return (p.path, p.kind, hash(p.text))


def rank(
    chunks: Sequence[ContextChunk], prefix: str, suffix: str, path: str | None = None, sticky: frozenset = frozenset()
) -> list[Piece]:
    """The pieces worth showing, best first, without duplicates (see the module doc).
    Pieces whose `piece_key` is in `sticky` (what the last prompt showed) rank higher, so
    that the context, and the KV cache behind it, changes only for a clearly better piece."""
    chunks = list(chunks)
    if len(chunks) > MAX_CHUNKS:
        order = sorted(range(len(chunks)), key=lambda i: -(chunks[i].time or float("-inf")))[:MAX_CHUNKS]
        chunks_at = sorted(order)
    else:
        chunks_at = list(range(len(chunks)))
    names, shown = _window(prefix, suffix)
    times = sorted({chunks[i].time for i in chunks_at if chunks[i].time is not None})
    recency = {t: (k + 1) / len(times) for k, t in enumerate(times)}
    scored: list[Piece] = []
    for i in chunks_at:
        c = chunks[i]
        if c.kind == "document" and path is not None and c.path == path:
            continue  # the document itself
        for line, text, ids, defs in _pieces_of(c.text, c.kind):
            common = ids & names
            if not common and c.kind == "document":
                continue
            jaccard = len(common) / len(ids | names) if ids or names else 0.0
            score = (
                jaccard
                + DEFINE_BONUS * min(4, len(defs & names))
                + RECENCY_BONUS * recency.get(c.time, 0.0)
                + KIND_BONUS[c.kind]
            )
            p = Piece(text, c.path, c.time, c.kind, i, line, score)
            if sticky and piece_key(p) in sticky:
                p = replace(p, score=score + STICKY_BONUS)
            scored.append(p)
    scored.sort(key=lambda p: (-p.score, p.source, p.line))
    kept = []
    for p in scored:
        lines = [s for line in p.text.split("\n") if (s := _significant(line))]
        if not lines:
            continue
        if sum(s in shown for s in lines) >= DUPLICATE_SHARE * len(lines):
            continue
        shown.update(lines)
        kept.append(p)
    return kept


def stable_order(pieces: Iterable[Piece]) -> list[Piece]:
    """Oldest first, then by file and position: the layout that changes least."""
    return sorted(
        pieces, key=lambda p: (p.time if p.time is not None else float("-inf"), p.path or "", p.source, p.line)
    )


def _cut_to(tokenizer, piece: Piece, budget: int) -> Piece | None:
    """The piece's leading lines that fit in `budget` tokens, or None."""
    lines = piece.text.splitlines(keepends=True)
    lo, hi = 0, len(lines)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(tokenizer, "".join(lines[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return replace(piece, text="".join(lines[:lo])) if lo else None


# Layout ---------------------------------------------------------------------------------------


def _groups(pieces: list[Piece]) -> list[tuple[str | None, str]]:
    """(path, text) per run of consecutive pieces from one file."""
    out: list[tuple[str | None, list[Piece]]] = []
    for p in pieces:
        if out and out[-1][0] == p.path and p.path is not None:
            out[-1][1].append(p)
        else:
            out.append((p.path, [p]))
    groups = []
    for path, ps in out:
        text = ps[0].text
        for a, b in pairwise(ps):
            adjacent = a.source == b.source and b.line == a.line + a.text.count("\n")
            text += b.text if adjacent else "\n" + b.text
        groups.append((path, text))
    return groups


def _comment_text(groups: list[tuple[str | None, str]], comment: str) -> str:
    return "".join((f"{comment} {path}\n" if path else "") + text + "\n" for path, text in groups)


def _render(tokenizer, template: FimTemplate | None, pieces: list[Piece], comment: str, repo: str | None) -> list[int]:
    """Tokens of the context pieces (no document, no suffix)."""
    groups = _groups(pieces)

    def enc(text: str) -> list[int]:
        return list(_encode(tokenizer, text)) if text else []

    if template is not None and template.family in ("qwen", "starcoder") and template.file_sep is not None:
        out = []
        if repo and template.repo_name is not None:
            out += [template.repo_name] + enc(repo + ("\n" if template.family == "qwen" else ""))
        for path, text in groups:
            out += [template.file_sep] + enc(f"{path or 'snippet'}\n{text}")
        return out
    if template is not None and template.family == "codegemma" and template.file_sep is not None:
        out = []
        for path, text in groups:
            out += enc((f"{comment} {path}\n" if path else "") + text) + [template.file_sep]
        return out
    return enc(_comment_text(groups, comment))


def select(
    tokenizer,
    chunks: Sequence[ContextChunk],
    *,
    prefix: str,
    suffix: str = "",
    budget: int,
    path: str | None = None,
    language: str | None = None,
    template: FimTemplate | None = None,
    repo: str | None = None,
    sticky: frozenset = frozenset(),
) -> tuple[list[Piece], list[int]]:
    """The pieces shown (in layout order) and their tokens, at most `budget` of them."""
    if budget <= 0 or not chunks:
        return [], []
    comment = comment_for(language, path)
    chosen: list[Piece] = []
    left = budget
    for p in rank(chunks, prefix, suffix, path, sticky):
        header = count_tokens(tokenizer, f"{comment} {p.path}\n") if p.path else 1
        need = count_tokens(tokenizer, p.text) + header
        if need <= left:
            chosen.append(p)
            left -= need
        elif left - header >= MIN_CUT_TOKENS:
            cut = _cut_to(tokenizer, p, left - header)
            if cut is not None:
                chosen.append(cut)
                left -= count_tokens(tokenizer, cut.text) + header
        if left < MIN_CUT_TOKENS:
            break
    while chosen:
        ordered = stable_order(chosen)
        tokens = _render(tokenizer, template, ordered, comment, repo)
        if len(tokens) <= budget:
            return ordered, tokens
        chosen.pop()  # the lowest-ranked piece
    return [], []


def suffix_head(tokenizer, suffix: str, limit: int = SUFFIX_TOKENS) -> str:
    """The text after the cursor up to `limit` tokens, ending at a line end when it is cut."""
    head = suffix[: limit * 8]
    tokens = _encode(tokenizer, head)
    if len(tokens) <= limit and len(head) == len(suffix):
        return head
    text = tokenizer.decode(tokens[:limit]).decode("utf-8", errors="ignore")
    nl = text.rfind("\n")
    return text[: nl + 1] if nl >= 0 else text


def assemble(
    tokenizer,
    prefix_tokens: Sequence[int],
    *,
    prefix: str,
    suffix: str = "",
    chunks: Sequence[ContextChunk] = (),
    budget: int = 0,
    path: str | None = None,
    language: str | None = None,
    repo: str | None = None,
    template: FimTemplate | None = None,
    suffix_as_context: bool = False,
    sticky: frozenset = frozenset(),
) -> Prompt:
    """The prompt: context, then the document's `prefix_tokens` (the tokens of the text
    before the cursor the model is to read, windowed, no BOS) laid out for `template`.

    `prefix` and `suffix` are the document's text before and after the cursor (for
    ranking, deduplication and the suffix section); `sticky`: the `piece_key`s of the
    pieces the last prompt for this document showed. Without context, template or
    suffix the result is BOS + `prefix_tokens`, as a plain prompt."""
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    prefix_tokens = list(prefix_tokens)
    comment = comment_for(language, path)
    pieces, ctx = select(
        tokenizer,
        chunks,
        prefix=prefix,
        suffix=suffix,
        budget=budget,
        path=path,
        language=language,
        template=template,
        repo=repo,
        sticky=sticky,
    )

    def enc(text: str) -> list[int]:
        return list(_encode(tokenizer, text)) if text else []

    here = path or "this file"
    if template is None:
        extra = ctx
        if suffix_as_context and suffix.strip():
            after = suffix_head(tokenizer, suffix)
            extra = extra + enc(
                f"{comment} {here}, below the cursor\n{after}" + ("" if after.endswith("\n") else "\n") + "\n"
            )
        if extra:
            extra = extra + enc(f"{comment} {here}\n")
        return Prompt(bos + extra + prefix_tokens, prefix_tokens, len(extra), pieces)
    after = enc(suffix_head(tokenizer, suffix))
    t = template
    if t.family in ("qwen", "starcoder") and t.file_sep is not None:
        head = list(ctx)
        if head:
            head += [t.file_sep]
            if t.family == "qwen":
                head += enc(f"{here}\n")
        before = [t.prefix] + (enc(f"{here}\n") if ctx and t.family == "starcoder" else [])
        tokens = bos + head + before + prefix_tokens + [t.suffix] + after + [t.middle]
        return Prompt(tokens, [], len(tokens) - len(bos) - len(prefix_tokens) - 3, pieces)
    header = enc(f"{comment} {here}\n") if ctx else []
    space = enc(" ") if t.space_after_prefix else []
    if t.family == "codegemma":
        before = ctx + [t.prefix] + header
    else:
        before = [t.prefix] + space + ctx + header
    if t.order == "spm":
        tokens = bos + [t.suffix] + after + before + prefix_tokens
        return Prompt(tokens, prefix_tokens, len(after) + len(ctx) + len(header), pieces)
    tokens = bos + before + prefix_tokens + [t.suffix] + after + [t.middle]
    return Prompt(tokens, [], len(after) + len(ctx) + len(header), pieces)
