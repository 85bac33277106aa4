"""rdu_sim.serving"""
