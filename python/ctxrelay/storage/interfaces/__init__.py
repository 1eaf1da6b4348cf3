"""The storage seam: one Protocol per store, each with its contract.

Every back end (the embedded LMDB one today) implements these; the
conformance suites under ``tests/storage/conformance`` run against each.
"""
