"""Imported by `warm_probe.py --phase leave`: a user module that must not reach the next job."""
