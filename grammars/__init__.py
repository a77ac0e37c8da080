"""Grammar files shipped with midword (read with `importlib.resources`)."""

from importlib import resources


def read_grammar(name: str) -> str:
    """Text of a shipped grammar file, e.g. `read_grammar("json.lark")`."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
