"""The end-to-end half of tests/unit/test_llm_platform.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import threading
import time

from sagegraph.config import LLMConfig
from sagegraph.llm import LLMClient
from tests.fake_openai import FakeOpenAI, completion


def test_the_same_request_in_flight_twice_is_paid_once(tmp_path):
    def slow(body):
        time.sleep(0.3)
        return 200, completion("the one reply")

    with FakeOpenAI(slow) as server:
        cfg = LLMConfig(base_url=server.base_url, model="m", concurrency=8)
        clients = [LLMClient(cfg, tmp_path / "llm.sqlite") for _ in range(4)]  # as in separate workers
        replies = []
        threads = [
            threading.Thread(target=lambda c=c: replies.append(c.chat([{"role": "user", "content": "same"}])))
            for c in clients
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(server.requests) == 1 and {r.text for r in replies} == {"the one reply"}
    assert sum(not r.cached for r in replies) == 1
