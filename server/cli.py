"""`midword serve`: run the language server over stdio (the default) or TCP, or the
HTTP completion API (`--http`, see `server.http`).

Everything heavy (pygls, the engine and its model) is imported only when the command
runs, so `midword --help` stays instant. `--engine MODULE:ATTR` swaps the completion
engine for another object with the same contract; the tests use it to run the server
with a small deterministic fake.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import sys

DEFAULT_ENGINE = "midword.completion.engine:CompletionEngine"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="speak LSP over stdin/stdout (the default)")
    transport.add_argument(
        "--tcp", metavar="HOST:PORT", help="listen on a TCP port instead (one client at a time, each its own session)"
    )
    transport.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        nargs="?",
        const="",
        help="serve the HTTP completion API (llama.cpp /infill, OpenAI and Tabby /v1/completions) "
        "instead of LSP (default 127.0.0.1:8012)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="with --http: require 'Authorization: Bearer KEY' (default: $MIDWORD_API_KEY, else none)",
    )
    parser.add_argument(
        "--workspace",
        default=None,
        help="with --http: the only folder grammar and $schema files may be read from (default: .)",
    )
    parser.add_argument(
        "--model", default=None, help="model to load unless the client's settings name one (default: gemma3)"
    )
    parser.add_argument(
        "--engine",
        default=DEFAULT_ENGINE,
        metavar="MODULE:ATTR",
        help="completion engine class or factory, called as ATTR(model=...) (for tests)",
    )
    parser.add_argument(
        "--weights",
        choices=["int8", "float32", "bfloat16"],
        default="int8",
        help="how the default engine holds the model's weights (default int8: fastest on a CPU)",
    )
    parser.add_argument(
        "--backend",
        choices=["local", "vllm"],
        default="local",
        help="where the model runs: in this process (default) or in a vLLM server (--vllm-url)",
    )
    parser.add_argument(
        "--vllm-url",
        default=None,
        metavar="URL",
        help="the vLLM OpenAI server for --backend vllm, e.g. http://10.0.0.5:8000",
    )
    parser.add_argument("--log-file", default=None, help="write the server's log here (default: stderr)")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def load_factory(spec: str):
    """The object named by MODULE:ATTR (ATTR may be dotted)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--engine must look like MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:  # as `python -m` would: a module of the current directory
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"--engine {spec}: cannot import {module_name} ({e})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"--engine {spec}: {module_name} has no attribute {attr}") from None
    if not callable(obj):
        raise ValueError(f"--engine {spec} is not callable")
    return obj


def _parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--tcp must look like HOST:PORT (e.g. 127.0.0.1:2087), got {value!r}")
    return host or "127.0.0.1", int(port)


def run_serve(args: argparse.Namespace) -> int:
    if getattr(args, "http", None) is not None:
        return _run_http(args)
    handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, args.log_level), handlers=[handler], force=True)
    try:
        hostport = _parse_hostport(args.tcp) if args.tcp else None
        if args.engine == DEFAULT_ENGINE:
            factory = None  # imported when the engine loads, off the event loop
        else:
            factory = load_factory(args.engine)
    except ValueError as e:
        print(f"midword serve: {e}", file=sys.stderr)
        return 2

    from .lsp import create_server, default_engine_factory

    if getattr(args, "backend", "local") == "vllm":
        if not args.vllm_url:
            print("midword serve: --backend vllm needs --vllm-url URL", file=sys.stderr)
            return 2
        from midword.completion.backend_vllm import vllm_engine_factory

        factory = vllm_engine_factory(args.vllm_url)
    elif factory is None and args.weights != "int8":
        factory = functools.partial(default_engine_factory, weights=args.weights)
    from .transport import serve_stdio, serve_tcp

    if hostport is not None:
        return serve_tcp(lambda: create_server(factory, default_model=args.model), *hostport)
    return serve_stdio(create_server(factory, default_model=args.model))


def _run_http(args: argparse.Namespace) -> int:
    handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, args.log_level), handlers=[handler], force=True)
    from .http import HttpConfig, default_engine_factory, parse_hostport, serve_http

    try:
        host, port = parse_hostport(args.http)
        factory = None if args.engine == DEFAULT_ENGINE else load_factory(args.engine)
    except ValueError as e:
        print(f"midword serve: {e}", file=sys.stderr)
        return 2
    if factory is None:
        factory = functools.partial(default_engine_factory, weights=args.weights)
    api_key = args.api_key if args.api_key is not None else os.environ.get("MIDWORD_API_KEY") or None
    config = HttpConfig(model=args.model or "gemma3", api_key=api_key, workspace=args.workspace or os.getcwd())
    return serve_http(factory, host, port, config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="midword serve", description="The midword language server.")
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))
