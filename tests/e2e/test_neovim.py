"""A real editor as the client: headless Neovim starts `midword serve` through its
built-in LSP client, opens a file, puts the cursor mid-word, asks for completions,
applies the returned edit the way Neovim does (`vim.lsp.util.apply_text_edits` with the
client's offset encoding) and reports the buffer.

The line holds an emoji and CJK text before the cursor, so Neovim's own UTF-16
conversion checks the server's columns. The fast test uses the deterministic fake
engine; the slow one the real default model. Needs `nvim` >= 0.7 (Debian bookworm:
`apt-get install -y neovim`); skipped with that reason when it is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim is not installed (apt-get install -y neovim)")

LUA = r"""
local out = os.getenv("MIDWORD_NVIM_OUT")
local function finish(value)
  local f = io.open(out, "w")
  f:write(vim.fn.json_encode(value))
  f:close()
  vim.cmd("qa!")
end

local ok, err = pcall(function()
  local cmd = vim.fn.json_decode(os.getenv("MIDWORD_NVIM_CMD"))
  local file = os.getenv("MIDWORD_NVIM_FILE")
  local row = tonumber(os.getenv("MIDWORD_NVIM_ROW"))
  local col = tonumber(os.getenv("MIDWORD_NVIM_COL"))  -- bytes, as Neovim counts
  local wait_ms = tonumber(os.getenv("MIDWORD_NVIM_WAIT_MS"))
  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local state = "none"
  local client_id = vim.lsp.start_client({
    name = "midword",
    cmd = cmd,
    root_dir = vim.fn.fnamemodify(file, ":h"),
    init_options = vim.fn.json_decode(os.getenv("MIDWORD_NVIM_INIT")),
    handlers = {
      ["midword/status"] = function(_, result) state = result.state end,
    },
  })
  assert(client_id, "start_client failed")
  vim.lsp.buf_attach_client(bufnr, client_id)
  local ready = vim.wait(wait_ms, function() return state == "ready" or state == "error" end, 20)
  assert(ready and state == "ready", "server not ready: " .. state)
  local client = vim.lsp.get_client_by_id(client_id)
  vim.api.nvim_win_set_cursor(0, { row, col })
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/completion", params, wait_ms)
  local result = nil
  for _, response in pairs(responses or {}) do
    assert(not response.err, vim.inspect(response.err))
    result = response.result
  end
  assert(result, "no completion response")
  local items = result.items or result
  assert(#items > 0, "no completion items")
  local edit = items[1].textEdit
  vim.lsp.util.apply_text_edits({ edit }, bufnr, client.offset_encoding)
  local inline = vim.lsp.buf_request_sync(bufnr, "textDocument/inlineCompletion", vim.tbl_extend("force",
    vim.lsp.util.make_position_params(0, client.offset_encoding), { context = { triggerKind = 1 } }), wait_ms)
  local inline_result = nil
  for _, response in pairs(inline or {}) do inline_result = response.result end
  finish({
    lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false),
    item = items[1],
    position = params.position,
    encoding = client.offset_encoding,
    incomplete = result.isIncomplete,
    inline = inline_result,
  })
end)
if not ok then finish({ error = tostring(err) }) end
"""


def run_neovim(
    tmp_path: Path,
    server_cmd: list[str],
    init_options: dict,
    text: str,
    row: int,
    line_prefix: str,
    wait_ms: int = 20000,
    timeout: float = 120.0,
) -> dict:
    doc = tmp_path / "example.py"
    doc.write_text(text, encoding="utf-8")
    script = tmp_path / "client.lua"
    script.write_text(LUA, encoding="utf-8")
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "MIDWORD_NVIM_OUT": str(out),
        "MIDWORD_NVIM_CMD": json.dumps(server_cmd),
        "MIDWORD_NVIM_INIT": json.dumps(init_options),
        "MIDWORD_NVIM_FILE": str(doc),
        "MIDWORD_NVIM_ROW": str(row),
        "MIDWORD_NVIM_COL": str(len(line_prefix.encode("utf-8"))),
        "MIDWORD_NVIM_WAIT_MS": str(wait_ms),
        "XDG_STATE_HOME": str(tmp_path / "state"),  # Neovim's LSP log goes here, not in $HOME
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [NVIM, "--headless", "--clean", "-n", "-c", f"luafile {script}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert out.exists(), f"Neovim wrote no result (rc={proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(out.read_text(encoding="utf-8"))
    assert "error" not in result, result["error"]
    return result


def test_neovim_completes_mid_word_with_the_fake_engine(tmp_path):
    # In normal mode Neovim's cursor sits *on* a character, so the line goes on after
    # the cut word and the cursor is put on the ")" right after it.
    text = 'userName = 1\nt = ("😀中文", userNa)\nprint(t)\n'
    cmd = [sys.executable, "-m", "midword.server", "--engine", "tests.fake_engine:FakeEngine"]
    before = 't = ("😀中文", userNa'
    result = run_neovim(tmp_path, cmd, {"midword": {"model": "fake", "prefetch": False}}, text, 2, before)
    assert result["encoding"] == "utf-16"
    assert result["position"] == {"line": 1, "character": len(before.encode("utf-16-le")) // 2}
    assert result["incomplete"] is True
    edit = result["item"]["textEdit"]
    assert edit["range"]["start"]["character"] == len('t = ("😀中文", '.encode("utf-16-le")) // 2
    assert result["lines"] == ["userName = 1", 't = ("😀中文", userName = 1)', "print(t)"]
    # the inline request, at the cursor Neovim left, answers too
    assert result["inline"] is not None and "items" in result["inline"]


@pytest.mark.slow
def test_neovim_completes_mid_word_with_the_real_engine(tmp_path):
    text = (
        "class Account:\n    def __init__(self, userName):\n        self.userName = userName\n\n"
        "    def greet(self):\n        return 'Hello, ' + str(self.userNa)\n"
    )
    cmd = [sys.executable, "-m", "midword.server"]
    line = "        return 'Hello, ' + str(self.userNa"
    result = run_neovim(tmp_path, cmd, {"midword": {"prefetch": False}}, text, 6, line, wait_ms=600_000, timeout=900)
    new_line = result["lines"][5]
    assert new_line.startswith("        return 'Hello, ' + str(self.userName"), new_line
