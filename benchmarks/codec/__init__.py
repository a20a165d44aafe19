"""Seed 004's FIX codec comparison with a Python row: ``python -m benchmarks.codec`` (see __main__)."""
