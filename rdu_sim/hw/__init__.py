"""rdu_sim.hw"""
