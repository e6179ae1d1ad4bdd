"""The loopback endpoint lives in the library (benchmarks and the oracle use it too)."""

from sagegraph.loopback import FakeOpenAI, Responder, completion

__all__ = ["FakeOpenAI", "Responder", "completion"]
