"""Why a file's bytes are not text, said one way wherever a file is read (YAML and JSON
config files, measurement files, request traces): a file that starts with gzip's magic
bytes (1f 8b) is named compressed, anything else by the first byte that is not UTF-8."""

from __future__ import annotations

GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of every gzip file (RFC 1952, section 2.3.1)."""


def not_text(head: bytes, at: int, byte: int) -> str:
    """The problem of a file whose bytes from the start are ``head`` (empty when the bad byte
    is past the first line) and whose byte ``at`` (0-based, in the file), of value ``byte``,
    is not UTF-8."""
    if head.startswith(GZIP_MAGIC):
        return "gzip-compressed (decompress it first)"
    return f"not valid UTF-8 at byte {at} (0x{byte:02x})"
