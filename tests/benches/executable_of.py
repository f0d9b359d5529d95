"""Prints the executable cargo built for the target NAME (argv[1]), read from
`cargo build --message-format=json-render-diagnostics` on stdin; exits with
a message when there is none. Used by compare.sh and hot-functions.sh."""

import json
import sys

name = sys.argv[1]
found = None
for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if (message.get("reason") == "compiler-artifact"
            and message.get("target", {}).get("name") == name
            and message.get("executable")):
        found = message["executable"]
if found is None:
    sys.exit(f"cargo built no executable named {name}")
print(found)
