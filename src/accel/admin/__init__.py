"""What ``accel checkpoints`` and ``accel cache`` do: list, show, verify, export, remove.

The CLI (:mod:`accel.cli.checkpoints`, :mod:`accel.cli.cache`) parses, calls one
function here and renders what it returns: frozen dataclasses of raw values with
``to_json()``. Formats are read by their one reader (:mod:`accel.store.manifest`,
:mod:`accel.store.series`, :mod:`accel.store.entry`), deletions go through the
store's and ``accel clean``'s own protocols. Only :mod:`accel.admin.export` (and its
:mod:`accel.admin._dcp`) imports torch, inside its functions; everything else answers
without it.
"""
