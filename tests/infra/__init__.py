"""Tests of the infrastructure the apps stand on: the web server, its limits, the front in deploy/."""
