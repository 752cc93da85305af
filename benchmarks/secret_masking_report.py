"""What secret masking (ingest/secrets.py) masks in ordinary data, and how fast it is.

    python benchmarks/secret_masking_report.py [REALDATA_DIR] [--examples N]

Scans every string column of every table of the bundled sample export (sample_data/) and
every string value of the real agent transcripts under REALDATA_DIR (default
../shared/realdata: JSON, JSONL, .traj, .af and the JSON members of .eval zips). For each
source it prints how many strings and characters were scanned, how many values were masked,
by kind, and examples of each kind with the masked value between ⟦ ⟧ (none of these files
holds a real credential, so every mask here is a false positive or a test fixture's fake).
Then it times the display paths: a page of 500 labels and one prompt of a few hundred KB.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ingest.secrets import find_secrets, mask_secrets  # noqa: E402

TEXT_SUFFIXES = {".json", ".jsonl", ".traj", ".af", ".eval"}


def strings_of(value: Any) -> Iterator[str]:
    """Every string in a parsed JSON value (keys are names, not content: skipped)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def json_documents(path: Path) -> Iterator[Any]:
    if path.suffix == ".eval":
        with zipfile.ZipFile(path) as z:
            for name in sorted(z.namelist()):
                if name.endswith(".json"):
                    yield json.loads(z.read(name))
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".jsonl":
        for line in text.splitlines():
            if line.strip():
                yield json.loads(line)
    else:
        yield json.loads(text)


def sample_strings(folder: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(folder.rglob("*.parquet")):
        table = pq.read_table(path)
        for name, column in zip(table.column_names, table.columns):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                for v in column.to_pylist():
                    if v:
                        yield f"{path.relative_to(REPO)}:{name}", v


def realdata_strings(folder: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            label = f"{folder.name}/{path.relative_to(folder)}"
            for doc in json_documents(path):
                for s in strings_of(doc):
                    yield label, s


def context(text: str, start: int, end: int, width: int = 50) -> str:
    value = text[start:end]
    if len(value) > 80:
        value = value[:38] + "…" + value[-38:]
    before = text[max(0, start - width) : start]
    after = text[end : end + width]
    return (before + "⟦" + value + "⟧" + after).replace("\n", "⏎")


def report(title: str, items: Iterator[tuple[str, str]], n_examples: int) -> dict[str, Any]:
    n_strings = n_chars = n_masked_strings = 0
    kinds: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    t0 = time.process_time()
    for where, text in items:
        n_strings += 1
        n_chars += len(text)
        spans = find_secrets(text)
        if not spans:
            continue
        n_masked_strings += 1
        for s in spans:
            kinds[s.kind] += 1
            by_file[where] += 1
            if len(examples[s.kind]) < n_examples:
                examples[s.kind].append(f"{where}: {context(text, s.start, s.end)}")
    elapsed = time.process_time() - t0
    print(f"\n== {title}")
    print(
        f"{n_strings} strings, {n_chars / 1e6:.2f} M characters, scanned in {elapsed:.2f} s CPU; "
        f"{sum(kinds.values())} values masked in {n_masked_strings} strings"
    )
    for kind, n in kinds.most_common():
        print(f"  {kind}: {n}")
        for e in examples[kind]:
            print(f"      {e[:260]}")
    if by_file:
        print("  by file/column:")
        for where, n in by_file.most_common(12):
            print(f"    {n:5d}  {where}")
    return {"strings": n_strings, "masks": sum(kinds.values())}


def timings(all_text: list[str]) -> None:
    from ingest.secrets import _mask_uncached

    # CPU time of this process: a busy machine does not inflate it
    print("\n== display paths (CPU time)")
    labels = list(dict.fromkeys(t[:80] for t in all_text))[:500]
    t0 = time.process_time()
    for label in labels:
        _mask_uncached(label)
    elapsed = (time.process_time() - t0) * 1e3
    print(f"{len(labels)} distinct labels of up to 80 characters, uncached: {elapsed:.1f} ms")
    t0 = time.process_time()
    for label in labels:
        mask_secrets(label)
    mask_secrets_first = time.process_time() - t0
    t0 = time.process_time()
    for label in labels:
        mask_secrets(label)
    print(
        f"the same through mask_secrets (cached after the first page): first "
        f"{mask_secrets_first * 1e3:.1f} ms, again {(time.process_time() - t0) * 1e3:.1f} ms"
    )
    prompt = "\n\n".join(all_text)
    for size in (300_000, 3_000_000):
        text = (prompt * (size // max(1, len(prompt)) + 1))[:size]
        t0 = time.process_time()
        r = mask_secrets(text)
        elapsed = (time.process_time() - t0) * 1e3
        print(f"one prompt of {size // 1000} KB: {elapsed:.0f} ms ({r.count} masks)")
    hostile = "password: " * 100_000
    t0 = time.process_time()
    mask_secrets(hostile)
    print(f"1 MB of repeated 'password: ' on one line: {(time.process_time() - t0) * 1e3:.0f} ms")
    blob = "QUJD" * 2_500_000
    t0 = time.process_time()
    mask_secrets(blob)
    print(f"a 10 MB unbroken base64 run: {(time.process_time() - t0) * 1e3:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("realdata", nargs="?", default=str(REPO.parent / "shared" / "realdata"))
    parser.add_argument("--examples", type=int, default=6, help="examples shown per kind")
    args = parser.parse_args()
    realdata = Path(args.realdata)

    sample = list(sample_strings(REPO / "sample_data"))
    report("sample export (sample_data/, every string column)", iter(sample), args.examples)
    real: list[tuple[str, str]] = []
    if realdata.is_dir():
        for sub in sorted(p for p in realdata.iterdir() if p.is_dir()):
            items = list(realdata_strings(sub))
            real.extend(items)
            report(f"realdata {sub.name}", iter(items), args.examples)
    else:
        print(f"\n(no real transcripts: {args.realdata} is not a folder)")
    timings([t for _, t in sample + real])


if __name__ == "__main__":
    main()
