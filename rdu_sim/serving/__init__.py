"""rdu_sim.serving: requests, the continuous-batching scheduler and its drivers, the step
cache and the steady-state window (``rdu_sim.serving.steady``). Nothing is imported here, so
importing one module (the step shape a `step` command needs) loads no more."""
