"""Questions a KB draws for itself (`sagegraph adapt`): every drawn answer set is the one its
chain reaches in the KB, names are unambiguous and masked for the encoder, the right chain is never
among the wrong ones, and nothing of a question file is read on the way."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from sagegraph.retrieve.graphraft.retriever import PROMPT_VERSION
from sagegraph.retrieve.kb.adapt import (
    SampleSettings,
    chain_frames,
    distinct_vocabulary,
    name_collisions,
    sample_questions,
    words,
)
from sagegraph.retrieve.kb.view import kb_view
from tests.kb_mini import build_mini, family_records, mini_records


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return build_mini(tmp_path_factory.mktemp("adaptkb") / "graph", family_records())


@pytest.fixture(scope="module")
def films(tmp_path_factory):
    return build_mini(tmp_path_factory.mktemp("adaptfilms") / "graph", mini_records())


def _walk(view, start: int, relations: list[str]) -> set[int]:
    """The nodes a relation chain reaches, both directions of each relation, start left out: the
    answers computed a second way, from the edge list."""
    here = {start}
    for rel in relations:
        src, dst = view.edges(rel)
        nxt = {int(d) for s, d in zip(src.tolist(), dst.tolist()) if s in here}
        nxt |= {int(s) for s, d in zip(src.tolist(), dst.tolist()) if d in here}
        here = nxt - {start}
    return here


@pytest.mark.parametrize("kb", ["family", "films"])
def test_each_drawn_question_is_answered_by_its_own_chain_and_only_the_wrong_ones_are_negatives(kb, request):
    g = request.getfixturevalue(kb)
    view = kb_view(g)
    drawn = sample_questions(view, SampleSettings(questions=40, conjunction_share=0.25, seed=1))
    assert drawn and len({q.id for q in drawn}) == len(drawn)
    assert name_collisions(view, drawn) == 0
    for q in drawn:
        rows = [g.row[i] for i in q.topic_ids]
        answers = {g.row[i] for i in q.answer_ids}
        assert 0 < len(answers) <= 20
        if q.kind == "chain":
            # each hop's type is part of the chain, so its answers are among what the relations reach
            assert answers <= _walk(view, rows[0], q.relations), q
        else:
            first, second = (_walk(view, r, [rel]) for r, rel in zip(rows, q.relations))
            assert answers <= first & second, q
        assert q.phrase not in q.negatives
        label = q.label()
        assert all(name.lower() not in label["masked"].lower() for name in q.names)
        assert label["kept"] and label["phrase"] == q.phrase
        record = q.record()
        assert record["answer_ids"] == q.answer_ids and record["split"] == "adapt"


def test_the_draw_is_the_same_for_the_same_seed_and_differs_for_another(films):
    view = kb_view(films)
    a = sample_questions(view, SampleSettings(questions=10, seed=3))
    b = sample_questions(view, SampleSettings(questions=10, seed=3))
    c = sample_questions(view, SampleSettings(questions=10, seed=4))
    assert [q.label() for q in a] == [q.label() for q in b]
    assert [q.label() for q in a] != [q.label() for q in c]


def test_words_for_one_relation_rephrase_only_the_questions_that_walk_it(family):
    """The draw (starts, chains, answers) does not depend on the relations' words, and a question
    that walks no relation whose words changed reads as before: two vocabularies are compared on
    the same questions, not on two samples of the KB."""
    view = kb_view(family)
    settings = SampleSettings(questions=40, seed=3)
    plain = sample_questions(view, settings)
    relation = plain[0].relations[0]
    worded = sample_questions(view, settings, {relation: ["first word", "second word", "third word"]})
    assert [(q.topic_ids, q.relations, q.answer_ids) for q in plain] == [
        (q.topic_ids, q.relations, q.answer_ids) for q in worded
    ]
    untouched = [(a.text, b.text) for a, b in zip(plain, worded) if relation not in a.relations]
    assert untouched and all(before == after for before, after in untouched)
    assert any(a.text != b.text for a, b in zip(plain, worded) if relation in a.relations)


def test_frames_say_the_chain_read_back_from_its_end_with_only_the_kbs_own_words():
    assert words("Born_In") == "born in" and words("people.person.spouse") == "people person spouse"
    frames = chain_frames("Ada", ["child of", "born in"], "town")
    assert "what is the born in of the child of of Ada?" in frames
    assert "what is Ada's child of's born in?" in frames
    assert "which town is the born in of the child of of Ada?" in frames


def test_adapting_a_graph_reads_no_question_file_and_writes_its_draw_beside_the_graph(family, tmp_path, monkeypatch):
    """The draw is made and the encoder's training labels come from the KB alone: a question file
    the build named is never opened (every file opened is watched), and training is handed only
    the drawn labels."""
    import sagegraph.retrieve.kb.adaptation as adaptation
    from sagegraph.retrieve.kb.adaptation import AdaptSettings, adapt_graph

    gold = tmp_path / "questions-with-gold.jsonl"
    gold.write_text(json.dumps({"id": "q1", "question": "x", "answer_ids": ["h1"]}) + "\n")
    manifest = family.dir / "manifest.json"
    record = json.loads(manifest.read_text()) if manifest.exists() else {}
    record.setdefault("config", {})["corpus"] = {"kind": "kb", "path": str(tmp_path), "questions": str(gold)}
    manifest.write_text(json.dumps(record))
    trained = {}

    def fake_train(labels, out, **kw):
        trained["labels"] = labels
        out.mkdir(parents=True)
        (out / "modules.json").write_text("[]")
        (out / "selector_training.json").write_text(json.dumps({"seconds": 0.0, **kw["note"]}))
        return {"seconds": 0.0}

    monkeypatch.setattr(adaptation, "train_selector_encoder", fake_train)
    opened: list[str] = []
    watching = [True]

    def audit(event, args):
        if watching[0] and event == "open" and args and isinstance(args[0], (str, bytes)):
            opened.append(str(args[0]))

    sys.addaudithook(audit)
    try:
        report = adapt_graph(family.dir, AdaptSettings())
    finally:
        watching[0] = False
    assert not [p for p in opened if "questions-with-gold" in p]
    assert report["questions"] == len(trained["labels"]) > 0 and report["llm_calls"] == 0
    assert all(x["label_by"] == "sampled" for x in trained["labels"])
    lines = (family.dir / "adapt" / "questions.jsonl").read_text().splitlines()
    assert len(lines) == report["questions"]
    # the same draw again keeps the encoder trained on it
    again = adapt_graph(family.dir, AdaptSettings())
    assert again["reused_encoder"] and again["draw"] == report["draw"]


def _fake_training(monkeypatch) -> list[int]:
    """Training replaced by a record of it (sentence-transformers is exercised elsewhere)."""
    import sagegraph.retrieve.kb.adaptation as adaptation

    runs: list[int] = []

    def fake_train(labels, out, **kw):
        runs.append(len(labels))
        out.mkdir(parents=True, exist_ok=True)  # the real one replaces a folder whole
        (out / "modules.json").write_text("[]")
        (out / "selector_training.json").write_text(json.dumps({"seconds": 0.0, **kw["note"]}))
        return {"seconds": 0.0}

    monkeypatch.setattr(adaptation, "train_selector_encoder", fake_train)
    return runs


def test_a_generation_whose_draw_another_generation_trained_on_takes_its_encoder(tmp_path, monkeypatch):
    """A rebuild the draw does not see (same KB questions) copies the sibling generation's encoder
    instead of training again; a different draw trains."""
    import shutil

    from sagegraph.retrieve.kb.adaptation import AdaptSettings, adapt_graph

    runs = _fake_training(monkeypatch)
    first = build_mini(tmp_path / "graphs" / "aaaa", family_records()).dir
    adapt_graph(first, AdaptSettings())
    second = tmp_path / "graphs" / "bbbb"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("adapt"))
    carried = adapt_graph(second, AdaptSettings())
    assert runs == [runs[0]] and carried["reused_encoder"]
    assert (second / "adapt" / "selector-encoder" / "modules.json").exists()
    other = adapt_graph(second, AdaptSettings(sample=SampleSettings(seed=1)))
    assert len(runs) == 2 and not other["reused_encoder"]


def test_a_killed_adaptation_leaves_the_folder_as_the_last_finished_one_wrote_it(tmp_path, monkeypatch):
    """Killed while training another draw, the folder still holds the questions and the report
    of the encoder in it, not the new draw's questions beside the old encoder."""
    import sagegraph.retrieve.kb.adaptation as adaptation
    from sagegraph.retrieve.kb.adaptation import AdaptSettings, adapt_graph

    _fake_training(monkeypatch)
    graph = build_mini(tmp_path / "graph", family_records()).dir
    first = adapt_graph(graph, AdaptSettings())
    folder = graph / "adapt"
    before = {name: (folder / name).read_text() for name in ("questions.jsonl", "adapt.json")}

    def killed(labels, out, **kw):
        raise KeyboardInterrupt  # as a kill lands mid-training: nothing after it runs

    monkeypatch.setattr(adaptation, "train_selector_encoder", killed)
    with pytest.raises(KeyboardInterrupt):
        adapt_graph(graph, AdaptSettings(sample=SampleSettings(seed=7)))
    assert {name: (folder / name).read_text() for name in before} == before
    record = json.loads((folder / "selector-encoder" / "selector_training.json").read_text())
    assert record["draw"] == first["draw"] == json.loads(before["adapt.json"])["draw"]


def test_a_second_adaptation_of_a_generation_stops_while_another_runs(tmp_path, monkeypatch):
    """Two `sagegraph adapt` on one generation would interleave one draw's questions with the
    other's encoder: the second stops with one line naming the first."""
    import fcntl
    import os

    from sagegraph.retrieve.kb.adaptation import AdaptSettings, adapt_graph
    from sagegraph.runlock import DirectoryLocked, lock_path

    runs = _fake_training(monkeypatch)
    graph = build_mini(tmp_path / "graph", family_records()).dir
    lock = lock_path(graph / "adapt")
    lock.write_text(json.dumps({"pid": os.getpid(), "command": "sagegraph adapt (the other one)"}))
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: as another process holds it
        with pytest.raises(DirectoryLocked, match="another adaptation is writing here"):
            adapt_graph(graph, AdaptSettings())
    finally:
        os.close(fd)
    assert runs == [] and not (graph / "adapt" / "questions.jsonl").exists()
    assert adapt_graph(graph, AdaptSettings())["questions"] > 0  # once it is done


def test_a_kb_build_adapts_what_it_publishes_when_its_config_asks(kb_dir, tmp_path, monkeypatch):
    """`adapt.enabled`: `sagegraph.build` adapts the published generation; a build that finds the
    graph up to date finds it adapted; a KB with nothing to draw is built and published anyway."""
    import sagegraph

    runs = _fake_training(monkeypatch)

    def config(name: str, kb: Path) -> Path:
        path = tmp_path / f"{name}.yaml"
        corpus = {"kind": "kb", "path": str(kb)}
        path.write_text(json.dumps({"name": name, "corpus": corpus, "adapt": {"enabled": True}}))
        return path

    report = sagegraph.build(config("papers", kb_dir), out=tmp_path / "out")
    generation = (tmp_path / "out" / "graph").resolve()
    assert report["adapt"]["questions"] > 0 and runs == [report["adapt"]["questions"]]
    assert (generation / "adapt" / "selector-encoder" / "modules.json").exists()
    again = sagegraph.build(config("papers", kb_dir), out=tmp_path / "out")
    assert again["up_to_date"] and again["adapt"]["already_adapted"] and len(runs) == 1
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "nodes.jsonl").write_text(json.dumps({"id": "x1", "type": "Thing", "fields": {"name": "Alone"}}) + "\n")
    (lone / "edges.jsonl").write_text("")
    skipped = sagegraph.build(config("lone", lone), out=tmp_path / "lone-out")
    assert "nothing to adapt to" in skipped["adapt"]["skipped"] and skipped["published"]["current"]


def test_a_kb_with_nothing_to_draw_says_so(tmp_path):
    from sagegraph.errors import ConfigError
    from sagegraph.model import Node
    from sagegraph.retrieve.kb.adaptation import AdaptSettings, adapt_graph

    nodes = [Node("na", "entity", "Thing", "name: A", "a", "A", 0, {"fields": {"name": "A"}})]
    g = build_mini(tmp_path / "graph", (nodes, []))
    with pytest.raises(ConfigError, match="nothing to adapt to"):
        adapt_graph(g.dir, AdaptSettings())
    assert np.asarray(g.ids).tolist() == ["na"]


def test_the_model_names_each_relation_in_words_once_and_a_reply_with_none_is_counted_not_kept(family, tmp_path):
    """One call per relation type (shown the types it links); its words are drawn among with the
    stored name in the frames; a reply with no usable word is not cached, its relation keeps its
    stored name, and a second run pays only for what was not kept."""
    from sagegraph.config import LLMConfig
    from sagegraph.llm import LLMClient
    from sagegraph.retrieve.kb.adaptation import relation_vocabulary
    from tests.fake_openai import FakeOpenAI, completion

    view = kb_view(family)

    def responder(body):
        asked = body["messages"][-1]["content"]
        if asked.startswith("Relation: member of"):
            return 200, completion(json.dumps({"words": ["member of", "", "x" * 60]}))  # its own name, empty, long
        if asked.startswith("Relation: child of"):
            return 200, completion(json.dumps({"words": ["offspring of", "Kid of", "kid of"]}))
        return 200, completion(json.dumps({"words": ["birthplace"]}))

    with FakeOpenAI(responder) as server:
        cfg = LLMConfig(base_url=server.base_url, model="test-model", max_retries=0, cache_dir=tmp_path / "cache")
        client = LLMClient(cfg, tmp_path / "cache" / "llm.sqlite")
        vocabulary, stats = relation_vocabulary(view, client)
        assert vocabulary == {"child_of": ["offspring of", "kid of"], "born_in": ["birthplace"]}
        assert stats["relations"] == 3 and stats["llm_calls"] == 3 and stats["unusable_replies"] == 1
        _, again = relation_vocabulary(view, client)
        assert again["llm_calls"] == 1 and again["cached_replies"] == 2
    drawn = sample_questions(view, SampleSettings(questions=6, conjunction_share=0.0, seed=2), vocabulary)
    said = " ".join(q.text for q in drawn)
    assert "offspring of" in said or "kid of" in said or "birthplace" in said
    assert all(q.phrase not in q.negatives for q in drawn)


def test_a_word_that_names_two_relations_teaches_neither():
    """A word given for two relations, or that is another relation's stored name, is dropped from
    every relation that was given it (and reported); the rest keep their order."""
    said = {
        "capital": ["city", "seat of government"],
        "time_zone": ["city", "clock"],
        "continent": ["country", "landmass"],
        "country": ["nation", "state"],
    }
    kept, dropped = distinct_vocabulary(said, ["capital", "time_zone", "continent", "country", "currency"])
    assert kept == {
        "capital": ["seat of government"],
        "time_zone": ["clock"],
        "continent": ["landmass"],
        "country": ["nation", "state"],
    }
    assert sorted(dropped) == ["capital: city", "continent: country", "time_zone: city"]
    kept, _ = distinct_vocabulary({"a": ["currency"]}, ["a", "currency"])  # a relation with no words still has a name
    assert kept == {"a": []}


def test_a_run_on_the_adapted_encoder_is_stamped_with_it_so_adapting_again_reruns_it(family):
    """`selector_encoder: adapted` is keyed by name (the encoder is not known before the graph is)
    and stamped into each run's inputs by its training record: a graph adapted again sets the
    old run aside; a graph without one reads with its own encoder."""
    from sagegraph.eval.runner import EvalConfig, inputs_stamp
    from sagegraph.retrieve.kb.chain_encoder import ADAPTED_DIR, adapted_inputs, keyed_prompt, tuned_encoder

    folder = family.dir / ADAPTED_DIR
    if folder.exists():  # another test's draw
        import shutil

        shutil.rmtree(folder)
    assert tuned_encoder(family, "adapted") is None
    assert adapted_inputs(family.dir, "adapted") == "adapted-none" and adapted_inputs(family.dir, None) == ""
    assert keyed_prompt("graphraft-5", "adapted") == "graphraft-5+adapted"
    cfg = EvalConfig("graphraft", 20, {"selector_encoder": "adapted"})
    assert cfg.canonical_params() == {}  # the default
    cls, params = cfg.retriever_class, cfg.validated()
    before = inputs_stamp(family, [], cls.graph_inputs(family, params))
    folder.mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    (folder / "selector_training.json").write_text('{"draw": "one"}')
    first = inputs_stamp(family, [], cls.graph_inputs(family, params))
    (folder / "selector_training.json").write_text('{"draw": "two"}')
    second = inputs_stamp(family, [], cls.graph_inputs(family, params))
    assert len({before, first, second}) == 3
    plain = EvalConfig("graphraft", 20, {"selector_encoder": None})  # the graph's own encoder reads nothing beside it
    assert plain.retriever_class.graph_inputs(family, plain.validated()) == ""
    paper = EvalConfig("graphraft", 20, {"selector": "grammar"})  # a model's selector reads no encoder
    assert paper.retriever_class.graph_inputs(family, paper.validated()) == ""
    assert paper.retriever_class.prompt_for(paper.validated()) == PROMPT_VERSION
    default = EvalConfig("graphraft", 20, {})  # GraphRAFT's default reads the adaptation
    assert default.retriever_class.graph_inputs(family, default.validated()) == cls.graph_inputs(family, params) != ""
    around = EvalConfig("sage", 10, {"seed_retriever": "graphraft", "k_prime": 10})  # SAGE reads what its seeds read
    assert around.retriever_class.graph_inputs(family, around.validated()) == cls.graph_inputs(family, params)
    assert inputs_stamp(family, []) == inputs_stamp(family, [], "")  # stamps made before stay valid


def test_two_encoders_read_together_score_the_mean_of_their_cosines():
    from sagegraph.retrieve.kb.chain_encoder import ReadTogether

    rng = np.random.default_rng(0)

    def unit(n):
        v = rng.normal(size=(n, 8))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    general, adapted = unit(3), unit(3)

    class Adapted:
        def vectors(self, texts):
            return adapted[[int(t) for t in texts]]

    both = ReadTogether(lambda texts: general[[int(t) for t in texts]], Adapted()).vectors(["0", "1", "2"])
    expected = (general @ general.T + adapted @ adapted.T) / 2
    assert np.allclose(both @ both.T, expected, atol=1e-6)
