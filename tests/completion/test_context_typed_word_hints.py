"""Workspace context ranking (completion/context.py) from the word being typed: the
module it is looked up in and the names it begins bring the piece that defines the
word into the prompt, where name overlap alone leaves it out."""

from __future__ import annotations

from midword.completion.context import rank
from midword.completion.types import ContextChunk

ERRORS = '''"""exception classes"""


class MessageError(Exception):
    """Base class of the exceptions here."""


class MultipartConversionError(MessageError, TypeError):
    """Conversion to a multipart is prohibited."""
'''

OTHER = '''def attach_payload(msg, payload):
    """Attach a payload to a message."""
    msg.attach(payload)
'''

DOC = "from email import errors\n\n\ndef attach_payload(self, payload):\n    raise errors."


def _paths(pieces):
    return [p.path for p in pieces]


def test_a_piece_defining_the_typed_word_ranks_although_it_shares_no_name():
    chunks = (
        ContextChunk(ERRORS, path="email/errors.py", kind="document"),
        ContextChunk(OTHER, path="email/base.py", kind="document"),
    )
    # nothing typed yet after `errors.`: errors.py shares no name with the cursor's text,
    # and base.py (attach_payload, payload) is the only piece
    assert _paths(rank(chunks, DOC, "")) == ["email/base.py"]
    # `errors.Multi`: the piece that defines MultipartConversionError comes in, first
    pieces = rank(chunks, DOC + "Multi", "")
    assert _paths(pieces)[0] == "email/errors.py" and "MultipartConversionError" in pieces[0].text
    # a typed word no piece defines a name for changes nothing
    assert _paths(rank(chunks, DOC + "Zq", "")) == ["email/base.py"]


def test_the_module_before_the_dot_ranks_its_pieces_first():
    util = ContextChunk("def frob_count(widget_registry):\n    return len(widget_registry)\n", path="pkg/util.py")
    other = ContextChunk(
        "def describe(widget_registry, name):\n    return name, widget_registry\n", path="pkg/other.py"
    )
    prefix = "def report(widget_registry, name):\n    n = util.f"
    assert _paths(rank((other, util), prefix, ""))[0] == "pkg/util.py"
    # without the qualifier the piece sharing more names ranks first
    assert _paths(rank((other, util), prefix.replace("util.f", "f"), ""))[0] == "pkg/other.py"
