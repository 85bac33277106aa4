"""Everything that simulates time runs here, in one same-instant order (:mod:`.order`): the
kernels' loop in float seconds (:mod:`.environment`, SimPy's environment and events as
compiled classes) and the serving loop in integer picoseconds (:mod:`.timeline`); the SimPy
operations no public call offers are :mod:`.simpy_events`."""
