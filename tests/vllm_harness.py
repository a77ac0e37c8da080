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
import subprocess
import urllib.request
from pathlib import Path

import pytest

from midword.bench.vllm import START_TIMEOUT_S, log_tail, stop_process_group, vllm_env
from midword.bench.vllm import VllmServer as _VllmServer
from midword.bench.vllm import default_venv as venv_dir

ROOT = Path(__file__).resolve().parents[1]
BUILD_COMMAND = "bash .ci/vllm-venv.sh"
INPROC = Path(__file__).with_name("vllm_inproc.py")


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
            stop_process_group(proc, timeout_s=30)
            pytest.fail(f"vLLM in-process run took over {timeout_s:.0f} s; log: {log_tail(log)}")
    report = workdir / "report.json"
    if code != 0 or not report.is_file():
        pytest.fail(f"vLLM in-process run failed (exit {code}): {log_tail(log)}")
    return json.loads(report.read_text(encoding="utf-8"))


class VllmServer(_VllmServer):
    """vLLM's OpenAI server for MODEL on 127.0.0.1, for one test module; `url`, `log`, `post()`, `stop()`."""

    def __init__(self, model_dir: Path, log: Path, extra_flags=()):
        self.python = vllm_python()
        super().__init__(self.python, model_dir, log, extra_flags=extra_flags)

    def post(self, path: str, body: dict, timeout_s: float = 600) -> tuple[int, dict]:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")


__all__ = ["VllmServer", "run_inproc", "vllm_python", "export_default_model", "BUILD_COMMAND"]
