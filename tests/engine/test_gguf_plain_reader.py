"""`plain_gguf_reader` (engine/tokenizer.py): while open, gguf.GGUFReader reads a GGUF
file through a plain ndarray view of its map, and gives the same fields and tensors as
the memmap reader; on exit (also after an error) the original reader is back."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from midword.engine.tokenizer import plain_gguf_reader  # noqa: E402


def _write(path):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.block_count", 2)
    w.add_array("tokenizer.ggml.tokens", ["<pad>", "▁a", "b\nc", "中", ""])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, -2.25, -3.0, -4.0])
    w.add_array("tokenizer.ggml.token_type", [3, 1, 1, 1, 6])
    w.add_tensor("w", np.arange(24, dtype=np.float32).reshape(4, 6))
    w.add_tensor("q", np.arange(-64, 64, dtype=np.int8).reshape(2, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _contents(reader):
    fields = {name: (f.types, [p.tolist() for p in f.parts], list(f.data)) for name, f in reader.fields.items()}
    tensors = {t.name: (t.tensor_type, t.shape.tolist(), np.array(t.data)) for t in reader.tensors}
    return fields, tensors


def test_the_plain_reader_reads_what_the_memmap_reader_reads(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write(path)
    original = gguf.GGUFReader
    want_fields, want_tensors = _contents(original(path))
    with plain_gguf_reader():
        reader = gguf.GGUFReader(path)
        assert gguf.GGUFReader is not original and isinstance(reader, original)
        assert type(reader.data) is np.ndarray
        got_fields, got_tensors = _contents(reader)
    assert gguf.GGUFReader is original
    assert got_fields == want_fields
    assert got_fields["tokenizer.ggml.tokens"][2] != []  # the vocabulary was read, not skipped
    assert want_tensors.keys() == got_tensors.keys() == {"w", "q"}
    for name, (kind, shape, data) in want_tensors.items():
        assert got_tensors[name][:2] == (kind, shape)
        np.testing.assert_array_equal(got_tensors[name][2], data)


def test_the_original_reader_is_back_after_an_error():
    original = gguf.GGUFReader
    with pytest.raises(RuntimeError), plain_gguf_reader():
        raise RuntimeError("conversion failed")
    assert gguf.GGUFReader is original
