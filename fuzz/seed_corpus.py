"""Writes every envelope captured from the published runtimes into corpus/decode/."""
import glob
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "corpus", "decode")
os.makedirs(out, exist_ok=True)
n = 0
for path in glob.glob(os.path.join(here, "..", "arcp-types", "tests", "fixtures", "**", "*.jsonl"), recursive=True):
    for line in open(path):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        raw = json.dumps(record["env"]) if "env" in record else record.get("raw")
        if raw and record.get("dir") in ("send", "recv", ">>", "<<"):
            with open(os.path.join(out, f"seed{n:04d}"), "w") as f:
                f.write(raw)
            n += 1
print(f"{n} seeds in {out}")
