"""The step core, Django-free: everything about a solution's text and its step arithmetic.

Splitting into steps, the one scanner of math and code spans that splitting and rendering share,
rendering to safe HTML, answer extraction, normalizing and grading answers, and the first-error
and aggregation rules. It imports nothing of Django or of the rest of Stepwise.
"""
