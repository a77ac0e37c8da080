"""midword: code completion that conditions on the characters typed so far and keeps output grammatical."""

__version__ = "0.1.0"
