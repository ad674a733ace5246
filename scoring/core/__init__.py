"""The PRM core, Django-free: the model (`prm`), per-step scores (`step_scores`), model folders
(`model_files`), training rows (`training_data`), the training loop (`training/`) and held-out
evaluation (`evaluation`). It imports nothing of Django; torch and transformers load here.
"""
