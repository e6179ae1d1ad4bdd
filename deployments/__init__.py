"""Deployments: a scheduled graph rebuild and an on-demand sweep on a local process work pool."""
