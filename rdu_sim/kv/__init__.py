"""rdu_sim.kv"""
