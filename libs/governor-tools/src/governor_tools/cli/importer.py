"""`governor import FILE.yaml`: HPAs and KEDA ScaledObjects as ScalingPolicies."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from governor.importer import convert_documents, to_document
from governor.importer_fields import migration_table


def register(app: typer.Typer) -> None:
    @app.command("import")
    def import_(
        file: Path = typer.Argument(
            None, help="YAML with HorizontalPodAutoscalers and/or KEDA ScaledObjects"
        ),
        out: Path | None = typer.Option(None, "--out", "-o", help="write here instead of stdout"),
        strict: bool = typer.Option(
            False, "--strict", help="any note, unconverted trigger or refusal is an error (CI)"
        ),
        table: bool = typer.Option(
            False, "--migration-table", help="print the field-by-field migration table and exit"
        ),
    ) -> None:
        """Convert each HPA (autoscaling/v2, v2beta2, v2beta1, v1) or KEDA ScaledObject in FILE
        into a ScalingPolicy (YAML on stdout or --out).

        Every other document is skipped with one line; what cannot be carried over is said on
        stderr, per object. Exit 0 when anything converted, 1 when nothing did (or, with
        --strict, when anything was noted or refused), 2 when FILE cannot be read."""
        if table:
            typer.echo(migration_table(), nl=False)
            return
        if file is None:
            typer.echo("give a FILE (or --migration-table)", err=True)
            raise typer.Exit(2)
        try:
            docs = list(yaml.safe_load_all(file.read_text()))
        except (OSError, yaml.YAMLError) as err:
            typer.echo(f"cannot read {file}: {err}", err=True)
            raise typer.Exit(2) from None
        policies: list[object] = []
        converted = noted = refused = skipped = 0
        for o in convert_documents(docs):
            if o.status == "skipped":
                skipped += 1
                typer.echo(f"{o.label}: skipped ({o.reason})", err=True)
                continue
            if o.conversion is None:
                refused += 1
                typer.echo(f"{o.label}: refused: {o.reason}", err=True)
                continue
            converted += 1
            result = o.conversion
            noted += bool(result.notes or result.unconverted)
            for note in result.notes:
                typer.echo(f"{o.label}: note: {note}", err=True)
            for what in result.unconverted:
                typer.echo(f"{o.label}: not converted: {what}", err=True)
            policies.append(to_document(result.policy, result.namespace_given))
        typer.echo(
            f"{file}: {converted} converted ({noted} with notes), {refused} refused, "
            f"{skipped} skipped",
            err=True,
        )
        text = yaml.safe_dump_all(policies, sort_keys=False)
        if out:
            out.write_text(text)
        else:
            typer.echo(text, nl=False)
        if not converted or (strict and (noted or refused)):
            raise typer.Exit(1)
