"""Learning from the labels: training runs (`retraining`), their options (`options`) and the
promotion gate that decides whether a new version replaces the current one (`promotion`).
"""
