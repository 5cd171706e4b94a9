"""Long differential run of the compiled JSON grammar check against Arrow's reader.

The CI test (``tests/formats/test_grammar.py``) checks a few hundred random documents;
this runs many more: each is ``{`` + random JSON tokens and broken tokens + ``}`` (or the
same as the value of a member), also with random byte flips and truncated by one byte,
and the compiled verdict (``_cgrammar.h``) must give the message Arrow's JSON reader
gives.

Run:  nice .venv/bin/python benchmarks/fuzz_grammar.py --documents 300000 [--seed 3]

Prints how many documents got each verdict (0: valid; else the RapidJSON error code).
A disagreement raises with the document.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.formats.test_grammar import _TOKENS, Tally, check_docs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--documents", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    rng = random.Random(args.seed)
    tally = Tally()
    for _ in range(args.documents):
        body = "".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 20)))
        doc = ('{"k":' + body + "}" if rng.random() < 0.5 else "{" + body + "}").encode()
        flipped = bytearray(doc)
        for _ in range(rng.randint(0, 2)):
            flipped[rng.randrange(1, len(flipped))] = rng.randrange(256)
        check_docs([doc, bytes(flipped), doc[:-1]], tally)
    print(f"{3 * args.documents} documents agree; verdicts: {sorted(tally.codes.items())}")


if __name__ == "__main__":
    main()
