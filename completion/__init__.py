"""Completion layer: model backends, character prefix conditioning, the decoding loop, caches.

Imports only downward (midword.engine); knows nothing of LSP.
"""
