"""rdu_sim.graph"""
