"""Analyses of trajectories: what the agents saw and did (paper sections 3.7 and 4)."""
