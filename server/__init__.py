"""Serving layer: LSP and HTTP front ends over midword.completion."""
