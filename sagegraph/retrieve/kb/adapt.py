"""Training questions a knowledge base makes for itself: the KB's own relation chains from real
start nodes, each with its real answer set, read back as questions in plain English frames.

Why: a selector that ranks relation chains against a question (GraphRAFT's `similar`, DGR's chain
fallback) reads better once tuned on questions of the KB it serves, and a user's KB rarely comes
with training questions. The KB itself says which chains exist, where they start and what they
reach, so a question and its right chain can be made from it with no gold: sample a start node and
one of its chains (1 to `max_hops` relations, both stored directions) that ends on a few nodes, or
two named nodes and a node both reach (a conjunction); phrase it in one of several frames whose
words are the relation and type names themselves; the other chains around the same start nodes are
the wrong readings a tuned encoder must learn to rank below it (one relation short, one more, the
same relations in another order). Only English function words are written here: no relation,
label or entity of any particular KB.

The rows come out in two shapes: a question file (`record`: id, question, answer ids, topic ids,
hops, qtype) that any retriever can be evaluated on, and the selector's training labels (`label`),
the same fields `chain_encoder.training_triplets` reads from labels of gold-annotated questions.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from sagegraph.retrieve.kb.chains import chain_phrase, joint_phrase, masked_question
from sagegraph.retrieve.kb.metapaths import HopKey, WalkBudget, chains_from, hop_groups
from sagegraph.retrieve.kb.view import KBView, normalise

MAX_NEGATIVES = 50
FIRST, SECOND = "[A]", "[B]"  # where a question's names go in its frame
MAX_NAME_CHARS = 80  # longer "names" are descriptions, which no question quotes whole


class SampleSettings(BaseModel):
    """What `sample_questions` draws from a KB."""

    questions: int = Field(800, ge=1, description="questions to draw (each a distinct start and chain)")
    max_hops: int = Field(3, ge=1, le=3, description="the longest chain drawn, in relations")
    max_answers: int = Field(20, ge=1, description="a chain that reaches more nodes asks nothing specific: skipped")
    conjunction_share: float = Field(0.2, ge=0.0, le=1.0, description="share of two-entity questions")
    max_start_degree: int = Field(500, ge=1, description="start nodes with more KB relations (hubs) are not drawn")
    seed: int = Field(0, description="the draw's seed: the same KB and settings draw the same questions")


@dataclass
class KBQuestion:
    """One drawn question: its text, the names in it, the chain that answers it (as a phrase, the
    form a selector compares) and the phrases of the chains that do not."""

    id: str
    frame: str  # the question with FIRST (and SECOND) for its names
    kind: Literal["chain", "conjunction"]
    names: list[str]
    topic_ids: list[str]
    relations: list[str]
    answer_ids: list[str]
    phrase: str
    negatives: list[str] = field(default_factory=list)
    target_type: str = ""

    @property
    def text(self) -> str:
        return fill(self.frame, self.names)

    def record(self) -> dict[str, Any]:
        """A question file's row (`corpus.questions`): answers and topics are the KB's own."""
        return {
            "id": self.id,
            "question": self.text,
            "answer_ids": self.answer_ids,
            "topic_ids": self.topic_ids,
            "hops": len(self.relations) if self.kind == "chain" else 1,
            "qtype": self.kind,
            "relation_paths": [self.relations],
            "split": "adapt",
        }

    def label(self) -> dict[str, Any]:
        """A selector training label, in the fields `chain_encoder.training_triplets` reads."""
        return {
            "qid": self.id,
            "question": self.text,
            "masked": masked_question(self.text, self.names),
            "phrase": self.phrase,
            "negatives": self.negatives,
            "kind": self.kind,
            "kept": True,
            "label_by": "sampled",
        }


def fill(frame: str, names: list[str]) -> str:
    for slot, name in zip((FIRST, SECOND), names):
        frame = frame.replace(slot, name)
    return frame


def words(name: str) -> str:
    """A relation or type name as a question would say it: separators as spaces, lower case."""
    return " ".join(name.replace("_", " ").replace(".", " ").replace("-", " ").split()).lower()


def chain_frames(start: str, hops: list[str], target: str) -> list[str]:
    """A chain from `start` over relation words `hops` (in walking order) to a node of type words
    `target`, in the frames a question takes: 'of' read back from the end, possessives read
    forward, the answer's type named, and the two mixed."""
    back = " of the ".join(reversed(hops))
    owned = "'s ".join(hops)
    frames = [
        f"what is the {back} of {start}?",
        f"what is {start}'s {owned}?",
        f"which {target} is the {back} of {start}?",
        f"{start}'s {owned}?",
    ]
    if len(hops) > 1:
        frames.append(f"what is the {' of the '.join(reversed(hops[1:]))} of {start}'s {hops[0]}?")
    return frames


def conjunction_frames(first: str, first_hop: str, second: str, second_hop: str, target: str) -> list[str]:
    return [
        f"which {target} is the {first_hop} of {first} and the {second_hop} of {second}?",
        f"what {target} has {first_hop} {first} and {second_hop} {second}?",
        f"which {target} is both {first}'s {first_hop} and {second}'s {second_hop}?",
    ]


# -- the words people use for a relation, by a model ---------------------------------------------------
# A relation's stored name is one word for it; a question uses others ('sex' for a relation stored as
# `gender`, 'mom' for `parents`). An encoder tuned on frames that only ever repeat the stored name
# learns that a question must repeat it, and reads a question in other words worse than before it
# was tuned. One call per relation type asks the model for the words people use, and each frame
# draws its words among them.

VOCABULARY_WORDS = 6
VOCABULARY_SYSTEM = (
    "You help phrase questions about a knowledge graph. Given one relation of the graph (its stored name and "
    "the types it links), list the words or short phrases people use for it when they ask a question "
    f"(synonyms, everyday words, either direction's name), up to {VOCABULARY_WORDS}, each at most four words. "
    'Reply with JSON only: {"words": ["...", "..."]}.'
)


def vocabulary_messages(relation: str, head: str, tail: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": VOCABULARY_SYSTEM},
        {"role": "user", "content": f"Relation: {words(relation)} (from a {words(head)} to a {words(tail)})"},
    ]


def read_vocabulary(reply: dict[str, Any], relation: str) -> list[str]:
    """The model's words for a relation: short, distinct, other than its stored name; ValueError
    where none is, so the reply is not kept as a good one."""
    items = reply.get("words")
    if not isinstance(items, list):
        raise ValueError("no 'words' list")
    own = words(relation)
    out: list[str] = []
    for item in items:
        text = " ".join(str(item).lower().split()) if isinstance(item, str) else ""
        if text and len(text.split()) <= 4 and len(text) <= 40 and text != own and text not in out:
            out.append(text)
    if not out:
        raise ValueError("no usable word")
    return out[:VOCABULARY_WORDS]


def distinct_vocabulary(
    vocabulary: dict[str, list[str]], relations: list[str]
) -> tuple[dict[str, list[str]], list[str]]:
    """Each relation's words less those that name another relation too: a word the model gave for
    two relations, or another relation's own stored name. A frame that says it would teach the
    encoder that the word means one relation when the KB has two it could mean, so it is dropped
    (and reported); the relation keeps its stored name and its other words."""
    own_names = {words(relation): relation for relation in relations}
    given = Counter(word for said in vocabulary.values() for word in set(said))
    kept: dict[str, list[str]] = {}
    dropped: list[str] = []
    for relation, said in vocabulary.items():
        kept[relation] = [word for word in said if given[word] == 1 and own_names.get(word, relation) == relation]
        dropped.extend(f"{relation}: {word}" for word in said if word not in kept[relation])
    return kept, dropped


def _is_round_trip(hops: tuple[HopKey, ...]) -> bool:
    """A chain that walks an edge straight back (X's parent's child) asks nothing a question asks."""
    return any(a[0] == b[0] and a[1] != b[1] for a, b in zip(hops, hops[1:]))


def _phrase(view: KBView, hops: tuple[HopKey, ...]) -> str:
    return chain_phrase([(view.relation_types[code], end_type) for code, _, end_type in hops])


def _ranked_negatives(positive: tuple[HopKey, ...], others: dict[str, tuple[HopKey, ...]]) -> list[str]:
    """The wrong readings, those sharing most relations with the right one first (one relation
    short, one more, the same relations reordered): the near misses a tuned encoder must learn."""
    mine = {code for code, _, _ in positive}

    def shared(item: tuple[str, tuple[HopKey, ...]]) -> tuple[int, str]:
        return (-len(mine & {code for code, _, _ in item[1]}), item[0])

    return [phrase for phrase, _ in sorted(others.items(), key=shared)][:MAX_NEGATIVES]


class _Sampler:
    def __init__(self, view: KBView, settings: SampleSettings, vocabulary: dict[str, list[str]]):
        self.view, self.settings, self.vocabulary = view, settings, vocabulary
        self.rng = random.Random(settings.seed)
        names = view.norm_names
        counts = Counter(names)
        degree = view.degree
        # A start is named, unambiguous (its name stands for this node alone, so the answers drawn
        # are the ones the name asks for) and not a hub.
        self.starts = [
            row
            for row in range(view.n)
            if names[row]
            and counts[names[row]] == 1
            and len(view.names[row]) <= MAX_NAME_CHARS
            and 0 < degree[row] <= settings.max_start_degree
        ]
        self.rng.shuffle(self.starts)
        self.start_set = set(self.starts)
        self.seen: set[tuple] = set()

    def phrasing(self, *drawn: object) -> random.Random:
        """The words and frame of one drawn question come from a generator of their own, seeded by
        what was drawn: the draw (starts, chains, answers) is then the same whatever words the
        relations have, and a change to one relation's words rephrases only the questions that
        walk it, so two vocabularies are compared on the same questions."""
        return random.Random(repr((self.settings.seed, *drawn)))

    def said(self, relation: str, phrasing: random.Random) -> str:
        """A relation as one question says it: its stored name or one of the words people use."""
        return phrasing.choice([words(relation), *self.vocabulary.get(relation, [])])

    def chain(self, start: int, qid: str) -> KBQuestion | None:
        view, settings = self.view, self.settings
        budget = WalkBudget(max_work=200_000, max_chains=1_000)
        walks = {
            hops: ends
            for hops, ends in chains_from(view, start, settings.max_hops, budget=budget, through_start=False)
            if not _is_round_trip(hops)
        }
        fits = [hops for hops, ends in walks.items() if 0 < len(ends) <= settings.max_answers]
        if not fits:
            return None
        lengths = sorted({len(h) for h in fits})
        length = self.rng.choice(lengths)  # each length as likely as the others, whatever the KB's fan-out
        hops = self.rng.choice(sorted(h for h in fits if len(h) == length))
        if (start, hops) in self.seen:
            return None
        self.seen.add((start, hops))
        ends = walks[hops]
        phrase = _phrase(view, hops)
        answers = set(ends.tolist())
        others = {_phrase(view, h): h for h, e in walks.items() if h != hops and set(e.tolist()) != answers}
        others.pop(phrase, None)
        phrasing = self.phrasing(start, hops)
        frames = chain_frames(
            FIRST, [self.said(view.relation_types[c], phrasing) for c, _, _ in hops], words(hops[-1][2])
        )
        return KBQuestion(
            id=qid,
            frame=phrasing.choice(frames),
            kind="chain",
            names=[view.names[start]],
            topic_ids=[str(view.graph.ids[start])],
            relations=[view.relation_types[c] for c, _, _ in hops],
            answer_ids=sorted(str(view.graph.ids[r]) for r in answers),
            phrase=phrase,
            negatives=_ranked_negatives(hops, others),
            target_type=hops[-1][2],
        )

    def conjunction(self, first: int, qid: str) -> KBQuestion | None:
        """`first`, a second named node, and the nodes one relation from each (of one type)."""
        view, settings = self.view, self.settings
        one = hop_groups(view, np.array([first], dtype=np.int64))
        tried = list(one.items())
        self.rng.shuffle(tried)
        for key, targets in tried:
            for target in self.rng.sample(targets.tolist(), min(len(targets), 5)):
                other_ends, codes, outgoing = view.incident(target)
                partners = [
                    (int(o), int(c), bool(d))
                    for o, c, d in zip(other_ends.tolist(), codes.tolist(), outgoing.tolist())
                    if o != first and o in self.start_set
                ]
                if not partners:
                    continue
                second, code, out = self.rng.choice(partners)
                second_key = (code, not out, key[2])
                reach = hop_groups(view, np.array([second], dtype=np.int64))
                both = np.intersect1d(targets, reach.get(second_key, np.zeros(0, np.int64)))
                both = both[(both != first) & (both != second)]
                if not 0 < len(both) <= settings.max_answers or (first, second, key, second_key) in self.seen:
                    continue
                self.seen.add((first, second, key, second_key))
                return self._conjunction(qid, first, key, second, second_key, both, one, reach)
        return None

    def _conjunction(
        self,
        qid: str,
        first: int,
        key: HopKey,
        second: int,
        second_key: HopKey,
        both: np.ndarray,
        one: dict[HopKey, np.ndarray],
        reach: dict[HopKey, np.ndarray],
    ) -> KBQuestion:
        view = self.view
        rels = view.relation_types
        target = key[2]

        def pair(a: HopKey, b: HopKey) -> str:
            return joint_phrase([rels[a[0]], rels[b[0]]], target)

        phrase = pair(key, second_key)
        answers = set(both.tolist())
        others: dict[str, tuple[HopKey, ...]] = {}
        for a, ends_a in one.items():
            for b, ends_b in reach.items():
                if a[2] != b[2] or (a, b) == (key, second_key):
                    continue
                common = set(np.intersect1d(ends_a, ends_b).tolist()) - {first, second}
                if common and common != answers:
                    others[pair(a, b)] = (a, b)
        for hop in (*one, *reach):  # one entity's relation alone: half the question
            others.setdefault(_phrase(view, (hop,)), (hop,))
        others.pop(phrase, None)
        phrasing = self.phrasing(first, second, key, second_key)
        frames = conjunction_frames(
            FIRST, self.said(rels[key[0]], phrasing), SECOND, self.said(rels[second_key[0]], phrasing), words(target)
        )
        return KBQuestion(
            id=qid,
            frame=phrasing.choice(frames),
            kind="conjunction",
            names=[view.names[first], view.names[second]],
            topic_ids=[str(view.graph.ids[first]), str(view.graph.ids[second])],
            relations=[rels[key[0]], rels[second_key[0]]],
            answer_ids=sorted(str(view.graph.ids[r]) for r in answers),
            phrase=phrase,
            negatives=_ranked_negatives((key, second_key), others),
            target_type=target,
        )


def sample_questions(
    view: KBView, settings: SampleSettings, vocabulary: dict[str, list[str]] | None = None
) -> list[KBQuestion]:
    """Up to `settings.questions` questions, each from a distinct start node in the draw's order;
    fewer where the KB has fewer starts that lead anywhere specific. `vocabulary`: the words people
    use for each relation (`read_vocabulary`), drawn among with its stored name."""
    sampler = _Sampler(view, settings, vocabulary or {})
    out: list[KBQuestion] = []
    want_conjunctions = round(settings.questions * settings.conjunction_share)
    conjunctions = 0
    for start in sampler.starts:
        if len(out) >= settings.questions:
            break
        qid = f"adapt-{len(out):05d}"
        made = None
        if conjunctions < want_conjunctions and sampler.rng.random() < settings.conjunction_share * 2:
            made = sampler.conjunction(start, qid)
            conjunctions += made is not None
        if made is None:
            made = sampler.chain(start, qid)
        if made is not None:
            out.append(made)
    return out


def name_collisions(view: KBView, questions: list[KBQuestion]) -> int:
    """Questions whose names another node also carries (none, as drawn): a check for tests."""
    index = view.name_index
    return sum(any(len(index.get(normalise(n), ())) != 1 for n in q.names) for q in questions)
