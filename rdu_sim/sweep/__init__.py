"""rdu_sim.sweep"""
