"""A loopback OpenAI-compatible endpoint on 127.0.0.1: a responder function answers each chat
request. Tests replay recorded replies through the real `openai` client (HTTP, retries, usage)
without the network; benchmarks answer after a fixed delay; the oracle answers from gold labels
(for ceilings only, never for reported quality)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (status, body) or (status, body, headers); a str or bytes body is sent as it is (an HTML error
# page from a proxy), a dict as JSON.
Responder = Callable[[dict], tuple]


def completion(
    content: str, prompt_tokens: int = 100, completion_tokens: int = 50, tool_calls: list[dict] | None = None
) -> dict:
    message: dict = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": c.get("id", f"call_{i}"),
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class FakeOpenAI:
    """`with FakeOpenAI(responder) as server:` then point a client at `server.base_url`."""

    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                status, payload, *extra = outer.responder(body)
                headers = {"retry-after": "0"} if status == 429 else {}
                headers.update(extra[0] if extra else {})
                raw = isinstance(payload, (str, bytes))
                data = (
                    payload.encode() if isinstance(payload, str) else payload if raw else json.dumps(payload).encode()
                )
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if raw else "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def delayed(responder: Responder, seconds: float) -> Responder:
    """Answer after a fixed delay: a stand-in for a real endpoint's latency in throughput benchmarks."""
    import time

    def answer(body: dict) -> tuple[int, dict]:
        time.sleep(seconds)
        return responder(body)

    return answer
