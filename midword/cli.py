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
    print(
        f"{'tokenizer':<10} {'vocab':>7} {'nodes':>8} {'nodes/tok':>9} {'build s':>8} {'load s':>7} {'walk ms':>8} {'Mnodes/s':>9} {'ns/node':>8}"
    )
    for r in rows:
        print(
            f"{r['tokenizer']:<10} {r['vocab_size']:>7} {r['nodes']:>8} {r['nodes_per_token']:>9.2f} {r['build_s']:>8.3f} "
            f"{r['load_s']:>7.3f} {r['walk_ms']:>8.2f} {r['nodes_per_s'] / 1e6:>9.1f} {r['ns_per_node']:>8.2f}"
        )
    return 0


def _cmd_mask(args) -> int:
    """Shows the mask and forced tokens after some text, for a grammar: a debugging aid."""
    from midword.engine import Matcher, Tokenizer
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


_LANGUAGE_BY_SUFFIX = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".tsx": "typescriptreact",
    ".jsx": "javascriptreact",
    ".json": "json",
    ".jsonc": "jsonc",
    ".go": "go",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".java": "java",
    ".rb": "ruby",
    ".sh": "shellscript",
    ".bash": "shellscript",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".cs": "csharp",
    ".kt": "kotlin",
    ".swift": "swift",
    ".scala": "scala",
}


def _cmd_complete(args) -> int:
    """Completes a file at a position with the default model."""
    import os

    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if not (0 <= args.line < len(lines)):
        print(f"midword: line {args.line} is outside {args.file} (0..{len(lines) - 1}, 0-based)", file=sys.stderr)
        return 2
    if not (0 <= args.character <= len(lines[args.line])):
        print(
            f"midword: character {args.character} is outside line {args.line} (0..{len(lines[args.line])})",
            file=sys.stderr,
        )
        return 2
    offset = sum(len(line) + 1 for line in lines[: args.line]) + args.character
    language = args.language or _LANGUAGE_BY_SUFFIX.get(os.path.splitext(args.file)[1].lower())
    grammar = GrammarSpec(kind="none") if args.no_grammar else GrammarSpec()
    if args.backend == "vllm":
        if not args.vllm_url:
            print("midword complete: --backend vllm needs --vllm-url URL", file=sys.stderr)
            return 2
        from midword.completion.backend_vllm import VllmCompletionEngine

        engine = VllmCompletionEngine(args.model, url=args.vllm_url)
    else:
        engine = CompletionEngine(args.model, weights=args.weights)
        # One completion has no other to batch its steps with: nothing to load or compile for it.
        engine.batch_steps = False
    from midword.completion.model import ModelUnavailable

    try:
        engine.load(progress=_progress_bar() if not args.json else None)
    except ModelUnavailable as err:
        print(f"\nmidword complete: {err}", file=sys.stderr)
        return 2
    request = CompletionRequest(
        prefix=text[:offset],
        suffix=text[offset:],
        language=language,
        grammar=grammar,
        max_tokens=args.max_tokens,
        mode=args.mode,
        single_line=not args.multi_line,
        temperature=args.temperature,
        time_budget_s=args.time_budget,
    )
    result = engine.complete(request)
    if args.json:
        from dataclasses import asdict

        out = asdict(result)
        out["insert_text"] = result.insert_text(request.prefix)
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        typed = result.typed(request.prefix)
        print(f"{typed}|{result.insert_text(request.prefix)}")
        t = result.timings
        print(
            f"({result.stop_reason}; {t.total_ms:.0f} ms, {t.forward_passes} forward passes, "
            f"{t.tokens_generated} tokens, {t.tokens_forced} forced{'; ' + result.note if result.note else ''})",
            file=sys.stderr,
        )
    return 0


def _progress_bar():
    last = {"stage": None}

    def show(stage: str, fraction: float) -> None:
        width = 30
        filled = int(max(0.0, min(1.0, fraction)) * width)
        end = "\n" if fraction >= 1.0 else ""
        if stage != last["stage"] and last["stage"] is not None:
            sys.stderr.write("\n")
        last["stage"] = stage
        sys.stderr.write(f"\r{stage[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] {fraction * 100:5.1f}%{end}")
        sys.stderr.flush()

    return show


def _load_grammar(path: str):
    from midword.engine import Grammar

    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return Grammar.from_json_schema(json.loads(text))
    if path.endswith(".regex") or path.endswith(".re"):
        return Grammar.from_regex(text.strip())
    return Grammar.from_lark(text)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="midword", description="Grammar-constrained, mid-word-aware code completion.")
    sub = p.add_subparsers(dest="command", required=True)

    mask = sub.add_parser("mask", help="print the token mask and forced tokens of a grammar after some text")
    mask.add_argument("grammar", help="a .lark grammar, a .json JSON Schema or a .regex file")
    mask.add_argument("--text", default="", help="output so far")
    mask.add_argument("--tokenizer", default="llama3")
    mask.add_argument("--show", type=int, default=20, help="how many allowed tokens to print")
    mask.set_defaults(func=_cmd_mask)

    comp = sub.add_parser("complete", help="complete FILE at a position with the default model")
    comp.add_argument("file")
    comp.add_argument("--line", type=int, required=True, help="0-based line of the cursor (as in LSP)")
    comp.add_argument("--character", type=int, required=True, help="0-based character of the cursor in the line")
    comp.add_argument("--json", action="store_true", help="print the completion as JSON")
    comp.add_argument("--mode", default="cpc", choices=["naive", "heal1", "align", "cpc"])
    comp.add_argument(
        "--model", default="gemma3", help='"gemma3" (default), a .gguf file or a Hugging Face model folder'
    )
    comp.add_argument(
        "--weights",
        choices=["int8", "float32", "bfloat16"],
        default="int8",
        help="how the model's weights are held: int8 (default, fastest on a CPU), float32, bfloat16",
    )
    comp.add_argument(
        "--backend",
        choices=["local", "vllm"],
        default="local",
        help="run the model here (default) or in a vLLM server (--vllm-url)",
    )
    comp.add_argument("--vllm-url", metavar="URL", help="the vLLM OpenAI server for --backend vllm")
    comp.add_argument("--language", help="language id (default: from the file name)")
    comp.add_argument("--max-tokens", type=int, default=48)
    comp.add_argument("--temperature", type=float, default=0.0)
    comp.add_argument("--time-budget", type=float, default=5.0, help="seconds")
    comp.add_argument("--multi-line", action="store_true", help="allow more than the rest of the line")
    comp.add_argument("--no-grammar", action="store_true", help="no syntax constraint")
    comp.set_defaults(func=_cmd_complete)

    bench = sub.add_parser("bench", help="benchmarks (figures side by side with peer engines)")
    bsub = bench.add_subparsers(dest="bench", required=True)
    trie = bsub.add_parser("trie", help="token trie build/load time and walk speed")
    trie.add_argument("--tokenizer", action="append", help="llama3, gemma3, cl100k or a tokenizer.json (repeatable)")
    trie.add_argument("--repeats", type=int, default=5)
    trie.add_argument("--json", action="store_true")
    trie.set_defaults(func=_cmd_bench_trie)

    masks = bsub.add_parser("masks", help="MaskBench: JSON Schema masks, midword beside llguidance and xgrammar")
    if argv is not None and argv[:2] == ["bench", "masks"]:
        # The harness imports numpy and the peers: only when it is the command.
        from midword.bench.masks import add_masks_arguments, run_masks

        add_masks_arguments(masks)
        masks.set_defaults(func=run_masks)

    # Heavier subcommands are filled in only when they are the command, so that
    # `midword --help` imports nothing but argparse.
    cpc = bsub.add_parser("cpc", help="character prefix conditioning: word/line exact match per mode")
    lsp = bsub.add_parser("lsp", help="replay typing a file through a real LSP session; completion latency")
    http = bsub.add_parser("http", help="replay typing a file as /infill requests from 1, 4, 16 clients; latency")
    start = bsub.add_parser("start", help="process start to first mask, cold and warm numba cache")
    soak = bsub.add_parser("soak", help="many completions over one session of edits; the server's RSS growth")
    model_bench = bsub.add_parser("model", help="the lean Gemma 3 forward beside transformers: step, prefill")
    ab = bsub.add_parser("ab", help="MaskBench: this checkout's engine against another git revision's, in one process")
    jsts = bsub.add_parser("jsts", help="JSON-Schema-Test-Suite draft 2020-12: midword beside llguidance")
    vllm = bsub.add_parser("vllm", help="mid-word completions through a vLLM server: exact match, latency, throughput")
    serve = sub.add_parser("serve", help="run the language server (stdio by default)")
    model = sub.add_parser("model", help="the default model's files: `path`, `export DIR` (for vLLM)")
    wanted = argv or []
    if wanted[:2] == ["bench", "vllm"]:
        from midword.bench.vllm import add_vllm_bench_arguments, run_vllm_bench

        add_vllm_bench_arguments(vllm)
        vllm.set_defaults(func=run_vllm_bench)
    if wanted[:1] == ["model"]:
        from midword.model_cli import add_model_arguments

        add_model_arguments(model)
    if wanted[:2] == ["bench", "cpc"]:
        from midword.bench.cpc import add_cpc_arguments, run_cpc

        add_cpc_arguments(cpc)
        cpc.set_defaults(func=run_cpc)
        from midword.bench.cpc_repo import add_repo_arguments, run_repo

        add_repo_arguments(cpc)  # --repo PKG: the repository setting (workspace context off and on)
        plain_cpc = cpc.get_default("func")
        cpc.set_defaults(func=lambda args: (run_repo if args.repo else plain_cpc)(args))
    if wanted[:2] == ["bench", "lsp"]:
        from midword.bench.lsp import add_lsp_bench_arguments, run_lsp_bench

        add_lsp_bench_arguments(lsp)
        lsp.set_defaults(func=run_lsp_bench)
    if wanted[:2] == ["bench", "http"]:
        from midword.bench.http import add_http_bench_arguments, run_http_bench

        add_http_bench_arguments(http)
        http.set_defaults(func=run_http_bench)
    if wanted[:2] == ["bench", "ab"]:
        from midword.bench.ab import add_ab_arguments, run_ab

        add_ab_arguments(ab)
        ab.set_defaults(func=run_ab)
    if wanted[:2] == ["bench", "jsts"]:
        from midword.bench.jsts import add_jsts_arguments, run_jsts

        add_jsts_arguments(jsts)
        jsts.set_defaults(func=run_jsts)
    if wanted[:2] == ["bench", "start"]:
        from midword.bench.start import add_start_arguments, run_start_bench

        add_start_arguments(start)
        start.set_defaults(func=run_start_bench)
    if wanted[:2] == ["bench", "soak"]:
        from midword.bench.soak import add_soak_arguments, run_soak

        add_soak_arguments(soak)
        soak.set_defaults(func=run_soak)
    if wanted[:2] == ["bench", "model"]:
        from midword.bench.model import add_model_arguments, run_model_bench

        add_model_arguments(model_bench)
        model_bench.set_defaults(func=run_model_bench)
    if wanted[:1] == ["serve"]:
        from midword.server.cli import add_serve_arguments, run_serve

        add_serve_arguments(serve)
        serve.set_defaults(func=run_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if getattr(args, "bench", None) == "trie" and not args.tokenizer:
        args.tokenizer = ["gemma3"]
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
