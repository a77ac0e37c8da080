"""Unit tests of the server's plain parts: settings, grammar choice (with the bundled
schemas compiled by the real JSON Schema front end), edit placement, the type-through
cache and the model worker (with the fake engine)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from fake_engine import FakeEngine  # tests/ is on sys.path, as for tests/toy.py

from midword.completion.types import Completion, CompletionRequest, GrammarSpec
from midword.engine.jsonschema import compile_json_schema, schema_ordered
from midword.engine.recognizer import grammar_accepts
from midword.grammars import read_grammar
from midword.server.cache import CompletionCache
from midword.server.editing import fit_to_line, rebase, wants_multiline, word_start
from midword.server.grammar_choice import GrammarResolver, bundled_schema, schema_reference, uri_to_path
from midword.server.settings import Settings, parse_settings
from midword.server.worker import ModelWorker

# -- settings -------------------------------------------------------------------------------


def test_settings_parse_and_defaults():
    s, problems = parse_settings(
        {
            "midword": {
                "maxTokens": 16,
                "temperature": 0.5,
                "mode": "heal1",
                "grammars": {"*.toml": "toml.lark"},
                "enable": False,
            }
        }
    )
    assert problems == []
    assert (s.max_tokens, s.temperature, s.mode, s.enable) == (16, 0.5, "heal1", False)
    assert s.grammars == (("*.toml", "toml.lark"),) and s.model == "gemma3"
    # the section itself (not wrapped) is accepted too; a key left out takes its default
    s2, _ = parse_settings({"model": "other"}, s)
    assert s2.model == "other" and s2.max_tokens == 48
    assert parse_settings(None, s) == (s, [])


def test_settings_problems_name_the_key_and_keep_the_previous_value():
    previous = Settings(max_tokens=20)
    s, problems = parse_settings(
        {
            "maxTokens": "lots",
            "temperature": -1,
            "mode": "fast",
            "enable": "yes",
            "bogus": 1,
            "maxTokens2": 3,
            "prefetchDelayMs": 1.5,
            "model": "",
        },
        previous,
    )
    assert s.max_tokens == 20 and s.temperature == 0.0 and s.mode == "cpc" and s.enable is True
    text = "\n".join(problems)
    assert 'midword.maxTokens must be an integer from 1 to 1024, got "lots"; keeping 20' in text
    assert "midword.temperature must be from 0 to 2, got -1" in text
    assert "midword.mode must be one of naive, heal1, align, cpc" in text
    assert "midword.enable must be true or false" in text
    assert "midword.bogus is not a setting" in text and "midword.maxTokens2 is not a setting" in text
    assert "midword.prefetchDelayMs must be an integer" in text and "midword.model must be a non-empty" in text
    assert len(problems) == 8
    _, problems = parse_settings(["not", "an", "object"])
    assert problems == ['midword settings must be an object, got ["not", "an", "object"]']
    _, problems = parse_settings({"grammars": {"*.x": 3}})
    assert 'midword.grammars["*.x"] must be a grammar file path' in problems[0]
    s, problems = parse_settings({"maxTokens": None})  # VS Code's "unset"
    assert problems == [] and s.max_tokens == 48


# -- $schema --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"$schema": "./s.json", "a": 1}', "./s.json"),
        ('{\n  "a": {"$schema": "nested.json"},\n  "$schema": "top.json"\n}', "top.json"),
        ('{"a": "$schema", "b": 1}', None),
        ('{"$schema": "./s', None),  # still being typed
        ('{"$schema": 5}', None),
        ('[{"$schema": "x.json"}]', None),
        ('{"a": [1, {"$schema": "n.json"}], "b": 2}', None),
        ('{"x": 1} {"$schema": "after.json"}', None),
        ('// comment {"$schema": "c.json"}\n{"$schema": "real.json"}', "real.json"),
        ('{"$schema": "a\\"b.json"}', 'a"b.json'),
        ('{"a": 1', None),
    ],
)
def test_schema_reference(text, expected):
    assert schema_reference(text) == expected


# -- grammar choice -------------------------------------------------------------------------


DEFAULT_SETTINGS = Settings()


def _choose(resolver, path, text, language="json", settings=DEFAULT_SETTINGS, root=None):
    return resolver.choose(
        path=str(path) if path else None,
        language_id=language,
        text=text,
        settings=settings,
        root=str(root) if root else None,
    )


def test_json_schema_choice(tmp_path):
    r = GrammarResolver()
    (tmp_path / "sub").mkdir()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    (tmp_path / "sub" / "s.json").write_text(json.dumps(schema))
    doc = tmp_path / "sub" / "d.json"
    c = _choose(r, doc, '{"$schema": "./s.json", ')
    assert c.spec.kind == "json_schema" and json.loads(c.spec.source) == schema and c.note is None
    c = _choose(r, tmp_path / "d.json", '{"$schema": "sub/s.json"}')
    assert c.spec.kind == "json_schema"
    c = _choose(r, tmp_path / "d.json", '{"$schema": "%s"}' % (tmp_path / "sub" / "s.json").as_uri())
    assert c.spec.kind == "json_schema"
    # missing or broken schema files fall back to plain JSON with a note naming the file
    c = _choose(r, doc, '{"$schema": "./missing.json"}')
    assert c.spec == GrammarSpec(kind="lark", source=read_grammar("json.lark")) and "missing.json" in c.note
    (tmp_path / "sub" / "bad.json").write_text("{not json")
    c = _choose(r, doc, '{"$schema": "./bad.json"}')
    assert c.spec.kind == "lark" and "not valid JSON" in c.note and "line 1:2" in c.note
    # remote: never fetched; SchemaStore URLs of bundled schemas are recognised
    c = _choose(r, doc, '{"$schema": "https://example.com/x.json"}')
    assert c.spec.kind == "lark" and "never fetches" in c.note
    c = _choose(r, doc, '{"$schema": "https://json.schemastore.org/package.json"}')
    assert c.spec.kind == "json_schema" and c.spec.source == bundled_schema("package.json")
    # A JSON Schema file gets its draft's metaschema, which the engine bundles.
    for draft in ("https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"):
        c = _choose(r, doc, '{"$schema": "%s", "ty' % draft)
        assert c.spec.kind == "json_schema" and json.loads(c.spec.source) == {"$schema": draft, "$ref": draft}
        assert c.note is None and "metaschema" in c.origin
    c = _choose(r, None, '{"$schema": "./s.json"}')
    assert c.spec.kind == "lark" and "no path" in c.note


def test_a_workspace_schema_brings_the_files_it_refers_to(tmp_path):
    # A schema split over files, as projects write them: the engine reads no files, so
    # the referenced ones travel inside the schema, each a resource with its file URI.
    from midword.engine import Grammar
    from midword.engine.recognizer import grammar_accepts

    ws = tmp_path / "ws"
    (ws / "schemas" / "types").mkdir(parents=True)
    (ws / "schemas" / "main.json").write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {
                    "port": {"$ref": "common.json#/$defs/port"},
                    "name": {"$ref": "#/$defs/name"},
                    "tags": {"enum": [{"$ref": "../../outside.json"}]},
                },
                "$defs": {"name": {"type": "string"}},
            }
        )
    )
    (ws / "schemas" / "common.json").write_text(json.dumps({"$defs": {"port": {"$ref": "types/int.json"}}}))
    (ws / "schemas" / "types" / "int.json").write_text(json.dumps({"type": "integer", "minimum": 1}))
    r = GrammarResolver()
    c = _choose(r, ws / "conf.json", '{"$schema": "./schemas/main.json", ', root=ws)
    assert c.spec.kind == "json_schema" and c.note is None  # the enum's "$ref" is data, not read
    g = Grammar.from_json_schema(c.spec.source)
    assert grammar_accepts(g, b'{"port": 80, "name": "x"}')
    assert not grammar_accepts(g, b'{"port": 0}') and not grammar_accepts(g, b'{"port": "80"}')
    # A file outside the workspace is not read: the note says so, and nothing is embedded.
    (tmp_path / "outside.json").write_text(json.dumps({"type": "string"}))
    (ws / "schemas" / "leak.json").write_text(json.dumps({"$ref": "../../outside.json"}))
    c = _choose(r, ws / "conf.json", '{"$schema": "./schemas/leak.json"}', root=ws)
    assert c.spec.kind == "json_schema" and "outside the workspace" in c.note
    assert json.loads(c.spec.source) == {"$ref": "../../outside.json"}


def test_bundled_and_plain_choices(tmp_path):
    r = GrammarResolver()
    assert _choose(r, tmp_path / "package.json", "{").spec.source == bundled_schema("package.json")
    assert _choose(r, tmp_path / "tsconfig.build.json", "{").spec.source == bundled_schema("tsconfig.json")
    assert _choose(r, tmp_path / "jsconfig.json", "{").spec.source == bundled_schema("tsconfig.json")
    assert _choose(r, tmp_path / "other.json", "{").spec == GrammarSpec(kind="lark", source=read_grammar("json.lark"))
    assert _choose(r, tmp_path / "x.json", "{", language=None).spec.kind == "lark"  # by extension
    assert _choose(r, tmp_path / "x.py", "x", language="python").spec == GrammarSpec(kind="auto")
    # JSON with comments: the code grammar when the document has a comment
    assert _choose(r, tmp_path / "tsconfig.json", "{ // hi\n", language="jsonc").spec == GrammarSpec(kind="auto")
    assert _choose(r, tmp_path / "tsconfig.json", '{"a": "//"', language="jsonc").spec.kind == "json_schema"


def test_grammar_associations(tmp_path):
    r = GrammarResolver()
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "kv.lark").write_text("start: /[a-z]+/\n")
    (tmp_path / "g" / "num.regex").write_text("[0-9]+\n")
    (tmp_path / "g" / "s.json").write_text('{"type": "string"}')
    settings = Settings(
        grammars=(
            ("*.kv", "g/kv.lark"),
            ("src/**/*.num", "g/num.regex"),
            ("sql", "g/s.json"),
            ("*.cfg", "json.lark"),
            ("*.txt", "none"),
            ("*.bad", "g/x.yaml"),
            ("*.gone", "g/missing.lark"),
            ("*.pkg", "schemas/package.json"),
        )
    )
    c = _choose(r, tmp_path / "a.kv", "", language="plaintext", settings=settings, root=tmp_path)
    assert c.spec == GrammarSpec(kind="lark", source="start: /[a-z]+/\n") and "*.kv" in c.origin
    c = _choose(r, tmp_path / "src" / "deep" / "x.num", "", language="plaintext", settings=settings, root=tmp_path)
    assert c.spec == GrammarSpec(kind="regex", source="[0-9]+")
    assert (
        _choose(r, tmp_path / "x.num", "", language="plaintext", settings=settings, root=tmp_path).spec.kind == "auto"
    )
    c = _choose(r, tmp_path / "q.sql", "", language="sql", settings=settings, root=tmp_path)
    assert c.spec.kind == "json_schema"
    assert _choose(
        r, tmp_path / "a.cfg", "", language="ini", settings=settings, root=tmp_path
    ).spec.source == read_grammar("json.lark")
    assert (
        _choose(r, tmp_path / "a.txt", "", language="plaintext", settings=settings, root=tmp_path).spec.kind == "none"
    )
    assert _choose(r, tmp_path / "a.pkg", "", language="x", settings=settings, root=tmp_path).spec.kind == "json_schema"
    c = _choose(r, tmp_path / "a.bad", "", language="plaintext", settings=settings, root=tmp_path)
    assert c.spec.kind == "auto" and "unknown grammar file type .yaml" in c.note
    c = _choose(r, tmp_path / "a.gone", "", language="plaintext", settings=settings, root=tmp_path)
    assert c.spec.kind == "auto" and "missing.lark does not exist" in c.note


def test_grammar_files_are_reread_when_they_change(tmp_path):
    r = GrammarResolver()
    f = tmp_path / "g.lark"
    f.write_text("start: /a/\n")
    assert r.read(str(f)) == "start: /a/\n"
    f.write_text("start: /bb/\n")
    os.utime(f, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert r.read(str(f)) == "start: /bb/\n"


def test_uri_to_path():
    assert uri_to_path("file:///a/b%20c.json") == "/a/b c.json"
    assert uri_to_path("untitled:Untitled-1") is None


# -- the bundled schemas, compiled by the real front end ---------------------------------------


def _accepts(schema_name: str, value) -> bool:
    """Whether the schema's grammar accepts `value` (keys put in the grammar's order,
    which the schema grammars fix; see engine/jsonschema.py)."""
    schema = bundled_schema(schema_name)
    grammar = compile_json_schema(schema)
    return grammar_accepts(grammar, json.dumps(schema_ordered(schema, value)).encode())


def test_bundled_package_json_schema():
    assert _accepts(
        "package.json",
        {
            "name": "@scope/my-pkg",
            "version": "1.2.3",
            "description": "d",
            "keywords": ["a"],
            "license": "MIT",
            "author": {"name": "Ada", "email": "ada@example.com"},
            "contributors": ["Bob <b@x.io>"],
            "main": "index.js",
            "bin": {"tool": "bin/tool.js"},
            "repository": {"type": "git", "url": "https://x/y.git"},
            "scripts": {"test": "jest"},
            "dependencies": {"left-pad": "^1.0.0"},
            "devDependencies": {},
            "engines": {"node": ">=18"},
            "private": True,
            "workspaces": ["packages/*"],
            "type": "module",
            "custom-field": [1, 2],
        },
    )
    assert not _accepts("package.json", {"name": "Has Spaces"})
    assert not _accepts("package.json", {"name": ""})
    assert not _accepts("package.json", {"type": "esm"})
    assert not _accepts("package.json", {"private": "yes"})
    assert not _accepts("package.json", {"dependencies": {"a": 1}})
    assert not _accepts("package.json", {"author": {"email": "no-name@x.io"}})


def test_bundled_tsconfig_schema():
    assert _accepts(
        "tsconfig.json",
        {
            "extends": "./base.json",
            "compilerOptions": {
                "target": "ES2022",
                "module": "NodeNext",
                "moduleResolution": "bundler",
                "lib": ["dom"],
                "strict": True,
                "outDir": "dist",
                "paths": {"@/*": ["src/*"]},
                "jsx": "react-jsx",
            },
            "include": ["src"],
            "exclude": ["node_modules"],
            "references": [{"path": "../core"}],
        },
    )
    assert _accepts("tsconfig.json", {"compilerOptions": {"target": "esnext", "module": "commonjs"}})
    assert not _accepts("tsconfig.json", {"compilerOptions": {"target": "es2099"}})
    assert not _accepts("tsconfig.json", {"compilerOptions": {"strict": "true"}})
    assert not _accepts("tsconfig.json", {"references": [{"prepend": True}]})


# -- edit placement -------------------------------------------------------------------------


def test_word_start_and_multiline():
    assert word_start("print(userNa") == 6 and word_start("x = ") == 4 and word_start("naïve") == 0
    assert wants_multiline("def f(x):") and wants_multiline("if (a) {  ") and wants_multiline("f = (x) =>")
    assert wants_multiline("def f(x):\n    ") and wants_multiline("def f(x):\r\n\t")
    assert not wants_multiline("x = 1") and not wants_multiline("def f(x):\n    y") and not wants_multiline("")
    assert wants_multiline("if (a) {", "}\n") and wants_multiline("f(", ")") and wants_multiline("def f():", "\nx")
    assert not wants_multiline("x = {", '"a": 1}') and not wants_multiline("def f(x):", " # c")


def test_fit_to_line():
    prefix = "a = 1\nb = fo"
    c = Completion(text="foo(1)", replace_start=8)
    assert fit_to_line(c, prefix) is c
    moved = fit_to_line(Completion(text="1\nb = foo", replace_start=4), prefix)
    assert (moved.text, moved.replace_start) == ("b = foo", 6)
    assert fit_to_line(Completion(text="2\nb = foo", replace_start=4), prefix) is None


def test_rebase():
    c = rebase("x = userName", "x = userN")
    assert (c.text, c.replace_start) == ("userName", 4)
    assert rebase("x = userName", "x = userName") is None
    assert rebase("x = userName", "x = other") is None


# -- the type-through cache -------------------------------------------------------------------


def _req(prefix, suffix="", **kw):
    return CompletionRequest(prefix=prefix, suffix=suffix, language="python", **kw)


def test_cache_serves_typed_through_completions():
    cache = CompletionCache()
    r = _req("print(userNa", ")\n")
    assert cache.put("u", r, Completion(text="userName, 1", replace_start=6)) == "print(userName, 1"
    c, entry = cache.get("u", _req("print(userNam", ")\n"))
    assert (c.text, c.replace_start, entry.origin) == ("userName, 1", 6, "model")
    c, _ = cache.get("u", _req("print(userName, ", ")\n"))
    assert (c.text, c.replace_start) == ("1", 16)
    assert cache.get("u", _req("print(userNa", ")\n")) is not None  # the same prefix again
    assert cache.get("u", _req("print(userN", ")\n")) is None  # backspaced below what was asked
    assert cache.get("u", _req("print(userNax", ")\n")) is None  # typed something else
    assert cache.get("u", _req("print(userNam", ")")) is None  # the text after the cursor changed
    assert cache.get("u", _req("print(userName, 1", ")\n")) is None  # nothing left to insert
    assert cache.get("v", _req("print(userNam", ")\n")) is None  # another document
    assert cache.get("u", _req("print(userNam", ")\n", mode="naive")) is None  # asked differently


def test_cache_multi_line_entry_serves_one_line_requests():
    cache = CompletionCache()
    cache.put("u", _req("x = 1", single_line=False), Completion(text="\ny = 2\nz = 3", replace_start=5), "prefetch")
    c, entry = cache.get("u", _req("x = 1\n"))
    assert c.text == "y = 2" and entry.origin == "prefetch"
    assert cache.get("u", _req("x = 1")) is None  # at the end of the line nothing is left on it
    c, _ = cache.get("u", _req("x = 1\n", single_line=False))
    assert c.text == "y = 2\nz = 3"
    cache.put("u", _req("a", single_line=True), Completion(text="abc", replace_start=0))
    assert cache.get("u", _req("a", single_line=False)) is None  # one line cannot answer for many


def test_cache_rejects_inconsistent_and_bounds_size():
    cache = CompletionCache(per_document=2, documents=2)
    assert cache.put("u", _req("ab"), Completion(text="xy", replace_start=0)) is None
    assert cache.put("u", _req("ab"), Completion(text="", replace_start=2)) is None
    for i in range(5):
        cache.put("u", _req(f"k{i}"), Completion(text=f"k{i}zz", replace_start=0))
    assert len(cache) == 2 and cache.get("u", _req("k4z")) and cache.get("u", _req("k0z")) is None
    cache.put("v", _req("a"), Completion(text="ab", replace_start=0))
    cache.put("w", _req("a"), Completion(text="ab", replace_start=0))
    assert cache.get("u", _req("k4z")) is None  # the least recently used document went
    cache.forget()
    assert len(cache) == 0


# -- the model worker -----------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.events = []
        self.cond = threading.Condition()

    def __call__(self, event):
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait(self, kind, timeout=5.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(e.kind == kind for e in self.events):
                left = deadline - time.monotonic()
                assert left > 0, f"no {kind} event in {[e.kind for e in self.events]}"
                self.cond.wait(left)


def _worker(model="fake"):
    engines = []

    def factory(**kw):
        engines.append(FakeEngine(**kw))
        return engines[-1]

    events = Recorder()
    worker = ModelWorker(factory, events)
    worker.load(model)
    return worker, engines, events


LONG_DOC = "identifier_" + "x" * 200 + " = 1\nidentifier_"


def test_worker_loads_with_progress_and_completes():
    worker, engines, events = _worker("fake?load_s=0.05")
    events.wait("ready")
    assert worker.ready and [e.kind for e in events.events][:2] == ["loading", "progress"]
    assert any(e.kind == "progress" and e.fraction == 1.0 for e in events.events)
    job = worker.submit("u", 1, _req("userName = 1\nuserNa"))
    outcome = job.future.result(5)
    assert outcome.status == "done" and outcome.completion.text == "userName = 1"
    worker.close(1)


def test_worker_newest_wins_and_cancels_the_running_job():
    worker, engines, events = _worker("fake?step_ms=20")
    events.wait("ready")
    first = worker.submit("u", 1, _req(LONG_DOC))
    time.sleep(0.1)  # first is running
    second = worker.submit("u", 1, _req(LONG_DOC + "x"))
    third = worker.submit("u", 1, _req(LONG_DOC + "xx"))  # second never starts
    assert first.future.result(5).status == "superseded"
    assert second.future.result(5).status == "superseded"
    assert third.future.result(5).status == "done"
    assert len(engines[0].calls) == 2  # first (stopped early) and third
    assert worker.tokens_generated < 48 + 48
    worker.close(1)


def test_worker_shares_identical_jobs_and_releases():
    worker, engines, events = _worker("fake?step_ms=20")
    events.wait("ready")
    a = worker.submit("u", 1, _req(LONG_DOC))
    b = worker.submit("u", 1, _req(LONG_DOC))
    assert a is b and a.waiters == 2
    worker.release(a)  # one of two gave up: keeps running
    time.sleep(0.05)
    assert not a.stopped()
    worker.release(a)
    assert a.future.result(5).status == "cancelled"
    worker.close(1)


def test_worker_stale_versions_and_prefetch_only_when_idle():
    worker, engines, events = _worker("fake?step_ms=20")
    events.wait("ready")
    job = worker.submit("u", 1, _req(LONG_DOC))
    time.sleep(0.05)
    pre = worker.submit("u", 1, _req("a"), prefetch=True)
    assert pre.future.result(1).status == "superseded"  # busy: dropped at once
    worker.cancel_stale("u", 2)
    assert job.future.result(5).status == "cancelled"
    worker.cancel_stale("other", 5)
    pre = worker.submit("u", 2, _req("userName = 1\nuserNa"), prefetch=True)
    assert pre.future.result(5).status == "done"
    worker.close(1)


def test_worker_engine_failures_become_outcomes():
    worker, engines, events = _worker("fake?fail=complete")
    events.wait("ready")
    outcome = worker.submit("u", 1, _req("a")).future.result(5)
    assert outcome.status == "error" and "fake engine failure" in outcome.error
    worker.load("fake?fail=load")
    events.wait("error")
    assert worker.state == "error" and "not available" in worker.error
    assert worker.submit("u", 1, _req("a")).future.result(5).status == "not_ready"
    worker.load("fake")
    deadline = time.monotonic() + 5
    while not worker.ready:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert worker.submit("u", 1, _req("userName = 1\nuserNa")).future.result(5).status == "done"
    worker.close(1)


# -- answer_may_serve: is a running job's work still worth finishing? ---------------------------


def test_answer_may_serve_follows_the_predicted_text():
    from midword.server.cache import answer_may_serve

    req = CompletionRequest(prefix="x = user", suffix="\n")
    # nothing produced yet: any forward typing may still be served
    assert answer_may_serve(req, None, "x = userN", "\n")
    # produced "userName = 1" (replacing the typed "user"): typing its characters keeps it
    partial = (4, "userName = 1")
    assert answer_may_serve(req, partial, "x = userNa", "\n")
    assert answer_may_serve(req, partial, "x = userName = 1 +", "\n")  # past the text so far
    assert not answer_may_serve(req, partial, "x = userId", "\n")  # typed something else
    assert not answer_may_serve(req, partial, "x = use", "\n")  # deleted: the cache serves forward only
    assert not answer_may_serve(req, partial, "x = userNa", "\n)")  # the text after the cursor changed
    # a one-line answer cannot reach a new line
    assert not answer_may_serve(req, None, "x = user\ny", "\n")
    # a prefetch computes ahead of the user: still on the way to its prefix is fine
    ahead = CompletionRequest(prefix="x = userName\n", suffix="\n", single_line=False)
    assert answer_may_serve(ahead, None, "x = userNa", "\n", ahead=True)
    assert not answer_may_serve(ahead, None, "x = userNa", "\n")
    assert not answer_may_serve(ahead, None, "x = userId", "\n", ahead=True)
