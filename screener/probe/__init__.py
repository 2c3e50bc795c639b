"""Probe recipes and parsers: pure functions that build argv lists and parse node output.

Nothing in this package starts a process; the transport runs the argv lists and hands the
text back. Submodules: :mod:`.fio`, :mod:`.iostat`, :mod:`.facts`, :mod:`.preflight`.
"""
