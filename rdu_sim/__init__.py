"""rdu-sim: a discrete-event simulator of SambaNova SN40L sockets serving LLMs."""

from rdu_sim import native

__version__ = "0.1.0"

native.install()  # before any compiled module is imported: never stale, never half
