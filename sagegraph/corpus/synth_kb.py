"""A synthetic STaRK-like knowledge base of films, people, studios and places, with questions whose
gold answers are exact (LLM-RETRIEVERS.md §6).

Why synthetic: STaRK's SKBs cannot be downloaded on machines without hub access, and their gold
sets can miss answers. Here every question is instantiated from a relational template over the
generated graph and its gold set is computed from the graph itself, so recall is measured against
the complete answer, and every question records its template, hops, target type, the entities it
names and a gold Cypher (for the oracle endpoint and per-stage scoring).

What the KB holds, to exercise what the four retrievers do differently:
- text-rich nodes (Movie: 100-300-word descriptions with numeric and date fields) beside atomic
  ones (Genre, Country, Award) and semi-rich ones (Person, Studio: short bios);
- aliases, near-duplicate names (Jon/John Miller, Harbor/Harbour) and shared names (two people
  called the same; remakes that reuse a title);
- typed directed relations, a contradictory pair (PRAISED / CRITICIZED) and hubs (the common
  genres and countries have degree >= 1,000 at the default size);
- motifs planted in descriptions, asked about either with the planted word or with a paraphrase
  that avoids it (separating BM25 from dense retrieval).

Everything is drawn from one seeded generator: the same seed and size give the same files.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sagegraph.corpus import synth_vocab as vocab
from sagegraph.corpus.questions import split_at
from sagegraph.runfiles import write_jsonl_whole, write_text_whole

FAMILIES = ("one_hop", "two_hop", "intersection", "three_hop", "filter", "textual", "descriptive")
SPLITS = (("train", 0.5), ("val", 0.2), ("test", 0.3))
MAX_ANSWERS = 40


@dataclass
class KB:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> {"id", "type", "fields"}
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (src, type, dst)
    out: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))  # (src, type) -> dst
    inc: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))  # (dst, type) -> src
    motifs: dict[str, list[int]] = field(default_factory=dict)  # movie id -> motif indices

    def add_node(self, nid: str, ntype: str, **fields: Any) -> str:
        self.nodes[nid] = {"id": nid, "type": ntype, "fields": fields}
        return nid

    def add_edge(self, src: str, rtype: str, dst: str) -> None:
        if dst in self.out[(src, rtype)]:
            return
        self.edges.append((src, rtype, dst))
        self.out[(src, rtype)].append(dst)
        self.inc[(dst, rtype)].append(src)

    def of_type(self, ntype: str) -> list[str]:
        return [n for n, v in self.nodes.items() if v["type"] == ntype]

    def name(self, nid: str) -> str:
        f = self.nodes[nid]["fields"]
        return f.get("title") or f["name"]


def cypher_string(s: str) -> str:
    """A Cypher string literal that survives quotes and backslashes in names (O'Brien)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def with_article(word: str) -> str:
    """'a lighthouse', 'an astronaut', 'time travel' (a phrase already reads as it is)."""
    if " " in word:
        return word
    return ("an " if word[0] in "aeiou" else "a ") + word


# ---- the graph ---------------------------------------------------------------------------------


def _sizes(size: int) -> dict[str, int]:
    return {
        "Genre": len(vocab.GENRES),
        "Country": len(vocab.COUNTRIES),
        "Studio": max(8, round(size * 0.03)),
        "Award": max(5, round(size * 0.01)),
        "Movie": max(20, round(size * 0.40)),
        "Person": max(30, size - len(vocab.GENRES) - len(vocab.COUNTRIES) - round(size * 0.44)),
    }


def _zipf_weights(n: int, s: float = 1.0) -> list[float]:
    return [1.0 / (i + 1) ** s for i in range(n)]


def generate_kb(size: int = 20_000, seed: int = 0) -> KB:
    rng = random.Random(seed)
    n = _sizes(size)
    kb = KB()
    genres = [kb.add_node(f"genre:{i}", "Genre", name=g.replace("-", " ")) for i, g in enumerate(vocab.GENRES)]
    countries = [kb.add_node(f"country:{i}", "Country", name=c) for i, c in enumerate(vocab.COUNTRIES)]
    genre_w, country_w = _zipf_weights(len(genres), 1.1), _zipf_weights(len(countries), 0.9)

    studios = []
    for i in range(n["Studio"]):
        name = f"{rng.choice(vocab.STUDIO_WORDS)} {rng.choice(vocab.STUDIO_SUFFIXES)}"
        founded = rng.randint(1920, 2015)
        sid = kb.add_node(
            f"studio:{i}",
            "Studio",
            name=name,
            founded=founded,
            description=f"{name} is a film production company founded in {founded}.",
        )
        kb.add_edge(sid, "BASED_IN", rng.choices(countries, country_w)[0])
        studios.append(sid)
    studio_w = _zipf_weights(len(studios), 0.6)
    rng.shuffle(studio_w)

    awards = []
    for i in range(n["Award"]):
        festival, prize = (
            vocab.FESTIVALS[i % len(vocab.FESTIVALS)],
            vocab.PRIZES[(i // len(vocab.FESTIVALS)) % len(vocab.PRIZES)],
        )
        edition = i // (len(vocab.FESTIVALS) * len(vocab.PRIZES))
        awards.append(
            kb.add_node(f"award:{i}", "Award", name=f"{festival} {prize}" + (f" ({edition + 1})" if edition else ""))
        )

    people = []
    for i in range(n["Person"]):
        first, last = rng.choice(vocab.FIRST_NAMES), rng.choice(vocab.LAST_NAMES)
        name = f"{first} {last}"
        aliases = [f"{first[0]}. {last}"]
        if rng.random() < 0.1:
            aliases.append(f"{first} {rng.choice(vocab.LAST_NAMES)}")  # a stage name
        born = rng.randint(1925, 2000)
        country = rng.choices(countries, country_w)[0]
        prof = rng.choice(vocab.PROFESSIONS)
        pid = kb.add_node(
            f"person:{i}",
            "Person",
            name=name,
            aliases=aliases,
            birth_year=born,
            description=f"{name} is a {prof} from {kb.name(country)}, born in {born}.",
        )
        kb.add_edge(pid, "BORN_IN", country)
        people.append(pid)
    # Roles: directors and writers are small pools, actors a large one; some people do several.
    shuffled = people[:]
    rng.shuffle(shuffled)
    n_dir = max(5, len(people) // 7)
    directors = shuffled[:n_dir]
    writers = shuffled[n_dir // 2 : n_dir // 2 + n_dir]
    actors = shuffled[int(n_dir * 0.7) :]
    critics = shuffled[-max(5, len(people) // 20) :]

    titles_used: list[str] = []
    movies: list[Any] = []
    for i in range(n["Movie"]):
        if titles_used and rng.random() < 0.03:
            title = rng.choice(titles_used)  # a remake: same title, another film
        else:
            noun = rng.choice(vocab.TITLE_NOUNS)
            title = rng.choice(
                [
                    f"The {rng.choice(vocab.TITLE_ADJECTIVES)} {noun}",
                    f"{rng.choice(vocab.TITLE_ADJECTIVES)} {noun}",
                    f"{noun} of the {rng.choice(vocab.TITLE_NOUNS)}",
                ]
            )
        titles_used.append(title)
        year = rng.randint(1950, 2023)
        date = f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        runtime = rng.randint(72, 185)
        rating = round(rng.uniform(3.0, 9.5), 1)
        budget = round(rng.lognormvariate(2.3, 1.0), 1)
        mid = f"movie:{i}"
        g = list(dict.fromkeys(rng.choices(genres, genre_w, k=2)))
        director = rng.choice(directors)
        cast = rng.sample(actors, k=min(len(actors), rng.randint(3, 9)))
        writer = rng.choice(writers)
        studio = rng.choices(studios, studio_w)[0]
        filmed = list(dict.fromkeys(rng.choices(countries, country_w, k=rng.choice([1, 1, 1, 2]))))
        motif_idx = rng.sample(range(len(vocab.MOTIFS)), 3)
        kb.motifs[mid] = motif_idx
        kb.add_node(
            mid,
            "Movie",
            title=title,
            year=year,
            release_date=date,
            runtime_minutes=runtime,
            rating=rating,
            budget_musd=budget,
            description=_description(rng, kb, title, year, g, director, studio, motif_idx, runtime),
        )
        kb.add_edge(director, "DIRECTED", mid)
        kb.add_edge(writer, "WROTE", mid)
        for a in cast:
            kb.add_edge(a, "ACTED_IN", mid)
        for gg in g:
            kb.add_edge(mid, "HAS_GENRE", gg)
        kb.add_edge(mid, "PRODUCED_BY", studio)
        for c in filmed:
            kb.add_edge(mid, "FILMED_IN", c)
        if rng.random() < 0.12:
            kb.add_edge(mid, "WON", rng.choice(awards))
        if rng.random() < 0.5:
            kb.add_edge(rng.choice(critics), "PRAISED", mid)
        if rng.random() < 0.4:
            kb.add_edge(rng.choice(critics), "CRITICIZED", mid)
        if movies and rng.random() < 0.04:
            kb.add_edge(mid, "SEQUEL_OF", rng.choice(movies))
        movies.append(mid)
    return kb


def _description(
    rng: random.Random,
    kb: KB,
    title: str,
    year: int,
    genres: list[str],
    director: str,
    studio: str,
    motif_idx: list[int],
    runtime: int,
) -> str:
    genre = " and ".join(kb.name(g).lower() for g in genres)
    parts = [f"{title} is a {year} {genre} film directed by {kb.name(director)} and produced by {kb.name(studio)}."]
    for m in motif_idx:
        word = vocab.MOTIFS[m][0]
        parts.append(rng.choice(vocab.PLOT_TEMPLATES).format(role=rng.choice(vocab.ROLES), motif=with_article(word)))
    parts.append(f"It runs {runtime} minutes.")
    filler = rng.sample(vocab.FILLER, len(vocab.FILLER))
    words = sum(len(p.split()) for p in parts)
    target = rng.randint(100, 300)
    for f in filler:
        if words >= target:
            break
        parts.insert(rng.randint(1, len(parts)), f)
        words += len(f.split())
    while words < 100:  # short fillers exhausted: repeat the plot in other words
        extra = f"Its story keeps {rng.choice(vocab.ROLES)} at the centre throughout."
        parts.append(extra)
        words += len(extra.split())
    return " ".join(parts)


# ---- questions -----------------------------------------------------------------------------------


@dataclass
class Q:
    family: str
    template: str
    hops: int
    target_type: str
    question: str
    answers: list[str]
    topic: list[str]
    cypher: str
    paraphrase: bool = False


def _unique_named(kb: KB, ids: list[str]) -> list[str]:
    """Anchors whose name no other node of their type shares: a question naming them is unambiguous."""
    count: dict[tuple[str, str], int] = defaultdict(int)
    for nid in kb.nodes:
        count[(kb.nodes[nid]["type"], kb.name(nid))] += 1
    return [i for i in ids if count[(kb.nodes[i]["type"], kb.name(i))] == 1]


def _film_ref(kb: KB, mid: str) -> str:
    return f"{kb.name(mid)} ({kb.nodes[mid]['fields']['year']})"


def _film_match(var: str, kb: KB, mid: str) -> str:
    return f"({var}:Movie {{title: {cypher_string(kb.name(mid))}, year: {kb.nodes[mid]['fields']['year']}}})"


def _people_by_role(kb: KB, rtype: str) -> list[str]:
    return sorted({s for (s, t), v in kb.out.items() if t == rtype and v})


def question_makers(kb: KB) -> dict[str, list[Callable[[random.Random], Q | None]]]:
    directors = _unique_named(kb, _people_by_role(kb, "DIRECTED"))
    actors = _unique_named(kb, _people_by_role(kb, "ACTED_IN"))
    actor_set = set(actors)
    movies = kb.of_type("Movie")
    studios = _unique_named(kb, kb.of_type("Studio"))
    genres = kb.of_type("Genre")
    S = cypher_string

    def directed(p):
        return kb.out[(p, "DIRECTED")]

    def one_hop_directed(rng):
        p = rng.choice(directors)
        return Q(
            "one_hop",
            "movies_directed_by",
            1,
            "Movie",
            f"Which films were directed by {kb.name(p)}?",
            directed(p),
            [p],
            f"MATCH (p:Person {{name: {S(kb.name(p))}}})-[:DIRECTED]->(m:Movie) RETURN DISTINCT m.id AS id",
        )

    def one_hop_director_of(rng):
        m = rng.choice(movies)
        return Q(
            "one_hop",
            "director_of_movie",
            1,
            "Person",
            f"Who directed the film {_film_ref(kb, m)}?",
            kb.inc[(m, "DIRECTED")],
            [m],
            f"MATCH (p:Person)-[:DIRECTED]->{_film_match('m', kb, m)} RETURN DISTINCT p.id AS id",
        )

    def one_hop_starring(rng):
        p = rng.choice(actors)
        return Q(
            "one_hop",
            "movies_starring",
            1,
            "Movie",
            f"In which films did {kb.name(p)} act?",
            kb.out[(p, "ACTED_IN")],
            [p],
            f"MATCH (p:Person {{name: {S(kb.name(p))}}})-[:ACTED_IN]->(m:Movie) RETURN DISTINCT m.id AS id",
        )

    def two_hop_cast_of_director(rng):
        p = rng.choice(directors)
        ans = sorted({a for m in directed(p) for a in kb.inc[(m, "ACTED_IN")]})
        return Q(
            "two_hop",
            "actors_in_movies_directed_by",
            2,
            "Person",
            f"Which actors have appeared in films directed by {kb.name(p)}?",
            ans,
            [p],
            f"MATCH (d:Person {{name: {S(kb.name(p))}}})-[:DIRECTED]->(:Movie)<-[:ACTED_IN]-(a:Person) RETURN "
            "DISTINCT a.id AS id",
        )

    def two_hop_same_studio(rng):
        m = rng.choice(movies)
        s = kb.out[(m, "PRODUCED_BY")][0]
        ans = [x for x in kb.inc[(s, "PRODUCED_BY")] if x != m]
        return Q(
            "two_hop",
            "movies_same_studio_as",
            2,
            "Movie",
            f"Which other films were made by the studio that produced {_film_ref(kb, m)}?",
            ans,
            [m],
            f"MATCH {_film_match('m0', kb, m)}-[:PRODUCED_BY]->(:Studio)<-[:PRODUCED_BY]-(m:Movie) WHERE m <> "
            "m0 RETURN DISTINCT m.id AS id",
        )

    def intersection_director_studio(rng):
        p = rng.choice(directors)
        mine = directed(p)
        s = kb.out[(rng.choice(mine), "PRODUCED_BY")][0] if mine else None
        if s is None or s not in studios:
            return None
        ans = [m for m in mine if s in kb.out[(m, "PRODUCED_BY")]]
        return Q(
            "intersection",
            "movies_by_director_and_studio",
            2,
            "Movie",
            f"Which films did {kb.name(p)} direct for {kb.name(s)}?",
            ans,
            [p, s],
            f"MATCH (p:Person {{name: {S(kb.name(p))}}})-[:DIRECTED]->(m:Movie)-[:PRODUCED_BY]->(s:Studio "
            f"{{name: {S(kb.name(s))}}}) RETURN DISTINCT m.id AS id",
        )

    def intersection_two_actors(rng):
        m = rng.choice(movies)
        cast = [a for a in kb.inc[(m, "ACTED_IN")] if a in actor_set]
        if len(cast) < 2:
            return None
        a, b = rng.sample(cast, 2)
        ans = sorted(set(kb.out[(a, "ACTED_IN")]) & set(kb.out[(b, "ACTED_IN")]))
        return Q(
            "intersection",
            "movies_with_two_actors",
            2,
            "Movie",
            f"Which films feature both {kb.name(a)} and {kb.name(b)}?",
            ans,
            [a, b],
            f"MATCH (a:Person {{name: {S(kb.name(a))}}})-[:ACTED_IN]->(m:Movie)<-[:ACTED_IN]-(b:Person "
            f"{{name: {S(kb.name(b))}}}) RETURN DISTINCT m.id AS id",
        )

    def three_hop(rng):
        s = rng.choice(studios)
        ans = sorted(
            {m2 for m in kb.inc[(s, "PRODUCED_BY")] for a in kb.inc[(m, "ACTED_IN")] for m2 in kb.out[(a, "DIRECTED")]}
        )
        return Q(
            "three_hop",
            "movies_directed_by_actors_of_studio",
            3,
            "Movie",
            f"Which films were directed by people who acted in a film produced by {kb.name(s)}?",
            ans,
            [s],
            f"MATCH (s:Studio {{name: {S(kb.name(s))}}})<-[:PRODUCED_BY]-(:Movie)<-[:ACTED_IN]-(p:Person)"
            "-[:DIRECTED]->(m:Movie) RETURN DISTINCT m.id AS id",
        )

    def three_hop_cast_of_same_director(rng):
        m0 = rng.choice(movies)
        ds = kb.inc[(m0, "DIRECTED")]
        ans = sorted({a for d in ds for m in directed(d) for a in kb.inc[(m, "ACTED_IN")]})
        return Q(
            "three_hop",
            "actors_in_movies_by_director_of",
            3,
            "Person",
            f"Which actors have worked with the director of {_film_ref(kb, m0)}?",
            ans,
            [m0],
            f"MATCH {_film_match('m0', kb, m0)}<-[:DIRECTED]-(:Person)-[:DIRECTED]->(:Movie)<-[:ACTED_IN]-(a:Person) "
            "RETURN DISTINCT a.id AS id",
        )

    def filter_year(rng):
        p = rng.choice(actors)
        mine = kb.out[(p, "ACTED_IN")]
        if len(mine) < 3:
            return None
        years = sorted(kb.nodes[m]["fields"]["year"] for m in mine)
        cut = years[len(years) // 2]
        ans = [m for m in mine if kb.nodes[m]["fields"]["year"] > cut]
        return Q(
            "filter",
            "movies_starring_after_year",
            1,
            "Movie",
            f"Which films starring {kb.name(p)} came out after {cut}?",
            ans,
            [p],
            f"MATCH (p:Person {{name: {S(kb.name(p))}}})-[:ACTED_IN]->(m:Movie) WHERE m.year > {cut} RETURN "
            "DISTINCT m.id AS id",
        )

    def filter_runtime(rng):
        s, g = rng.choice(studios), rng.choice(genres[:8])
        mine = [m for m in kb.inc[(s, "PRODUCED_BY")] if g in kb.out[(m, "HAS_GENRE")]]
        ans = [m for m in mine if kb.nodes[m]["fields"]["runtime_minutes"] > 120]
        return Q(
            "filter",
            "genre_movies_of_studio_longer_than",
            2,
            "Movie",
            f"Which {kb.name(g).lower()} films produced by {kb.name(s)} run longer than two hours?",
            ans,
            [s, g],
            f"MATCH (g:Genre {{name: {S(kb.name(g))}}})<-[:HAS_GENRE]-(m:Movie)-[:PRODUCED_BY]->(s:Studio "
            f"{{name: {S(kb.name(s))}}}) "
            "WHERE m.runtime_minutes > 120 RETURN DISTINCT m.id AS id",
        )

    def filter_date(rng):
        p = rng.choice(directors)
        mine = directed(p)
        if len(mine) < 2:
            return None
        cut = sorted(kb.nodes[m]["fields"]["release_date"] for m in mine)[len(mine) // 2]
        ans = [m for m in mine if kb.nodes[m]["fields"]["release_date"] < cut]
        return Q(
            "filter",
            "movies_directed_released_before",
            1,
            "Movie",
            f"Which films by director {kb.name(p)} were released before {cut}?",
            ans,
            [p],
            f"MATCH (p:Person {{name: {S(kb.name(p))}}})-[:DIRECTED]->(m:Movie) WHERE m.release_date < {S(cut)} "
            "RETURN DISTINCT m.id AS id",
        )

    def textual(rng, paraphrase: bool, role: str):
        pool = directors if role == "DIRECTED" else actors
        p = rng.choice(pool)
        mine = kb.out[(p, role)]
        if len(mine) < 2:
            return None
        motif = rng.choice(kb.motifs[rng.choice(mine)])
        word, para = vocab.MOTIFS[motif]
        ans = [m for m in mine if motif in kb.motifs[m]]
        verb = "directed by" if role == "DIRECTED" else "starring"
        ask = para if paraphrase else with_article(word)
        return Q(
            "textual",
            f"movies_{'directed_by' if role == 'DIRECTED' else 'starring'}_about{'_paraphrased' if paraphrase else ''}",
            1,
            "Movie",
            f"Which films {verb} {kb.name(p)} involve {ask}?",
            ans,
            [p],
            f"MATCH (p:Person {{name: {S(kb.name(p))}}})-[:{role}]->(m:Movie) WHERE toLower(m.description) "
            f"CONTAINS {S(word)} RETURN DISTINCT m.id AS id",
            paraphrase=paraphrase,
        )

    def descriptive(rng, paraphrase: bool):
        m = rng.choice(movies)
        idx = kb.motifs[m]
        ans = [x for x in movies if set(idx) <= set(kb.motifs[x])]
        words = [vocab.MOTIFS[i][1] if paraphrase else vocab.MOTIFS[i][0] for i in idx]
        conds = " AND ".join(f"toLower(m.description) CONTAINS {S(vocab.MOTIFS[i][0])}" for i in idx)
        return Q(
            "descriptive",
            "movie_about_three_motifs" + ("_paraphrased" if paraphrase else ""),
            0,
            "Movie",
            f"Which film brings together {words[0]}, {words[1]} and {words[2]}?",
            ans,
            [],
            f"MATCH (m:Movie) WHERE {conds} RETURN DISTINCT m.id AS id",
            paraphrase=paraphrase,
        )

    return {
        "one_hop": [one_hop_directed, one_hop_director_of, one_hop_starring],
        "two_hop": [two_hop_cast_of_director, two_hop_same_studio],
        "intersection": [intersection_director_studio, intersection_two_actors],
        "three_hop": [three_hop, three_hop_cast_of_same_director],
        "filter": [filter_year, filter_runtime, filter_date],
        "textual": [
            lambda r: textual(r, False, "DIRECTED"),
            lambda r: textual(r, True, "DIRECTED"),
            lambda r: textual(r, False, "ACTED_IN"),
            lambda r: textual(r, True, "ACTED_IN"),
        ],
        "descriptive": [lambda r: descriptive(r, False), lambda r: descriptive(r, True)],
    }


def generate_questions(kb: KB, per_family: int, seed: int = 0) -> list[Q]:
    rng = random.Random(seed + 1)
    makers = question_makers(kb)
    out: list[Q] = []
    seen: set[str] = set()
    for family in FAMILIES:
        got, tries = 0, 0
        while got < per_family and tries < per_family * 50:
            tries += 1
            q = rng.choice(makers[family])(rng)
            if q is None or not 1 <= len(q.answers) <= MAX_ANSWERS or q.question in seen:
                continue
            seen.add(q.question)
            out.append(q)
            got += 1
    return out


def split_of(i: int, rng: random.Random) -> str:
    return split_at(rng.random(), SPLITS)


def write_synth_kb(out: Path, size: int = 20_000, seed: int = 0, per_family: int | None = None) -> dict[str, Any]:
    """nodes.jsonl, edges.jsonl, questions.jsonl (every split, `split` field) and one file per
    split, hints.yaml (SPARK's per-KB hints) and synth.json (what was generated and how)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kb = generate_kb(size, seed)
    per_family = per_family or max(20, min(250, size // 80))  # 250 at the default size: ~75 test questions per family
    qs = generate_questions(kb, per_family, seed)
    # each file whole: a killed generator leaves the old file or the new one, never half of one
    # (synth.json, the generation's summary, is written last)
    write_jsonl_whole(out / "nodes.jsonl", kb.nodes.values())
    write_jsonl_whole(out / "edges.jsonl", ({"src": s, "dst": d, "type": t} for s, t, d in kb.edges))
    rng = random.Random(seed + 2)
    rows = []
    for i, q in enumerate(qs):
        rows.append(
            {
                "id": f"q{i:05d}",
                "question": q.question,
                "answer_ids": q.answers,
                "split": split_of(i, rng),
                "family": q.family,
                "template": q.template,
                "hops": q.hops,
                "target_type": q.target_type,
                "paraphrase": q.paraphrase,
                "topic_entities": [{"id": t, "name": kb.name(t), "type": kb.nodes[t]["type"]} for t in q.topic],
                "gold_cypher": q.cypher,
            }
        )
    files = {"all": out / "questions.jsonl"}
    write_jsonl_whole(files["all"], rows)
    for split, _ in SPLITS:
        files[split] = out / f"questions-{split}.jsonl"
        write_jsonl_whole(files[split], (r for r in rows if r["split"] == split))
    write_text_whole(
        out / "hints.yaml",
        "# Hints for the synthetic film KB, shown to planners beside the store's own schema.\n"
        + yaml.safe_dump(HINTS, sort_keys=False, width=200),
    )
    degree: dict[str, int] = defaultdict(int)
    for s, _, d in kb.edges:
        degree[s] += 1
        degree[d] += 1
    summary = {
        "seed": seed,
        "size": size,
        "nodes": len(kb.nodes),
        "edges": len(kb.edges),
        "nodes_by_type": {
            t: sum(1 for v in kb.nodes.values() if v["type"] == t)
            for t in sorted({v["type"] for v in kb.nodes.values()})
        },
        "edges_by_type": {t: sum(1 for e in kb.edges if e[1] == t) for t in sorted({e[1] for e in kb.edges})},
        "hubs_degree_ge_1000": sum(1 for v in degree.values() if v >= 1000),
        "questions": len(rows),
        "questions_by_split": {s: sum(1 for r in rows if r["split"] == s) for s, _ in SPLITS},
        "test_questions_by_family": {
            f: sum(1 for r in rows if r["split"] == "test" and r["family"] == f) for f in FAMILIES
        },
    }
    write_text_whole(out / "synth.json", json.dumps(summary, indent=1))
    return summary


# Per-KB hints for SPARK's schema card (sage.txt App. H: property formats and a few examples).
HINTS = {
    "properties": {
        "Movie.title": "the film's title; titles repeat across remakes, so add `year` to pin one film",
        "Movie.year": "integer release year",
        "Movie.release_date": "ISO date text 'YYYY-MM-DD'; compare it with strings ('2001-05-01')",
        "Movie.runtime_minutes": "integer minutes",
        "Movie.rating": "float 0-10",
        "Movie.description": "100-300 words of plot text; match themes with toLower(m.description) CONTAINS 'word'",
        "Person.name": "full name; Person.aliases lists other spellings",
    },
    "examples": [
        {
            "question": "Which films were directed by Ana Silva?",
            "cypher": "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN DISTINCT m.id AS id",
        },
        {
            "question": "Which drama films produced by Northlight Pictures came out after 1990?",
            "cypher": "MATCH (g:Genre {name: 'Drama'})<-[:HAS_GENRE]-(m:Movie)"
            "-[:PRODUCED_BY]->(s:Studio {name: 'Northlight Pictures'}) WHERE m.year > 1990 RETURN DISTINCT m.id AS id",
        },
        {
            "question": "Which films starring Kenji Tanaka involve a shipwreck?",
            "cypher": "MATCH (p:Person {name: 'Kenji Tanaka'})-[:ACTED_IN]->(m:Movie) "
            "WHERE toLower(m.description) CONTAINS 'shipwreck' RETURN DISTINCT m.id AS id",
        },
    ],
}
