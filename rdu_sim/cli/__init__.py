"""rdu_sim.cli"""
