"""Parse an in-toto Statement with the in-toto attestation framework's own protos
(in-toto-attestation: Statement v1, and SLSA Provenance v1 for that predicate type), strictly:
an unknown field or a wrongly typed one is an error, as is what the Statement wrapper's
validate() refuses. The library and protobuf live in the tools venv (requirements/tools.in), so
this runs there, in a subprocess.
"""

import json
import subprocess

from pax.paths import ROOT

_PARSE = """
import json, sys
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
doc = json.load(sys.stdin)
try:
    Statement.copy_from_pb(json_format.ParseDict(doc, statement_pb2.Statement())).validate()
    if doc.get("predicateType") == "https://slsa.dev/provenance/v1":
        json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())
except (json_format.ParseError, ValueError) as e:
    print(e)
    sys.exit(1)
"""


def errors(statement: dict) -> list[str]:
    """What the protos refuse in the statement (empty: it parses)."""
    python = ROOT / ".tools" / "venv" / "bin" / "python"
    assert python.exists(), f"no tools venv at {python.parent.parent}: run ./noxw -l once"
    r = subprocess.run(
        [str(python), "-I", "-c", _PARSE],
        input=json.dumps(statement),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r.stdout.splitlines()
