"""A hand-made film KB graph whose answers are known (4 people, 6 films, a studio, one similarity
edge), written as a built graph with a hashing encoder: AF's and DGR's tests run on it with no
model."""

import hashlib
import re

import numpy as np
import pyarrow.parquet as pq

from sagegraph.model import Edge, Node, edges_to_table, nodes_to_table
from sagegraph.retrieve.graph_index import GraphIndex


class HashEncoder:
    """Bag of hashed words: texts sharing words are close; deterministic, instant."""

    name, dim = "hash", 64

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


PEOPLE = [
    ("p1", "Ana Silva", ["A. Silva"], 1960),
    ("p2", "Ana Silvas", [], 1970),
    ("p3", "Ben Cho", [], 1980),
    ("p4", "Cara Diaz", [], 1990),
]
MOVIES = [
    ("m1", "Harbour Lights", 1995, "1995-03-01"),
    ("m2", "Desert Song", 2003, "2003-07-01"),
    ("m3", "Night Train", 2010, "2010-01-01"),
    ("m4", "Paper Moon", 1999, "1999-12-31"),
    ("m5", "Red Orchard", 2015, "2015-05-05"),
    ("m6", "Blue Orchard", 2016, "2016-06-06"),
]
RELS = [
    ("p1", "DIRECTED", "m1"),
    ("p1", "DIRECTED", "m2"),
    ("p2", "DIRECTED", "m3"),
    ("p3", "ACTED_IN", "m1"),
    ("p3", "ACTED_IN", "m3"),
    ("p3", "ACTED_IN", "m4"),
    ("p4", "ACTED_IN", "m2"),
    ("m1", "PRODUCED_BY", "s1"),
    ("m4", "PRODUCED_BY", "s1"),
    ("p4", "DIRECTED", "m5"),
]


def mini_records():
    """The KB's nodes and edges, to write as a built graph or load into a store."""
    nodes = []
    for nid, name, aliases, born in PEOPLE:
        f = {"name": name, "aliases": aliases, "birth_year": born}
        nodes.append(Node(f"n{nid}", "entity", "Person", f"name: {name}", nid, name, 0, {"fields": f}))
    for nid, title, year, date in MOVIES:
        f = {
            "title": title,
            "year": year,
            "release_date": date,
            "description": f"{title} is a film about {'orchards' if 'Orchard' in title else 'trains and harbours'}.",
        }
        nodes.append(
            Node(
                f"n{nid}",
                "entity",
                "Movie",
                f"title: {title}\ndescription: {f['description']}",
                nid,
                title,
                0,
                {"fields": f},
            )
        )
    nodes.append(
        Node("ns1", "entity", "Studio", "name: Northlight", "s1", "Northlight", 0, {"fields": {"name": "Northlight"}})
    )
    edges = [Edge(f"n{a}", f"n{b}", r) for a, r, b in RELS] + [Edge("nm5", "nm6", "SIMILAR_DESCRIPTION", 0.9)]
    return nodes, edges


def build_mini(d, records=None):
    """Writes the graph (this KB, or the given (nodes, edges)) under `d` and opens it."""
    (d / "vectors").mkdir(parents=True)
    nodes, edges = records or mini_records()
    pq.write_table(nodes_to_table(nodes), d / "nodes.parquet")
    pq.write_table(edges_to_table(edges), d / "edges.parquet")
    enc = HashEncoder()
    np.save(d / "vectors" / "content.npy", enc.encode([n.text for n in nodes]))
    np.save(d / "vectors" / "title.npy", enc.encode([n.title for n in nodes]))
    return GraphIndex(d, encoder=enc)


# A second, unrelated KB (genealogy and places, lower-case relation names stored child -> parent,
# as PathQuestion stores them): prompts built on it must show its own names and types, never the
# film KB's.
FAMILY = [
    ("h1", "Håkon Ørsted", "Human"),
    ("h2", "Ingrid Ørsted", "Human"),
    ("h3", "Jonas Berg", "Human"),
    ("c1", "Tromsø", "Town"),
    ("c2", "Bergen", "Town"),
    ("r1", "The Fjord Guild", "Guild"),
]
FAMILY_RELS = [
    ("h2", "child_of", "h1"),
    ("h3", "child_of", "h1"),
    ("h1", "born_in", "c1"),
    ("h2", "born_in", "c2"),
    ("h3", "born_in", "c2"),
    ("h1", "member_of", "r1"),
]


def family_records():
    nodes = [
        Node(f"n{nid}", "entity", label, f"name: {name}", nid, name, 0, {"fields": {"name": name}})
        for nid, name, label in FAMILY
    ]
    return nodes, [Edge(f"n{a}", f"n{b}", r) for a, r, b in FAMILY_RELS]


def generations_records():
    """Three generations joined by one relation between nodes of one type, stored child ->
    parent: from the middle one, `child_of` walked its stored way reaches the parent, walked back
    the child, and a chain's phrase reads both alike."""
    people = [("g0", "Olav Lund"), ("g1", "Siri Lund"), ("g2", "Emil Lund")]
    nodes = [
        Node(f"n{nid}", "entity", "Human", f"name: {name}", nid, name, 0, {"fields": {"name": name}})
        for nid, name in people
    ]
    return nodes, [Edge("ng1", "ng0", "child_of"), Edge("ng2", "ng1", "child_of")]
