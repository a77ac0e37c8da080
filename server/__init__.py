"""Serving layer: LSP and HTTP front ends over midword.completion.

`midword serve` (`server/cli.py`) runs the language server of `server/lsp.py`. The
other modules are plain parts it is built from, each usable and tested alone:
`positions` (LSP position encodings), `documents` (exact incremental edits in pygls's
workspace), `settings` (the `midword` settings section), `grammar_choice` (which
grammar a document gets), `editing` (where an edit lands, one line or several),
`cache` (type-through and prefetched completions) and `worker` (the one model thread
with its newest-wins queue). Importing this package imports none of them.
"""
