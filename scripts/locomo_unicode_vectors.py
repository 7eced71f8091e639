"""Expected LoCoMo scores for answers where Unicode word boundaries matter.

Writes tests/fixtures/eval/f1_unicode.jsonl: one JSON object per case with the category, the
prediction, the gold answer, the normalised forms of both, the unrounded score and the value the
official pipeline stores. The official scorer (snap-research/LoCoMo task_eval/evaluation.py) is
followed rule by rule, with the libraries it pins: `regex` 2022.10.31 for the article rule and
`nltk` 3.8.1 for Porter stems. Run: python3 scripts/locomo_unicode_vectors.py
"""

import json
import string
import sys
from collections import Counter

import numpy as np
import regex
from nltk.stem import PorterStemmer

STEMMER = PorterStemmer()
PUNCTUATION = set(string.punctuation)


def normalise(text):
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in PUNCTUATION)
    text = regex.sub(r"\b(a|an|the|and)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction, gold):
    left = [STEMMER.stem(word) for word in normalise(prediction).split()]
    right = [STEMMER.stem(word) for word in normalise(gold).split()]
    shared = sum((Counter(left) & Counter(right)).values())
    if shared == 0:
        return 0
    precision = shared / len(left)
    recall = shared / len(right)
    return 2 * precision * recall / (precision + recall)


def score(category, prediction, gold):
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        parts = [part.strip() for part in prediction.split(",")]
        golds = [part.strip() for part in gold.split(",")]
        return np.mean([max(token_f1(part, g) for part in parts) for g in golds])
    return token_f1(prediction, gold)


# (what the case exercises, category, prediction, gold)
CASES = [
    ("combining acute after 'the'", 4, "the\u0301 band played", "the band played"),
    ("combining mark before 'an'", 4, "\u0308an apple pie", "an apple pie"),
    ("combining mark after 'and' in a list", 1, "hiking and\u0300 swimming, painting", "hiking, swimming, painting"),
    ("zero-width joiner after 'the'", 4, "the\u200d museum", "the museum"),
    ("zero-width joiner before 'a'", 2, "\u200da week ago", "a week ago"),
    ("zero-width non-joiner after 'an'", 4, "an\u200c owl", "an owl"),
    ("zero-width non-joiner inside gold", 3, "likely yes", "the\u200c likely yes; she said so"),
    ("undertie connector after 'the'", 4, "the\u203f lake house", "the lake house"),
    ("character tie before 'and'", 4, "bread \u2040and butter", "bread and butter"),
    ("fullwidth low line after 'a'", 2, "a\uff3f year", "a year"),
    ("underscore is ASCII punctuation and is deleted first", 4, "the_ park", "the park"),
    ("superscript two is not a word character", 4, "the\u00b2 answer", "answer"),
    ("middle dot is not a word character", 4, "the\u00b7 end", "end"),
    ("no-break space separates words", 4, "the\u00a0garden", "garden"),
    ("Arabic-Indic digit joins the word", 4, "the\u0660 count", "count"),
    ("modifier letter apostrophe joins the word", 4, "\u02bcthe shop", "the shop"),
    ("Devanagari vowel sign after 'a'", 4, "a\u093f trip", "trip"),
    ("emoji after 'the' is not a word character", 4, "the\U0001F600 party", "party"),
]


def main():
    out = []
    for name, category, prediction, gold in CASES:
        value = score(category, prediction, gold)
        stored = round(value, 3)
        out.append({
            "case": name,
            "category": category,
            "prediction": prediction,
            "gold": gold,
            "normalized_prediction": normalise(prediction),
            "normalized_gold": normalise(gold.split(";")[0].strip() if category == 3 else gold),
            "f1": float(value),
            "stored": float(stored),
        })
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/eval/f1_unicode.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for row in out:
            handle.write(json.dumps(row, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
