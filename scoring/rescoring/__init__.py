"""Scoring the pool and choosing what annotators see: stored scores (`scores`), the chunked rescore
job (`rescore`), the labels as rows (`label_rows`), the bootstrap ensemble (`ensemble`) and the
queue's selection (`selection`).
"""
