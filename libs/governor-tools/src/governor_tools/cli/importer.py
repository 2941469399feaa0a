"""`governor import FILE.yaml`: HPAs and KEDA ScaledObjects as ScalingPolicies."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from governor.entry import Commands
from governor.importer import convert_documents, to_document
from governor.importer_fields import migration_table


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def import_(args: argparse.Namespace) -> int:
    """Convert each HPA (autoscaling/v2, v2beta2, v2beta1, v1) or KEDA ScaledObject in FILE
    into a ScalingPolicy (YAML on stdout or --out).

    Every other document is skipped with one line; what cannot be carried over is said on
    stderr, per object. Exit 0 when anything converted, 1 when nothing did (or, with
    --strict, when anything was noted or refused), 2 when FILE cannot be read."""
    file: Path | None = args.file
    if args.migration_table:
        sys.stdout.write(migration_table())
        return 0
    if file is None:
        _say("give a FILE (or --migration-table)")
        return 2
    try:
        docs = list(yaml.safe_load_all(file.read_text()))
    except (OSError, yaml.YAMLError) as err:
        _say(f"cannot read {file}: {err}")
        return 2
    policies: list[object] = []
    converted = noted = refused = skipped = 0
    for o in convert_documents(docs):
        if o.status == "skipped":
            skipped += 1
            _say(f"{o.label}: skipped ({o.reason})")
            continue
        if o.conversion is None:
            refused += 1
            _say(f"{o.label}: refused: {o.reason}")
            continue
        converted += 1
        result = o.conversion
        noted += bool(result.notes or result.unconverted)
        for note in result.notes:
            _say(f"{o.label}: note: {note}")
        for what in result.unconverted:
            _say(f"{o.label}: not converted: {what}")
        policies.append(to_document(result.policy, result.namespace_given))
    _say(
        f"{file}: {converted} converted ({noted} with notes), {refused} refused, {skipped} skipped"
    )
    text = yaml.safe_dump_all(policies, sort_keys=False)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 1 if not converted or (args.strict and (noted or refused)) else 0


def register(commands: Commands) -> None:
    p = commands.command("import", import_)
    p.add_argument(
        "file",
        type=Path,
        nargs="?",
        metavar="FILE",
        help="YAML with HorizontalPodAutoscalers and/or KEDA ScaledObjects",
    )
    p.add_argument("--out", "-o", type=Path, help="write here instead of stdout")
    p.add_argument(
        "--strict",
        action="store_true",
        help="any note, unconverted trigger or refusal is an error (CI)",
    )
    p.add_argument(
        "--migration-table",
        action="store_true",
        help="print the field-by-field migration table and exit",
    )
