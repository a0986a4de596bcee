"""What-if replays: an incident's traffic replayed on the serving-engine simulator under another engine
configuration.

Imports ``runner`` (the embedded scenarios) only, never ``cli``.
"""
