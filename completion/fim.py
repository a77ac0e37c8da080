"""Fill-in-the-middle templates, found from a tokenizer's own special tokens.

Code models trained with fill-in-the-middle read the text before and after the cursor
marked by sentinel tokens and write the middle. Each family spells its sentinels its own
way, and some have tokens for a repository name and for file boundaries that
repository-level training used:

| family | sentinels | order | files |
|---|---|---|---|
| starcoder (StarCoder, StarCoder2, SantaCoder) | `<fim_prefix>` `<fim_suffix>` `<fim_middle>` | PSM | `<repo_name>`, `<file_sep>` |
| qwen (Qwen2.5-Coder) | `<\\|fim_prefix\\|>` `<\\|fim_suffix\\|>` `<\\|fim_middle\\|>` | PSM | `<\\|repo_name\\|>`, `<\\|file_sep\\|>` |
| codegemma | `<\\|fim_prefix\\|>` `<\\|fim_suffix\\|>` `<\\|fim_middle\\|>` | PSM | `<\\|file_separator\\|>` |
| codellama | `<PRE>` `<SUF>` `<MID>` (sentencepiece: `▁<PRE>`) | PSM | comment headers |
| deepseek (DeepSeek-Coder) | `<｜fim▁begin｜>` `<｜fim▁hole｜>` `<｜fim▁end｜>` | PSM | comment headers |
| codestral | `[SUFFIX]` `[PREFIX]` (the middle follows the prefix) | SPM | comment headers |

PSM (prefix, suffix, middle) ends the prompt with the middle sentinel: the text the
model writes starts there, so the typed part of a word cut by the cursor moves out of
the prefix section into the middle, where character prefix conditioning re-spells it as
usual. SPM puts the prefix last, so the prompt ends at the cursor as without FIM.

A template is used only when every sentinel it needs is a single token of the
tokenizer (the model was trained with them); a model with none of them (Gemma 3) gets
None and a plain left-to-right prompt. The tokens a family ends a middle with (`<EOT>`,
`<|fim_pad|>`, a file separator) are stop tokens of the completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Order = Literal["psm", "spm"]


@dataclass(frozen=True)
class FimTemplate:
    family: str
    order: Order
    prefix: int  # sentinel ids
    suffix: int
    middle: int | None  # None where the family has no middle sentinel (suffix-prefix order)
    repo_name: int | None = None
    file_sep: int | None = None
    stop: frozenset[int] = frozenset()
    # The family's tokenizer puts a space before the text of a prompt (sentencepiece's
    # dummy prefix), and its training prompts had one after the prefix sentinel.
    space_after_prefix: bool = False

    def token_ids(self) -> frozenset[int]:
        return frozenset(
            t for t in (self.prefix, self.suffix, self.middle, self.repo_name, self.file_sep) if t is not None
        )


# family -> (order, {role: spellings, first found wins}, stop spellings, space_after_prefix).
# Roles: prefix, suffix, middle (required unless missing from the tuple), repo_name, file_sep.
_FAMILIES: tuple[tuple[str, Order, dict[str, tuple[str, ...]], tuple[str, ...], bool], ...] = (
    (
        "codegemma",
        "psm",
        {
            "prefix": ("<|fim_prefix|>",),
            "suffix": ("<|fim_suffix|>",),
            "middle": ("<|fim_middle|>",),
            "file_sep": ("<|file_separator|>",),
        },
        ("<|file_separator|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
        False,
    ),
    (
        "qwen",
        "psm",
        {
            "prefix": ("<|fim_prefix|>",),
            "suffix": ("<|fim_suffix|>",),
            "middle": ("<|fim_middle|>",),
            "repo_name": ("<|repo_name|>",),
            "file_sep": ("<|file_sep|>",),
        },
        ("<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|endoftext|>", "<|im_end|>"),
        False,
    ),
    (
        "starcoder",
        "psm",
        {
            "prefix": ("<fim_prefix>", "<fim-prefix>"),
            "suffix": ("<fim_suffix>", "<fim-suffix>"),
            "middle": ("<fim_middle>", "<fim-middle>"),
            "repo_name": ("<repo_name>", "<reponame>"),
            "file_sep": ("<file_sep>",),
        },
        ("<fim_pad>", "<fim-pad>", "<file_sep>", "<|endoftext|>"),
        False,
    ),
    (
        "codellama",
        "psm",
        {
            "prefix": ("\u2581<PRE>", " <PRE>", "<PRE>"),
            "suffix": ("\u2581<SUF>", " <SUF>", "<SUF>"),
            "middle": ("\u2581<MID>", " <MID>", "<MID>"),
        },
        ("\u2581<EOT>", " <EOT>", "<EOT>"),
        True,
    ),
    (
        "deepseek",
        "psm",
        {"prefix": ("<｜fim▁begin｜>",), "suffix": ("<｜fim▁hole｜>",), "middle": ("<｜fim▁end｜>",)},
        ("<|EOT|>", "<｜end▁of▁sentence｜>"),
        False,
    ),
    ("codestral", "spm", {"prefix": ("[PREFIX]",), "suffix": ("[SUFFIX]",)}, ("[MIDDLE]",), False),
)
_REQUIRED = ("prefix", "suffix", "middle")
# CodeGemma shares Qwen's sentinels; its file separator tells them apart.
_ALSO_REQUIRED = {"codegemma": ("file_sep",)}


def _single_tokens(tokenizer, spellings: set[bytes]) -> dict[bytes, int]:
    """Ids of the tokens whose bytes are exactly one of `spellings` (special or not:
    some families' sentinels are added tokens without the special flag)."""
    found: dict[bytes, int] = {}
    for i, b in enumerate(tokenizer.all_token_bytes()):
        if b in spellings and b not in found:
            found[b] = i
    return found


def detect(tokenizer) -> FimTemplate | None:
    """The FIM template of `tokenizer`'s model family, or None when it has no FIM sentinels."""
    spellings = {
        s.encode("utf-8") for _, _, roles, stops, _ in _FAMILIES for names in (*roles.values(), stops) for s in names
    }
    ids = _single_tokens(tokenizer, spellings)

    def first(names: tuple[str, ...]) -> int | None:
        for n in names:
            i = ids.get(n.encode("utf-8"))
            if i is not None:
                return i
        return None

    for family, order, roles, stops, space in _FAMILIES:
        found = {role: i for role, names in roles.items() if (i := first(names)) is not None}
        if any(r not in found for r in (*_REQUIRED, *_ALSO_REQUIRED.get(family, ())) if r in roles):
            continue
        stop = {i for i in (first((s,)) for s in stops) if i is not None}
        stop |= set(tokenizer.eos_token_ids)
        return FimTemplate(
            family=family,
            order=order,
            prefix=found["prefix"],
            suffix=found["suffix"],
            middle=found.get("middle"),
            repo_name=found.get("repo_name"),
            file_sep=found.get("file_sep"),
            stop=frozenset(stop),
            space_after_prefix=space,
        )
    return None


_CACHE: dict[str, FimTemplate | None] = {}


def template_for(tokenizer) -> FimTemplate | None:
    """`detect`, once per vocabulary."""
    key = tokenizer.vocab_fingerprint()
    if key not in _CACHE:
        _CACHE[key] = detect(tokenizer)
    return _CACHE[key]
