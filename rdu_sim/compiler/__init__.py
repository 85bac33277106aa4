"""rdu_sim.compiler"""
