"""Scoring the pool and choosing what annotators see: stored scores (`scores`), the chunked rescore
job (`rescore`), the labels as rows (`label_rows`), the bootstrap ensemble (`ensemble`), the
queue's selection (`selection`) and how far the label sources and the PRM agree (`source_agreement`).
"""
