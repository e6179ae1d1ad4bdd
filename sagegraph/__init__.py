"""sagegraph: structure-aware graph retrieval over text, tables and knowledge graphs.

The library is orchestration-free: every algorithm is a plain function; `tasks/` and `flows/`
wrap them for Prefect.
"""

__version__ = "0.1.0"
