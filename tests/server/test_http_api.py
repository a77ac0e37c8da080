"""Contract tests of the HTTP completion API (`server.http`) in process:
httpx.AsyncClient over ASGITransport, with the deterministic fake engine of
tests/fake_engine.py configured through the model name (`fake?step_ms=..&load_s=..
&log=..`; `log` records every request that reached the engine).

Each test that pins a client's wire format names the client source file it comes
from. Behaviour that needs a real socket (a client aborting mid-request) lives in
test_http_live.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from fake_engine import FakeEngine

from midword.server.http import HttpConfig, create_app
from midword.server.http_formats import FIM_MARKERS

pytestmark = pytest.mark.asyncio

CLASS = "class Account:\n    user_name = guest\n\n    def name(self):\n"
LINE = "        return self.user_na"  # the cursor mid-word: CPC's case
ANSWER = "me = guest"  # the fake's completion of LINE after CLASS


class Api:
    def __init__(self, app, log: Path):
        self.app = app
        self.service = app.state.service
        self.log = log
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://midword.test")

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    async def ready(self) -> None:
        for _ in range(500):
            if self.service.state == "ready":
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"engine not ready: {self.service.state}")


@pytest_asyncio.fixture
async def make_api(tmp_path):
    made: list[Api] = []

    async def make(options: str = "", wait: bool = True, **config) -> Api:
        log = tmp_path / f"calls{len(made)}.jsonl"
        model = f"fake?log={log}" + (f"&{options}" if options else "")
        api = Api(create_app(FakeEngine, HttpConfig(model=model, **config)), log)
        made.append(api)
        if wait:
            await api.ready()
        return api

    yield make
    for api in made:
        await api.http.aclose()
        api.service.close()


# -- llama.vscode ------------------------------------------------------------------------


def vscode_body(prefix: str, prompt: str, suffix: str = "\n", chunks=()) -> dict:
    # ggml-org/llama.vscode src/llama-server.ts, createRequestPayload (noPredict=false)
    # with its defaultRequestParams spread in.
    return {
        "id_slot": 0,
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": list(chunks),
        "prompt": prompt,
        "n_predict": 128,
        "n_cmpl": 3,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "n_indent": 8,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 2500,
    }


async def test_llama_vscode_infill_answers_every_field_it_reads(make_api):
    api = await make_api()
    chunk = {"text": "def helper(a):\n    return a\n", "time": 1732612345678, "filename": "/w/util.py"}
    r = await api.http.post("/infill", json=vscode_body(CLASS, LINE, chunks=[chunk]))
    assert r.status_code == 200
    data = r.json()
    # src/completion.ts getComplFromContent: `"content" in data` (one object, not an array)
    assert data["content"] == ANSWER
    # src/statusbar.ts reads these, generation_settings unguarded
    assert isinstance(data["generation_settings"]["n_ctx"], int)
    assert isinstance(data["tokens_cached"], int)
    for key in ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second"):
        assert isinstance(data["timings"][key], (int, float)), key
    for key in ("stop", "stop_type", "truncated", "tokens_predicted", "tokens_evaluated", "has_new_line", "model"):
        assert key in data, key
    # what reached the engine: the chunk as context beside the document up to the cursor
    (call,) = api.calls()
    assert call["context"] == [[chunk.get("filename"), chunk["text"], "snippet"]]
    assert call["prefix"] == CLASS + LINE
    assert call["suffix"] == "\n" and call["mode"] == "cpc" and call["max_tokens"] == 128


async def test_llama_vscode_warm_up_answers_at_once(make_api):
    api = await make_api()
    # src/llama-server.ts createRequestPayload(noPredict=true)
    body = {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": [{"text": "x = 1\n"}],
        "prompt": "",
        "n_predict": 0,
        "samplers": [],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1,
    }
    r = await api.http.post("/infill", json=body)
    assert r.status_code == 200
    assert r.json()["content"] == ""
    assert api.calls() == []


# -- llama.vim ---------------------------------------------------------------------------


async def test_llama_vim_gets_one_compact_line_with_flattened_fields(make_api):
    api = await make_api()
    fields = [
        "content",
        "timings/prompt_n",
        "timings/prompt_ms",
        "timings/prompt_per_token_ms",
        "timings/prompt_per_second",
        "timings/predicted_n",
        "timings/predicted_ms",
        "timings/predicted_per_token_ms",
        "timings/predicted_per_second",
        "truncated",
        "tokens_cached",
    ]
    # ggml-org/llama.vim autoload/llama.vim, llama#fim: the request it builds
    body = {
        "id_slot": 0,
        "input_prefix": CLASS,
        "input_suffix": "\n",
        "input_extra": [],
        "prompt": LINE,
        "n_predict": 128,
        "stop": [],
        "n_indent": 8,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 250,
        "response_fields": fields,
    }
    r = await api.http.post("/infill", json=body)
    raw = r.text
    # s:fim_on_response: `l:raw !~# '^\s*{' || l:raw !~# '\v"content"\s*:"'` drops the answer
    assert "\n" not in raw
    assert re.match(r"^\s*\{", raw) and re.search(r'"content"\s*:"', raw)
    data = json.loads(raw)
    assert set(data) == set(fields)
    assert data["content"] == ANSWER
    # its s:fim_on_response reads the flat keys with has_key()
    assert isinstance(data["timings/predicted_n"], int)


async def test_llama_vim_warm_up_with_empty_field_list_gets_an_empty_object(make_api):
    api = await make_api()
    # autoload/llama.vim s:ring_update: the extra-context warm-up
    body = {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "prompt": "",
        "n_predict": 0,
        "input_extra": [{"text": "a = 1\n", "time": [1732612345, 123456], "filename": "a.py"}],
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }
    r = await api.http.post("/infill", json=body)
    assert r.status_code == 200 and r.text == "{}"


async def test_input_extra_variants(make_api):
    api = await make_api()
    chunks = [
        {"text": "A = 1\n", "time": 12, "filename": "a.py"},  # time as a number
        {"text": "B = 2\n", "time": "2026-11-26T11:00:00Z"},  # as a string, no filename
        {"text": "C = 3", "time": [1, 2]},  # llama.vim's reltime() list, no final newline
        {"text": "D = f(\n"},  # leaves a bracket open: context, so the grammar's view of the cursor is not moved
    ]
    r = await api.http.post("/infill", json=vscode_body(CLASS, LINE, chunks=chunks))
    assert r.status_code == 200
    (call,) = api.calls()
    assert call["context"] == [
        ["a.py", "A = 1\n", "snippet"],
        [None, "B = 2\n", "snippet"],
        [None, "C = 3", "snippet"],
        [None, "D = f(\n", "snippet"],
    ]
    assert call["prefix"] == CLASS + LINE
    r = await api.http.post("/infill", json={**vscode_body(CLASS, LINE), "input_extra": ["text"]})
    assert r.status_code == 400
    assert '"input_extra[0]"' in r.json()["error"]["message"]


async def test_missing_input_suffix_is_a_400_in_llama_cpp_shape(make_api):
    api = await make_api()
    r = await api.http.post("/infill", json={"input_prefix": "x = 1\n", "prompt": "y"})
    assert r.status_code == 400
    assert r.json() == {
        "error": {"code": 400, "message": '"input_suffix" is required', "type": "invalid_request_error"}
    }


async def test_wrong_types_and_malformed_json_name_the_problem(make_api):
    api = await make_api()
    r = await api.http.post("/infill", json={**vscode_body(CLASS, LINE), "n_predict": "many"})
    assert r.status_code == 400 and '"n_predict" must be an integer' in r.json()["error"]["message"]
    r = await api.http.post("/v1/completions", json={"prompt": 5})
    assert r.status_code == 400 and '"prompt" must be a string' in r.json()["error"]["message"]
    r = await api.http.post("/v1/completions", json={"segments": {"prefix": 1}})
    assert r.status_code == 400 and '"segments.prefix" must be a string' in r.json()["error"]["message"]
    r = await api.http.post("/completion", content=b'{"prompt": "x",', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    assert api.calls() == []


async def test_crlf_in_crlf_out_as_lf(make_api):
    api = await make_api()
    r = await api.http.post("/infill", json=vscode_body(CLASS.replace("\n", "\r\n"), LINE, suffix="\r\n"))
    assert r.json()["content"] == ANSWER
    (call,) = api.calls()
    assert "\r" not in call["prefix"] + call["suffix"]


# -- time and indentation cuts -----------------------------------------------------------

BLOCK = "def f(x):\n    a = 1\nz = 2\n"  # the fake repeats what followed "def f(x):"


async def test_t_max_predict_ms_stops_at_a_newline_after_the_first_token(make_api):
    api = await make_api("step_ms=40")
    body = {"input_prefix": BLOCK, "input_suffix": "\n", "prompt": "def f(x):", "n_predict": 64}
    r = await api.http.post("/infill", json={**body, "t_max_predict_ms": 1})
    cut = r.json()
    full = (await api.http.post("/infill", json=body)).json()
    assert full["content"] == "\n    a = 1\nz = 2"
    assert cut["stop_type"] == "limit"
    assert "\n" in cut["content"] and full["content"].startswith(cut["content"])
    assert len(cut["content"]) < len(full["content"])


async def test_n_indent_cuts_at_the_first_line_indented_less(make_api):
    api = await make_api("step_ms=5")
    body = {"input_prefix": BLOCK, "input_suffix": "\n", "prompt": "def f(x):", "n_predict": 64, "n_indent": 4}
    r = await api.http.post("/infill", json=body)
    assert r.json()["content"] == "\n    a = 1\n"


# -- loading ------------------------------------------------------------------------------


async def test_health_while_the_model_loads(make_api):
    api = await make_api("load_s=1.5", wait=False)
    r = await api.http.get("/health")
    assert r.status_code == 503
    assert r.json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    r = await api.http.post("/infill", json=vscode_body(CLASS, LINE))
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert (await api.http.get("/v1/health")).json()["status"] == "loading"
    await api.ready()
    r = await api.http.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


# -- Tabby --------------------------------------------------------------------------------


async def test_tabby_agent_health_events_and_completion(make_api):
    api = await make_api()
    # TabbyML/tabby clients/tabby-agent/src/http/tabbyApiClient.ts: healthCheck GETs (POST on 405)
    # /v1/health and reads health.model and, unguarded, health.version.git_describe
    for method in ("GET", "POST"):
        r = await api.http.request(method, "/v1/health")
        assert r.status_code == 200
        health = r.json()
        assert health["model"] and isinstance(health["version"]["git_describe"], str)
        # clients/tabby-openapi/lib/tabby.d.ts HealthState's required fields
        for key in ("device", "arch", "cpu_info", "cpu_count", "cuda_devices"):
            assert key in health
    # LogEventRequest
    r = await api.http.post(
        "/v1/events?select_kind=line",
        json={"type": "view", "completion_id": "cmpl-1", "choice_index": 0, "view_id": "v1"},
    )
    assert r.status_code == 200
    # CompletionRequest with Segments
    body = {
        "language": "python",
        "segments": {
            "prefix": CLASS + LINE,
            "suffix": "\n",
            "filepath": "src/account.py",
            "git_url": "https://example.invalid/r",
            "declarations": [{"filepath": "src/user.py", "body": "class User:\n    pass\n"}],
            "relevant_snippets_from_changed_files": [{"filepath": "src/x.py", "body": "X = 1\n", "score": 0.5}],
            "clipboard": "",
        },
        "temperature": None,
        "mode": "standard",
    }
    r = await api.http.post("/v1/completions", json=body)
    assert r.status_code == 200
    data = r.json()
    assert set(data) == {"id", "choices"} and isinstance(data["id"], str)
    assert data["choices"] == [{"index": 0, "text": ANSWER}]
    (call,) = api.calls()
    assert call["language"] == "python"
    assert call["context"] == [
        ["src/user.py", "class User:\n    pass\n", "definition"],
        ["src/x.py", "X = 1\n", "edit"],
    ]
    assert call["prefix"] == CLASS + LINE and call["path"] == "src/account.py"


def sse_events(raw: str) -> list[str]:
    assert raw.endswith("\n\n")
    events = raw.split("\n\n")[:-1]
    for event in events:
        assert event.startswith("data: "), event  # no comments (`: ping`), no other fields
    return [e[len("data: ") :] for e in events]


async def test_tabby_openai_backend_stream(make_api):
    api = await make_api()
    # TabbyML/tabby crates/http-api-bindings/src/completion/openai.rs: prompt split at
    # <|FIM|> into prompt and suffix, stream: true; every event is parsed as a chunk with
    # choices[].text and finish_reason, and the stream is read until finish_reason is set.
    body = {
        "model": "midword",
        "prompt": CLASS + LINE,
        "suffix": "\n",
        "max_tokens": 64,
        "temperature": 0.0,
        "stream": True,
        "presence_penalty": 0.0,
    }
    r = await api.http.post("/v1/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["choices"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] is not None
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert "".join(c["choices"][0]["text"] for c in chunks) == ANSWER


# -- OpenAI-shaped clients ----------------------------------------------------------------


TEMPLATES = {
    "starcoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    "qwen": ("<|repo_name|>shop\n<|file_sep|>account.py\n<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    "codellama": ("<PRE> ", " <SUF>", " <MID>"),
    "deepseek": ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>", "<\uff5cfim\u2581end\uff5c>"),
}


@pytest.mark.parametrize("family", sorted(TEMPLATES) + ["codestral"])
async def test_fim_templated_prompts_are_parsed_back(make_api, family):
    api = await make_api()
    prefix, suffix = CLASS + LINE, "\n\n    def other(self):\n        pass\n"
    if family == "codestral":
        prompt = f"[SUFFIX]{suffix}[PREFIX]{prefix}"
    else:
        pre, suf, mid = TEMPLATES[family]
        prompt = f"{pre}{prefix}{suf}{suffix}{mid}"
    # core/llm/llms/OpenAI.ts (Continue) _legacystreamComplete: the templated prompt, stream: true
    r = await api.http.post(
        "/v1/completions",
        json={"model": "midword", "prompt": prompt, "max_tokens": 64, "stream": True, "stop": ["<fim_prefix>", "\n\n"]},
    )
    text = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(r.text)[:-1])
    assert text == ANSWER
    (call,) = api.calls()
    assert (call["prefix"], call["suffix"]) == (prefix, suffix)
    assert not any(m in r.text for m in FIM_MARKERS)
    # and through llama.cpp's /completion (Tabby's llama.cpp backend, Continue's llama.cpp provider)
    r = await api.http.post("/completion", json={"prompt": prompt, "n_predict": 64})
    assert r.json()["content"] == ANSWER


async def test_zed_required_response_fields(make_api):
    api = await make_api()
    # zed-industries/zed crates/cloud_llm_client/src/predict_edits_v3.rs: RawCompletionRequest
    # in, RawCompletionResponse out (id, object, created: u64, model, choices[{text,
    # finish_reason}], usage{prompt_tokens, completion_tokens, total_tokens}: u32), all required.
    body = {
        "model": "midword",
        "prompt": "<|fim_prefix|>" + CLASS + LINE + "<|fim_suffix|>\n<|fim_middle|>",
        "max_tokens": 64,
        "temperature": 0.0,
        "stop": ["<|endoftext|>"],
        "environment": "local",
    }
    r = await api.http.post("/v1/completions", json=body)
    data = r.json()
    assert isinstance(data["id"], str) and data["object"] == "text_completion"
    assert isinstance(data["created"], int) and data["created"] > 0
    assert isinstance(data["model"], str)
    assert data["choices"][0]["text"] == ANSWER and data["choices"][0]["finish_reason"] in ("stop", "length")
    assert "logprobs" in data["choices"][0] and data["choices"][0]["index"] == 0
    usage = data["usage"]
    assert all(
        isinstance(usage[k], int) and usage[k] >= 0 for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    )


async def test_models_never_advertise_gpt_or_claude(make_api):
    api = await make_api()
    # Continue (core/llm/llms/OpenAI.ts) picks chat templates for model ids naming gpt/claude
    data = (await api.http.get("/v1/models")).json()
    ids = [m["id"] for m in data["data"]]
    assert ids and not any("gpt" in i.lower() or "claude" in i.lower() for i in ids)
    props = (await api.http.get("/props")).json()
    assert isinstance(props["default_generation_settings"]["n_ctx"], int)


async def test_completion_stream_shape(make_api):
    api = await make_api()
    # TabbyML/tabby crates/http-api-bindings/src/completion/llama.rs: every event is
    # {content, stop} (both required), read until stop; Continue core/llm/llms/LlamaCpp.ts
    # reads value.content. llama.cpp sends no [DONE] on this route.
    body = {
        "seed": 0,
        "prompt": "<PRE> " + CLASS + LINE + " <SUF>\n <MID>",
        "n_predict": 64,
        "temperature": 0.1,
        "stream": True,
        "penalty_last_n": 0,
        "presence_penalty": 0.0,
    }
    r = await api.http.post("/completion", json=body)
    events = [json.loads(e) for e in sse_events(r.text)]
    assert all(isinstance(e["content"], str) and isinstance(e["stop"], bool) for e in events)
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert events[-1]["stop_type"] in ("eos", "limit", "word") and "predicted_ms" in events[-1]["timings"]
    assert "".join(e["content"] for e in events) == ANSWER
    assert "[DONE]" not in r.text


# -- midword's own route, grammars, workspace ---------------------------------------------


async def test_midword_complete_answers_completion_fields(make_api):
    api = await make_api()
    body = {
        "prefix": CLASS + LINE,
        "suffix": "\n",
        "language": "python",
        "mode": "cpc",
        "max_tokens": 20,
        "grammar": {"regex": "[a-z_]+ = [a-z_]+"},
    }
    data = (await api.http.post("/v1/midword/complete", json=body)).json()
    assert data["text"] == "user_name = guest" and data["insert_text"] == ANSWER
    assert data["replace_start"] == len(CLASS + LINE) - len("user_na")
    assert data["stop_reason"] == "eos" and "total_ms" in data["timings"]
    (call,) = api.calls()
    assert (call["grammar_kind"], call["grammar_source"], call["max_tokens"]) == ("regex", body["grammar"]["regex"], 20)
    r = await api.http.post("/v1/midword/complete", json={**body, "grammar": {"python": "x"}})
    assert r.status_code == 400 and "unknown kind" in r.json()["error"]["message"]
    r = await api.http.post("/v1/midword/complete", json={**body, "mode": "fast"})
    assert r.status_code == 400 and '"mode"' in r.json()["error"]["message"]


async def test_json_schema_is_read_only_inside_the_workspace(make_api, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "schema.json").write_text('{"type": "object", "properties": {"port": {"type": "integer"}}}')
    outside = tmp_path / "secret.json"
    outside.write_text('{"type": "object"}')
    api = await make_api(workspace=str(workspace))
    for ref, kind in (
        ("./schema.json", "json_schema"),
        (str(outside), "lark"),
        ("../secret.json", "lark"),
        ("https://example.invalid/s.json", "lark"),
    ):
        doc = '{\n  "$schema": "' + ref + '",\n  "po'
        r = await api.http.post(
            "/infill", json={"input_prefix": doc, "input_suffix": "\n}\n", "prompt": "", "filename": "config.json"}
        )
        assert r.status_code == 200
        call = api.calls()[-1]
        assert call["grammar_kind"] == kind, ref
        assert call["language"] == "json"
        if kind == "json_schema":
            assert '"port"' in call["grammar_source"]
    # no language or file name: a document with a top-level "$schema" is still JSON
    doc = '{\n  "$schema": "./schema.json",\n  "po'
    await api.http.post("/infill", json={"input_prefix": doc, "input_suffix": "", "prompt": ""})
    assert api.calls()[-1]["grammar_kind"] == "json_schema"


# -- limits, keys, queue ------------------------------------------------------------------


async def test_body_limit(make_api):
    api = await make_api(max_body_bytes=2000)
    r = await api.http.post("/infill", json=vscode_body("x" * 5000, "y"))
    assert r.status_code == 413 and r.json()["error"]["code"] == 413
    r = await api.http.post("/infill", json=vscode_body(CLASS, LINE))
    assert r.status_code == 200


async def test_api_key_required_when_set(make_api):
    api = await make_api(api_key="s3cret")
    assert (await api.http.post("/infill", json=vscode_body(CLASS, LINE))).status_code == 401
    r = await api.http.post("/infill", json=vscode_body(CLASS, LINE), headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = await api.http.post("/infill", json=vscode_body(CLASS, LINE), headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200 and r.json()["content"] == ANSWER
    assert (await api.http.get("/health")).status_code == 200  # public, as in llama.cpp
    assert (await api.http.get("/metrics")).status_code == 401
    open_api = await make_api()
    assert (await open_api.http.post("/infill", json=vscode_body(CLASS, LINE))).status_code == 200


async def test_queue_bound_answers_503_with_retry_after(make_api):
    api = await make_api("step_ms=100", max_queue=1)
    bodies = [vscode_body(CLASS + f"    # variant {i}\n", LINE) for i in range(4)]
    responses = await asyncio.gather(*(api.http.post("/infill", json=b) for b in bodies))
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 2 and 503 in codes
    busy = next(r for r in responses if r.status_code == 503)
    assert busy.headers["retry-after"] == "1"
    metrics = (await api.http.get("/metrics")).text
    assert 'midword_http_requests_total{route="infill",outcome="busy"}' in metrics


async def test_type_through_cache_and_metrics(make_api):
    api = await make_api()
    first = await api.http.post("/infill", json=vscode_body(CLASS, LINE))
    assert first.headers["x-midword-source"] == "model"
    # the user typed two more characters of the shown completion: no model call
    second = await api.http.post("/infill", json=vscode_body(CLASS, LINE + "me"))
    assert second.json()["content"] == ANSWER[2:] and second.headers["x-midword-source"] == "cache"
    assert len(api.calls()) == 1
    metrics = (await api.http.get("/metrics")).text
    assert 'midword_http_requests_total{route="infill",outcome="answered"} 2' in metrics
    assert "midword_http_request_duration_seconds_count 2" in metrics
    assert 'midword_model_state{state="ready"} 1' in metrics
    rss = re.search(r"^process_resident_memory_bytes (\d+)$", metrics, re.M)
    assert rss and int(rss.group(1)) > 0


async def test_openapi_describes_every_route(make_api):
    api = await make_api()
    doc = (await api.http.get("/openapi.json")).json()
    for path in (
        "/infill",
        "/completion",
        "/v1/completions",
        "/completions",
        "/beta/completions",
        "/v1/midword/complete",
        "/health",
        "/v1/health",
        "/v1/events",
        "/v1/models",
        "/props",
        "/metrics",
    ):
        assert path in doc["paths"], path


async def test_exposed_bind_without_a_key_warns():
    from midword.server.http import exposure_warning, parse_hostport

    assert parse_hostport(None) == ("127.0.0.1", 8012)
    assert parse_hostport("9000") == ("127.0.0.1", 9000)
    assert parse_hostport("0.0.0.0:8012") == ("0.0.0.0", 8012)
    assert parse_hostport("[::1]:8012") == ("::1", 8012)
    with pytest.raises(ValueError, match=r"\[HOST:\]PORT"):
        parse_hostport("localhost:http")
    assert exposure_warning("127.0.0.1", None) is None
    assert exposure_warning("::1", None) is None
    assert exposure_warning("0.0.0.0", "key") is None
    assert "WARNING" in exposure_warning("0.0.0.0", None)


# -- prompt token counts, the model's turn, grammar choice --------------------------------


async def test_prompt_token_counts_are_reported(make_api):
    # The fake's prompt is the prefix in tokens of three characters, the part shared with
    # the previous request's prefix cached. llama.vscode's status bar (src/statusbar.ts)
    # shows tokens_cached and timings.prompt_n; Zed and Continue read usage.
    api = await make_api()
    prefix = CLASS + LINE
    data = (await api.http.post("/infill", json=vscode_body(CLASS, LINE))).json()
    assert data["tokens_evaluated"] == -(-len(prefix) // 3) == data["timings"]["prompt_n"]
    assert data["tokens_cached"] == data["tokens_evaluated"] + data["tokens_predicted"]
    shorter = LINE[:-1]  # backspace: the cache serves only forward, so the model runs
    data = (await api.http.post("/infill", json=vscode_body(CLASS, shorter))).json()
    assert data["tokens_evaluated"] == -(-len(CLASS + shorter) // 3)
    assert data["timings"]["prompt_n"] == data["tokens_evaluated"] - len(CLASS + shorter) // 3
    body = {"prompt": "<fim_prefix>" + CLASS + LINE + "<fim_suffix>\n<fim_middle>", "max_tokens": 32}
    usage = (await api.http.post("/v1/completions", json=body)).json()["usage"]
    assert usage["prompt_tokens"] == -(-len(prefix) // 3)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > usage["prompt_tokens"]


async def test_newer_request_for_a_document_supersedes_its_queued_one(make_api):
    api = await make_api("step_ms=40")
    other = "import os\n\n" + CLASS  # another document keeps the model busy
    busy = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(other, LINE)))
    while not api.calls():
        await asyncio.sleep(0.005)
    older = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(CLASS, "        return self.us")))
    while api.service.waiting < 1:
        await asyncio.sleep(0.005)
    newer = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(CLASS, LINE)))
    r_busy, r_older, r_newer = await asyncio.gather(busy, older, newer)
    assert r_older.status_code == 200 and r_older.json()["content"] == ""
    assert r_older.headers["x-midword-source"] == "superseded"
    assert r_newer.json()["content"] == ANSWER and r_busy.status_code == 200
    assert [c["prefix"] for c in api.calls()] == [other + LINE, CLASS + LINE]  # the older never ran
    # another document's waiting request is not superseded
    busy = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(other, "        return self.user_")))
    while len(api.calls()) < 3:
        await asyncio.sleep(0.005)
    first = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(CLASS, "        re")))
    while api.service.waiting < 1:
        await asyncio.sleep(0.005)
    second = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(other, "        return se")))
    responses = await asyncio.gather(busy, first, second)
    assert all(r.headers.get("x-midword-source") != "superseded" for r in responses)


async def test_slow_schema_choice_falls_back_within_its_deadline(make_api, monkeypatch):
    import time as time_module

    from midword.server import http as http_module

    api = await make_api()
    monkeypatch.setattr(http_module, "GRAMMAR_CHOICE_TIMEOUT_S", 0.05)
    real_choose = api.service.grammars.choose

    def slow_choose(**kwargs):
        time_module.sleep(0.5)  # a schema file on a hung network mount
        return real_choose(**kwargs)

    monkeypatch.setattr(api.service.grammars, "choose", slow_choose)
    doc = '{\n  "$schema": "./schema.json",\n  "po'
    r = await api.http.post("/infill", json={"input_prefix": "", "input_suffix": "\n}\n", "prompt": doc})
    assert r.status_code == 200
    (call,) = api.calls()
    assert call["grammar_kind"] == "lark"  # the JSON fallback, chosen without waiting for the file
    # code needs no file: chosen on the loop, the slow path is never taken
    await api.http.post("/infill", json=vscode_body(CLASS, LINE))
    assert len(api.calls()) == 2


async def test_a_long_answer_yields_the_model_to_waiting_requests(make_api):
    # One editor's long answer must not hold every other editor for its whole budget:
    # while another request waits, the running one ends with what it has once it had
    # its share (time_budget_s / (1 + waiting)).
    long_class = "class Account:\n    user_name = 'a guest with a rather long name for a default value'\n\n"
    long_answer = "me = 'a guest with a rather long name for a default value'"  # 21 fake steps
    for fair in (True, False):
        api = await make_api("step_ms=30", time_budget_s=0.2, fair_share=fair)
        first = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(long_class, LINE)))
        while not api.calls():
            await asyncio.sleep(0.005)
        second = asyncio.ensure_future(api.http.post("/infill", json=vscode_body(CLASS, LINE)))
        a, b = (r.json() for r in await asyncio.gather(first, second))
        assert b["content"] == ANSWER
        if fair:
            assert a["content"] and long_answer.startswith(a["content"]) and a["content"] != long_answer
            assert a["stop_type"] == "limit"
        else:
            assert a["content"] == long_answer
