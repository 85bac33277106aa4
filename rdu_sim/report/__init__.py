"""rdu_sim.report"""
