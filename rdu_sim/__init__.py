"""rdu-sim: a discrete-event simulator of SambaNova SN40L sockets serving LLMs."""

__version__ = "0.1.0"
