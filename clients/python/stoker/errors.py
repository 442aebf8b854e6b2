"""Exceptions raised by the Stoker client."""


class StokerError(Exception):
    """The service refused or ended the request (its ERROR message is the text), or the
    connection to it failed."""


class ProtocolError(StokerError):
    """The peer sent bytes that do not follow docs/protocol.md (frames or the STKB layout)."""
