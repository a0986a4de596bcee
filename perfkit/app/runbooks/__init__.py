"""The notebook API the runbooks call: the section API (``context``) and one module per runbook
(``inference``, ``training``, ``baseline``, ``compare``).

Imports ``runner`` only, never ``cli``.
"""
