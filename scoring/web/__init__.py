"""The model side's pages and REST API: models, training, generation, review scores, charts."""
