"""A tiny byte-level tokenizer for engine tests: small enough to check every token."""

from __future__ import annotations


class ToyTokenizer:
    """Tokens are given byte strings; encode is greedy longest match (all single bytes
    are in the vocabulary, so everything encodes). The last id is EOS."""

    name = "toy"

    def __init__(self, pieces: list[bytes]):
        singles = [bytes([b]) for b in range(256)]
        vocab = singles + [p for p in dict.fromkeys(pieces) if len(p) > 1]
        self._bytes = vocab + [b""]
        self.vocab_size = len(self._bytes)
        self.eos_token_ids = frozenset({self.vocab_size - 1})
        self.special_token_ids = frozenset({self.vocab_size - 1})
        self._index = {b: i for i, b in enumerate(vocab)}
        self._max_len = max(len(b) for b in vocab)

    def token_bytes(self, t: int) -> bytes:
        return self._bytes[t]

    def all_token_bytes(self) -> list[bytes]:
        return self._bytes

    def encode(self, data) -> list[int]:
        if isinstance(data, str):
            data = data.encode("utf-8")
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._max_len, len(data) - i), 0, -1):
                t = self._index.get(data[i : i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
        return out

    def decode(self, ids) -> bytes:
        return b"".join(self._bytes[t] for t in ids)


JSONISH_PIECES = [
    b'{"',
    b'":',
    b'",',
    b'"}',
    b"true",
    b"false",
    b"null",
    b"12",
    b"123",
    b"00",
    b" [",
    b"],",
    b"[]",
    b"{}",
    b"ab",
    b"abc",
    b"ba",
    b"  ",
    b"\n ",
    b"name",
    b"order",
    b"orderId",
    b"Id",
    b"Name",
    b'":"',
    b'\\"',
    b"\\u",
    b"e+",
    b"1.",
    b".5",
    b"-1",
    b"caf\xc3\xa9",
    b"\xc3",
    b"\xe2\x82",
    b"xyz",
    b" x",
    b"x ",
]


def toy() -> ToyTokenizer:
    return ToyTokenizer(JSONISH_PIECES)
