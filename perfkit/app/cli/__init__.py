"""The command line: ``perfkit`` and its command groups (one module each), the options they share and
the terminal output.

Imports every other room of ``app``; only ``perfkit.__main__`` and ``perfkit.app``'s ``main`` import
it.
"""
