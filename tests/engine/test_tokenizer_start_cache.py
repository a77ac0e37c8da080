"""What a start loads instead of recomputing (engine/tokenizer.py): the vocabulary's
fingerprint (built with numpy, the same value as hashing id by id) and the sorted token
index of `tokenize_partial` (its order kept on disk), on the real tokenizers."""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import pytest

REAL = ("gemma3", "llama3", "cl100k")


@pytest.fixture(params=REAL)
def real(request):
    return request.getfixturevalue(request.param)


def fresh(tok):
    """Another Tokenizer over the same table, with nothing computed yet."""
    out = copy.copy(tok)
    out._sorted = None
    out._max_len = 0
    out._fingerprint = None
    return out


def reference_fingerprint(tok) -> str:
    h = hashlib.sha256()
    h.update(tok.vocab_size.to_bytes(4, "little"))
    h.update(bytes(1 if i in tok.special_token_ids else 0 for i in range(tok.vocab_size)))
    h.update(b"".join(len(b).to_bytes(4, "little") for b in tok.all_token_bytes()))
    h.update(b"".join(tok.all_token_bytes()))
    return h.hexdigest()


def reference_index(tok) -> list[bytes]:
    return sorted({b for i, b in enumerate(tok.all_token_bytes()) if b and i not in tok.special_token_ids})


def test_fingerprint_is_the_per_id_hash(real):
    assert fresh(real).vocab_fingerprint() == reference_fingerprint(real)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MIDWORD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MIDWORD_NO_DISK_CACHE", raising=False)
    return tmp_path


def test_the_sorted_index_is_kept_and_loaded_equal(real, cache_dir, monkeypatch):
    want = reference_index(real)
    first = fresh(real)
    assert first._prefix_index() == want
    path = first._prefix_index_path()
    assert path is not None and path.is_file()

    second = fresh(real)

    def no_sort(self):
        raise AssertionError("the index should come from the disk cache")

    monkeypatch.setattr(type(real), "_build_prefix_index", no_sort)
    assert second._prefix_index() == want
    assert second._max_len == first._max_len == max(map(len, want))
    data = b"def f(x):\n    return x.val"
    assert second.tokenize_partial(data) == first.tokenize_partial(data)


@pytest.mark.parametrize("damage", ["unsorted", "special", "out of range", "not an array", "empty", "int64"])
def test_a_damaged_index_is_rebuilt(gemma3, cache_dir, damage):
    tok = fresh(gemma3)
    want = reference_index(tok)
    tok._prefix_index()
    path = tok._prefix_index_path()
    ids = np.load(path)
    if damage == "unsorted":
        ids[[10, 20]] = ids[[20, 10]]
        np.save(path, ids)
    elif damage == "special":
        ids[5] = min(gemma3.special_token_ids)
        np.save(path, ids)
    elif damage == "out of range":
        ids[-1] = gemma3.vocab_size
        np.save(path, ids)
    elif damage == "not an array":
        path.write_bytes(b"not numpy")
    elif damage == "empty":
        np.save(path, ids[:0])
    else:
        np.save(path, ids.astype(np.int64))
    again = fresh(gemma3)
    assert again._load_prefix_index() is None
    assert again._prefix_index() == want
    assert fresh(gemma3)._load_prefix_index() == want  # rewritten whole


def test_no_disk_cache_keeps_nothing(llama3, cache_dir, monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")
    tok = fresh(llama3)
    assert tok._prefix_index() == reference_index(llama3)
    assert tok._prefix_index_path() is None
    assert not (cache_dir / "tokenizers").exists()
