"""What every storage back end shares: the logic two back ends would otherwise keep
in step by hand.

Each module holds, for one store, the methods that are the same whatever holds
the bytes, written against the back end's own primitive (a fact store's
:meth:`snapshot`, a scratch store's :meth:`get`, ...), as bases or mixins the
LMDB and PostgreSQL classes inherit; a third back end gets them by inheriting
them too.  What differs on purpose (SQL against LMDB cursors) stays in each
back end.
"""
