"""The `midword` command. Subcommands import their machinery lazily, so `midword --help`
never pays for numba, torch or a tokenizer."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_bench_trie(args) -> int:
    from midword.engine.tokenizer import Tokenizer
    from midword.engine.trie import benchmark

    rows = []
    for name in args.tokenizer:
        tok = Tokenizer.from_pretrained(name)
        rows.append(benchmark(tok, repeats=args.repeats))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'tokenizer':<10} {'vocab':>7} {'nodes':>8} {'nodes/tok':>9} {'build s':>8} {'load s':>7} {'walk ms':>8} {'Mnodes/s':>9} {'ns/node':>8}")
    for r in rows:
        print(f"{r['tokenizer']:<10} {r['vocab_size']:>7} {r['nodes']:>8} {r['nodes_per_token']:>9.2f} {r['build_s']:>8.3f} "
              f"{r['load_s']:>7.3f} {r['walk_ms']:>8.2f} {r['nodes_per_s'] / 1e6:>9.1f} {r['ns_per_node']:>8.2f}")
    return 0


def _cmd_mask(args) -> int:
    """Shows the mask and forced tokens after some text, for a grammar: a debugging aid."""
    from midword.engine import Grammar, Matcher, Tokenizer
    from midword.engine.matcher import mask_to_ids

    grammar = _load_grammar(args.grammar)
    tok = Tokenizer.from_pretrained(args.tokenizer)
    m = Matcher(tok, grammar)
    m.consume_tokens(tok.encode(args.text.encode("utf-8")))
    ids = mask_to_ids(m.compute_mask(), tok.vocab_size)
    out = {
        "accepting": m.is_accepting(),
        "allowed_tokens": len(ids),
        "sample": [tok.token_bytes(int(t)).decode("utf-8", "replace") for t in ids[: args.show]],
        "ff_bytes": m.compute_ff_bytes().decode("utf-8", "replace"),
        "ff_tokens": [tok.token_bytes(t).decode("utf-8", "replace") for t in m.compute_ff_tokens()],
    }
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _load_grammar(path: str):
    from midword.engine import Grammar

    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return Grammar.from_json_schema(json.loads(text))
    if path.endswith(".regex") or path.endswith(".re"):
        return Grammar.from_regex(text.strip())
    return Grammar.from_lark(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="midword", description="Grammar-constrained, mid-word-aware code completion.")
    sub = p.add_subparsers(dest="command", required=True)

    mask = sub.add_parser("mask", help="print the token mask and forced tokens of a grammar after some text")
    mask.add_argument("grammar", help="a .lark grammar, a .json JSON Schema or a .regex file")
    mask.add_argument("--text", default="", help="output so far")
    mask.add_argument("--tokenizer", default="llama3")
    mask.add_argument("--show", type=int, default=20, help="how many allowed tokens to print")
    mask.set_defaults(func=_cmd_mask)

    bench = sub.add_parser("bench", help="benchmarks (figures side by side with peer engines)")
    bsub = bench.add_subparsers(dest="bench", required=True)
    trie = bsub.add_parser("trie", help="token trie build/load time and walk speed")
    trie.add_argument("--tokenizer", action="append", help="llama3, gemma3, cl100k or a tokenizer.json (repeatable)")
    trie.add_argument("--repeats", type=int, default=5)
    trie.add_argument("--json", action="store_true")
    trie.set_defaults(func=_cmd_bench_trie)

    masks = bsub.add_parser("masks", help="MaskBench: JSON Schema masks, midword beside llguidance and xgrammar")
    try:
        from midword.bench.masks import add_masks_arguments, run_masks
    except ImportError:  # the harness is optional at import time; report when asked
        masks.set_defaults(func=lambda a: _missing("midword.bench.masks"))
    else:
        add_masks_arguments(masks)
        masks.set_defaults(func=run_masks)
    return p


def _missing(what: str) -> int:
    print(f"midword: {what} is not available in this installation", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "bench", None) == "trie" and not args.tokenizer:
        args.tokenizer = ["gemma3"]
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
