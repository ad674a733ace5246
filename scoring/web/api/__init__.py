"""The model side's REST API: model versions, training runs, stored scores, live scoring and search."""
