"""keep_newest.py: the same memory as keep_newest.js, in Python.

audit run --preset cca-pilot --conditions 'cmd:python docs/examples/keep_newest.py'
"""

import json
import sys


def update(request: dict) -> str:
    lines = request["memory"].split("\n") if request["memory"] else []
    for record in request["chunk"]["records"]:
        lines.append(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
    kept: list[str] = []
    used = -1
    for line in reversed(lines):
        size = len(line.encode("utf-8")) + 1
        if used + size > request["budget"]:
            break
        kept.insert(0, line)
        used += size
    return "\n".join(kept)


for line in sys.stdin:  # ends when the audit closes our input
    try:
        answer = {"memory": update(json.loads(line))}
    except Exception as error:  # the system's own failure: scored as an error
        answer = {"error": repr(error)}
    print(json.dumps(answer), flush=True)
