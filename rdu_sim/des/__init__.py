"""The discrete-event kernel every simulated part runs in: SimPy's environment and events as
compiled classes (:mod:`rdu_sim.des.environment`), below the hardware models (``hw``) and the
engine that wires them."""
