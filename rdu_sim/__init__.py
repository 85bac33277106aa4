"""rdu-sim: a discrete-event simulator of SambaNova SN40L sockets serving LLMs."""

from pathlib import Path

from rdu_sim import native
from rdu_sim.input_errors import InputError
from rdu_sim.sim_warnings import RduSimWarning

__all__ = ["PACKAGE_DIR", "InputError", "RduSimWarning", "__version__"]

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).parent
"""The folder of the rdu_sim package: a wheel's shipped files are under it, a checkout's
beside it (found without ``importlib.resources``, which a step would import only for this)."""

native.install()  # before any compiled module is imported: never stale, never half
