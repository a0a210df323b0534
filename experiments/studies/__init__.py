"""One study script per GPU model: its hardware spec and workloads, then the study runner.

Run one where that GPU is (``python -m flashtune.experiments.studies.h100``); the H200
one also runs on a CPU machine by replaying the recorded H200 tables.
"""
