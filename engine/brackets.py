"""A lexical grammar for ordinary source code that keeps brackets balanced.

Without knowing a language's full syntax, a completion can still be kept from doing
the two things that break code most: closing a bracket that is not open (or in the
wrong order), and leaving a string or comment open. The grammar here sees code as
text with three kinds of structure: the brackets `()`, `[]`, `{}`, string literals and
comments. Inside strings and comments brackets mean nothing.

The cursor usually sits inside some brackets, maybe inside a string. `open_context_at`
scans the code before the cursor and returns that stack of openers (outermost
first, e.g. `({"`), and `code_brackets_grammar(context)` accepts exactly the
completions that may close some of those openers, innermost first, never more:

    start  -> ctx_k                      (cursor inside k brackets)
    ctx_j  -> balanced | balanced CLOSE_j ctx_{j-1}
    ctx_0  -> balanced

and, with a string or comment open at the cursor, `start -> K_OPEN? | K_REST ctx_k`.
The lexemes and `balanced` live in grammars/code_brackets.lark; this module appends the
language's TEXT terminal and `atom` rule and the start rules above.

Each language is a choice of string and comment kinds (the terminal families of the
template) plus a few word rules (shell and YAML `#` and YAML `'` inside a word are
text). The scanner below implements the same kinds by hand, so `open_context_at` and
the grammar agree on where strings and comments begin and end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .grammar import Grammar
from .lark import compile_lark
from .limits import GrammarError, LimitExceeded

# Open brackets a grammar may be parameterised by: each adds a rule, and a stack this
# deep means the scan went wrong rather than a real program.
MAX_OPEN_DEPTH = 1000

_CLOSER = {"(": ")", "[": "]", "{": "}"}
_ASCII_SPACE = " \t\n\r\f\v"  # what `\s` means in TEXT's regex
_OPENER_OF = {v: k for k, v in _CLOSER.items()}


@dataclass(frozen=True)
class _Kind:
    """A string or comment form: the terminal family K, K_REST, K_OPEN in the template."""

    name: str
    opener: str
    closer: str  # "\n" for line comments (the newline itself stays code)
    escape: bool = False  # a backslash escapes the next character
    multiline: bool = False
    doubled: bool = False  # a doubled closer stands for itself (YAML '')


_KINDS = {
    k.name: k
    for k in (
        _Kind("DQ", '"', '"', escape=True),
        _Kind("DQ_ML", '"', '"', escape=True, multiline=True),
        _Kind("SQ", "'", "'", escape=True),
        _Kind("SQ_ML", "'", "'", escape=True, multiline=True),
        _Kind("SQ_RAW", "'", "'"),
        _Kind("SQ_RAW_ML", "'", "'", multiline=True),
        _Kind("SQ_YAML", "'", "'", multiline=True, doubled=True),
        _Kind("BT", "`", "`", escape=True, multiline=True),
        _Kind("BT_RAW", "`", "`", multiline=True),
        _Kind("TDQ", '"""', '"""', escape=True, multiline=True),
        _Kind("TSQ", "'''", "'''", escape=True, multiline=True),
        _Kind("TSQ_RAW", "'''", "'''", multiline=True),
        _Kind("RUST_CHAR", "'", "'", escape=True),
        _Kind("LINE_SLASH", "//", "\n", multiline=True),
        _Kind("LINE_HASH", "#", "\n", multiline=True),
        _Kind("BLOCK", "/*", "*/", multiline=True),
    )
}


@dataclass(frozen=True)
class LanguageSyntax:
    """What a language's strings and comments look like, as far as brackets care."""

    name: str
    kinds: tuple[str, ...]
    hash_in_word: bool = False  # '#' right after a non-space character is text (shell, YAML)
    apostrophe_in_word: bool = False  # "'" right after a non-space character is text (YAML, prose)
    backslash_escapes: bool = False  # outside strings, '\x' is the character x (shell)
    brace_hash: bool = False  # '{#' opens a brace without starting a comment (shell ${#x})
    lifetimes: bool = False  # Rust: 'a is a lifetime, 'a' a character

    def kind_for_opener(self, opener: str) -> _Kind | None:
        for name in self.kinds:
            if _KINDS[name].opener == opener:
                return _KINDS[name]
        return None

    @property
    def openers(self) -> list[str]:
        # Longest first, so `"""` is tried before `"`.
        return sorted({_KINDS[k].opener for k in self.kinds}, key=len, reverse=True)


_C_LIKE = ("DQ", "SQ", "LINE_SLASH", "BLOCK")
_C_LIKE_TEXT_BLOCKS = ("TDQ", "DQ", "SQ", "LINE_SLASH", "BLOCK")

_LANGUAGES = {
    s.name: s
    for s in (
        LanguageSyntax("generic", ("DQ", "SQ"), apostrophe_in_word=True),
        LanguageSyntax("python", ("TDQ", "TSQ", "DQ", "SQ", "LINE_HASH")),
        LanguageSyntax(
            "shell",
            ("DQ_ML", "SQ_RAW_ML", "BT", "LINE_HASH"),
            hash_in_word=True,
            backslash_escapes=True,
            brace_hash=True,
        ),
        LanguageSyntax("yaml", ("DQ_ML", "SQ_YAML", "LINE_HASH"), hash_in_word=True, apostrophe_in_word=True),
        LanguageSyntax("toml", ("TDQ", "TSQ_RAW", "DQ", "SQ_RAW", "LINE_HASH")),
        LanguageSyntax("ruby", ("DQ_ML", "SQ_ML", "BT", "LINE_HASH")),
        LanguageSyntax("c", _C_LIKE),
        LanguageSyntax("cpp", _C_LIKE),
        LanguageSyntax("java", _C_LIKE_TEXT_BLOCKS),
        LanguageSyntax("csharp", _C_LIKE_TEXT_BLOCKS),
        LanguageSyntax("kotlin", _C_LIKE_TEXT_BLOCKS),
        LanguageSyntax("swift", _C_LIKE_TEXT_BLOCKS),
        LanguageSyntax("scala", _C_LIKE_TEXT_BLOCKS),
        LanguageSyntax("javascript", ("DQ", "SQ", "BT", "LINE_SLASH", "BLOCK")),
        LanguageSyntax("typescript", ("DQ", "SQ", "BT", "LINE_SLASH", "BLOCK")),
        LanguageSyntax("go", ("DQ", "SQ", "BT_RAW", "LINE_SLASH", "BLOCK")),
        LanguageSyntax("rust", ("DQ_ML", "RUST_CHAR", "LINE_SLASH", "BLOCK"), lifetimes=True),
        LanguageSyntax("json", ("DQ",)),
        LanguageSyntax("jsonc", ("DQ", "LINE_SLASH", "BLOCK")),
    )
}

# LSP language ids and common short names.
_ALIASES = {
    "py": "python",
    "python3": "python",
    "shellscript": "shell",
    "sh": "shell",
    "bash": "shell",
    "zsh": "shell",
    "yml": "yaml",
    "rb": "ruby",
    "h": "c",
    "c++": "cpp",
    "cc": "cpp",
    "cxx": "cpp",
    "hpp": "cpp",
    "objective-c": "c",
    "objective-cpp": "cpp",
    "cs": "csharp",
    "c#": "csharp",
    "kt": "kotlin",
    "js": "javascript",
    "jsx": "javascript",
    "javascriptreact": "javascript",
    "mjs": "javascript",
    "ts": "typescript",
    "tsx": "typescript",
    "typescriptreact": "typescript",
    "golang": "go",
    "rs": "rust",
}


def known_languages() -> list[str]:
    """Language names with their own syntax table (others fall back to "generic")."""
    return sorted(_LANGUAGES)


def language_syntax(language: str | None) -> LanguageSyntax:
    """The syntax table for an LSP language id or short name; unknown ones get "generic"."""
    if language is None:
        return _LANGUAGES["generic"]
    key = language.strip().lower()
    key = _ALIASES.get(key, key)
    return _LANGUAGES.get(key, _LANGUAGES["generic"])


# ---------------------------------------------------------------------------------------
# The scanner


def open_context_at(prefix_text: str, language: str | None = None) -> str:
    """The brackets (and string or comment) open at the end of `prefix_text`.

    Returns the openers, outermost first: e.g. `"({"`, or `'(\\"'` when the cursor is
    inside a double-quoted string inside a parenthesis. Strings and comments are
    skipped with the language's rules. Broken code is tolerated: a closer pops back
    to its matching opener (dropping unclosed ones inside it) or is ignored when none
    is open, and a one-line string left open at a newline ends there.
    """
    syn = language_syntax(language)
    text = prefix_text
    n = len(text)
    stack: list[str] = []
    open_count = {"(": 0, "[": 0, "{": 0}  # membership in O(1): mismatched closers stay linear
    openers = syn.openers
    has_slash_comments = any(_KINDS[k].opener.startswith("/") for k in syn.kinds)
    word_chars = ("#" if syn.hash_in_word else "") + ("'" if syn.apostrophe_in_word else "")
    # Whether the previous character is a non-space character of the current TEXT
    # lexeme: only then does '#' or "'" continue a word (the TEXT terminal's rule).
    after_word = False
    special = "()[]{}" + "".join(o[0] for o in openers) + word_chars + ("\\" if syn.backslash_escapes else "") + "'"
    plain_run = re.compile(f"[^{re.escape(special)}]+")
    i = 0
    while i < n:
        m = plain_run.match(text, i)
        if m:  # a stretch of code text, skipped in one step
            i = m.end()
            after_word = text[i - 1] not in _ASCII_SPACE
            if i >= n:
                break
        c = text[i]
        if c in _CLOSER:
            stack.append(c)
            open_count[c] += 1
            i += 2 if syn.brace_hash and text.startswith("{#", i) else 1
            after_word = False
            continue
        if c in _OPENER_OF:
            want = _OPENER_OF[c]
            if open_count[want]:
                # Pops the unclosed openers inside the match too (broken code).
                while True:
                    top = stack.pop()
                    open_count[top] -= 1
                    if top == want:
                        break
            i += 1
            after_word = False
            continue
        if syn.backslash_escapes and c == "\\":
            i += 2
            after_word = True
            continue
        if after_word and c in word_chars:
            i += 1
            continue
        if syn.lifetimes and c == "'":
            end = _rust_quote(text, i)
            if end is None:
                return "".join(stack) + "'"
            i = end
            after_word = False
            continue
        opener = next((o for o in openers if text.startswith(o, i)), None)
        if opener is None:
            i += 1
            after_word = c not in _ASCII_SPACE and not (c == "/" and has_slash_comments)
            continue
        kind = syn.kind_for_opener(opener)
        assert kind is not None
        end = _skip_literal(text, i, kind)
        if end is None:
            return "".join(stack) + opener
        i = end
        after_word = False
    return "".join(stack)


def _skip_literal(text: str, i: int, kind: _Kind) -> int | None:
    """End of the string/comment of `kind` starting at i, or None if the text ends inside it."""
    n = len(text)
    j = i + len(kind.opener)
    closer = kind.closer
    while j < n:
        c = text[j]
        if kind.escape and c == "\\":
            j += 2
            continue
        if closer == "\n":
            k = text.find("\n", j)
            return None if k < 0 else k
        if text.startswith(closer, j):
            if kind.doubled and text.startswith(closer * 2, j):
                j += 2 * len(closer)
                continue
            return j + len(closer)
        if c == "\n" and not kind.multiline:
            return j  # broken code: a one-line string ends with its line
        j += 1
    return None


_RUST_CHAR = re.compile(r"'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|[^xu\n]))'")
_RUST_LIFETIME = re.compile(r"'[A-Za-z_][A-Za-z0-9_]*")
_RUST_CHAR_PREFIX = re.compile(r"'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{0,2}|u(?:\{[0-9a-fA-F]{0,6})?|[^xu\n])?)?\Z")


def _rust_quote(text: str, i: int) -> int | None:
    """After a Rust `'`: end of the character literal or lifetime, None if the text ends
    inside a character literal. The lexer's greedy rule decides `'a'` (a character)
    versus `'a` (a lifetime); at the very end, `'a` counts as a lifetime."""
    m = _RUST_CHAR.match(text, i)
    if m:
        return m.end()
    m = _RUST_LIFETIME.match(text, i)
    if m:
        return m.end()
    if _RUST_CHAR_PREFIX.match(text, i):
        return None
    return i + 1  # broken code: a stray quote


# ---------------------------------------------------------------------------------------
# The grammar


def _parse_context(open_context: str, syn: LanguageSyntax) -> tuple[str, _Kind | None]:
    """Splits a context into its brackets and the string/comment kind open at the end."""
    i = 0
    while i < len(open_context) and open_context[i] in _CLOSER:
        i += 1
    brackets, tail = open_context[:i], open_context[i:]
    if not tail:
        return brackets, None
    kind = syn.kind_for_opener(tail)
    if kind is None:
        known = ", ".join(repr(o) for o in syn.openers) or "none"
        raise GrammarError(
            f"open context {open_context!r}: {tail!r} at offset {i} is neither a bracket nor a string or "
            f"comment opener of {syn.name} (openers: {known}); only the last item may be a string or comment"
        )
    return brackets, kind


def _char_class(chars: str) -> str:
    return "".join("\\" + c if c in "\\]^-[/" else c for c in sorted(set(chars)))


def _text_terminal(syn: LanguageSyntax) -> str:
    """TEXT: a run of code that is no bracket, string or comment start."""
    structural = "()[]{}" + "".join(_KINDS[k].opener[0] for k in syn.kinds)
    if syn.lifetimes:
        structural += "'"
    word = ("#" if syn.hash_in_word else "") + ("'" if syn.apostrophe_in_word else "")
    if syn.backslash_escapes:
        structural += "\\"
    plain = _char_class(structural)
    if not word and not syn.backslash_escapes:
        return f"TEXT: /[^{plain}]+/"
    units = [f"[^{plain}\\s]"]
    if syn.backslash_escapes:
        units.append(r"\\(?:.|\n)")
    unit = "(?:" + "|".join(units) + ")"
    tail = f"[{_char_class(word)}]*" if word else ""
    return f"TEXT: /(?:{unit}{tail}|\\s)+/"


def _lark_text(brackets: str, kind: _Kind | None, syn: LanguageSyntax, template: str) -> str:
    atoms = ["TEXT"] + list(syn.kinds)
    if any(_KINDS[k].opener.startswith("/") for k in syn.kinds):
        atoms.append("SLASH")
    if syn.lifetimes:
        atoms.append("RUST_LIFETIME")
    if syn.brace_hash:
        atoms.append('BRACE_HASH balanced "}"')
    lines = [template, "", f"// generated for language {syn.name!r}, open context {brackets!r}"]
    lines.append(_text_terminal(syn))
    lines.append("atom: " + " | ".join(atoms))
    k = len(brackets)
    if kind is None:
        lines.append(f"start: ctx{k}")
    else:
        lines.append(f"start: | {kind.name}_OPEN | {kind.name}_REST ctx{k}")
    for j in range(k, 0, -1):
        closer = _CLOSER[brackets[j - 1]]
        lines.append(f'ctx{j}: balanced | balanced "{closer}" ctx{j - 1}')
    lines.append("ctx0: balanced")
    return "\n".join(lines) + "\n"


def code_brackets_lark(open_context: str = "", *, language: str | None = None) -> str:
    """The Lark text `code_brackets_grammar` compiles (for inspection and tests)."""
    from midword.grammars import read_grammar

    syn = language_syntax(language)
    if len(open_context) > MAX_OPEN_DEPTH:
        raise LimitExceeded("open_context_depth", MAX_OPEN_DEPTH, f"open context of {len(open_context)} openers")
    brackets, kind = _parse_context(open_context, syn)
    return _lark_text(brackets, kind, syn, read_grammar("code_brackets.lark"))


@lru_cache(maxsize=128)
def _cached_grammar(open_context: str, language_key: str) -> Grammar:
    return compile_lark(code_brackets_lark(open_context, language=language_key))


def code_brackets_grammar(open_context: str = "", *, language: str | None = None) -> Grammar:
    """Balanced code that may close `open_context` (outermost first) innermost-first.

    `open_context` is what `open_context_at` returns: brackets `([{`, optionally ending
    with the opener of the string or comment the cursor is in (`"`, `'`, `` ` ``, `\"\"\"`,
    `'''`, `//`, `/*`, `#`, as the language has them).
    """
    return _cached_grammar(open_context, language_syntax(language).name)
