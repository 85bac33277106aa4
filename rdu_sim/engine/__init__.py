"""rdu_sim.engine"""
