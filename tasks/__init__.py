"""Thin Prefect tasks: each wraps one plain library function and passes paths, not big objects."""
