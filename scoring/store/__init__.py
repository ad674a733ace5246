"""The model store: registered versions and loading them (`registry`), the default model, local and
remote scorers, checkpoint export and import, model cards and public checkpoints.
"""
