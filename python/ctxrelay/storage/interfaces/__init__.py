"""The storage seam: one Protocol per store, each with its contract.

Every back end (the embedded LMDB one today) implements these; the
conformance suites under ``tests/storage/conformance`` run against each
through the Protocols only.  One module per store: ``transcript`` (with its
text index), ``turnlog``, ``warm``, ``scratch``, ``rolling`` (the rolling
log), ``cache`` (the hot cache); ``backend`` is what opens them.  The
knowledge fabric's Protocol lives beside them (``facts``).
"""
