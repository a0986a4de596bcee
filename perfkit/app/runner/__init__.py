"""Running runbooks: execute one with papermill (``run``), batches, the records written beside it,
parameters, ``perfkit open``, the embedded scenarios and load tests built from options.

Imports no other room of ``app``.
"""
