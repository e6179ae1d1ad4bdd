"""`sagegraph data fetch ottqa` against a loopback HTTP server laid out like the OTT-QA repository."""

import json
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sagegraph.cli import main
from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.ottqa import load_ottqa, load_questions


@pytest.fixture()
def mirror(ottqa_dir, tmp_path):
    root = tmp_path / "mirror"
    (root / "released_data").mkdir(parents=True)
    (root / "data" / "traindev_tables_tok").mkdir(parents=True)
    (root / "data" / "traindev_request_tok").mkdir(parents=True)
    questions = [json.loads(line) for line in (ottqa_dir / "questions.jsonl").open()]
    (root / "released_data" / "dev.json").write_text(json.dumps(questions))
    passages = {json.loads(line)["id"]: json.loads(line)["text"] for line in (ottqa_dir / "passages.jsonl").open()}
    for line in (ottqa_dir / "tables.jsonl").open():
        t = json.loads(line)
        (root / "data" / "traindev_tables_tok" / f"{t['uid']}.json").write_text(json.dumps(t))
        linked = {c[1][0]: passages[c[1][0]] for row in t["data"] for c in row if c[1]}
        (root / "data" / "traindev_request_tok" / f"{t['uid']}.json").write_text(json.dumps(linked))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_fetch_writes_the_same_three_files(mirror, ottqa_dir, tmp_path, capsys):
    dest = tmp_path / "fetched"
    assert main(["data", "fetch", "ottqa", str(dest), "--base-url", mirror]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["questions.jsonl"] == 12 and out["tables.jsonl"] == 4
    tables, docs = load_ottqa(dest, ErrorPolicy())
    ref_tables, _ = load_ottqa(ottqa_dir, ErrorPolicy())
    assert [t.id for t in tables] == [t.id for t in ref_tables] and tables[0].rows == ref_tables[0].rows
    gold = {p for q in load_questions(dest / "questions.jsonl") for p in q.gold_sources[1:]}
    assert gold <= {d.id for d in docs}


def test_fetch_reports_a_missing_file(mirror, tmp_path, capsys):
    assert main(["data", "fetch", "ottqa", str(tmp_path / "x"), "--base-url", mirror + "/nothing-here"]) == 2
    assert "not found" in capsys.readouterr().err
