"""Benchmarks as commands: each one prints midword's figures side by side with its peers.

`masks` is MaskBench (JSON Schema files with valid and invalid instances) run through
midword, llguidance and xgrammar with one tokenizer and one set of instances; `peers`
holds the adapters that give every engine the same small interface. Nothing here asserts
on time: the numbers go in a table (or JSON) for a person to read.
"""
