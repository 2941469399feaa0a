"""`governor import FILE.yaml`: HPAs and KEDA ScaledObjects as ScalingPolicies."""

from __future__ import annotations

from pathlib import Path

import msgspec
import typer
import yaml

from governor.importer import ConversionError, convert


def register(app: typer.Typer) -> None:
    @app.command("import")
    def import_(
        file: Path = typer.Argument(
            ..., help="YAML with HPA (autoscaling/v2) or ScaledObject docs"
        ),
        out: Path | None = typer.Option(None, "--out", "-o", help="write here instead of stdout"),
    ) -> None:
        """Convert each HPA or KEDA ScaledObject in FILE into a ScalingPolicy (YAML on stdout).

        What cannot be carried over is said on stderr, per object."""
        try:
            docs = [d for d in yaml.safe_load_all(file.read_text()) if d]
        except (OSError, yaml.YAMLError) as err:
            typer.echo(f"cannot read {file}: {err}", err=True)
            raise typer.Exit(2) from None
        policies: list[object] = []
        failed = 0
        for i, doc in enumerate(docs):
            name = (doc.get("metadata") or {}).get("name", f"document {i}")
            try:
                result = convert(doc)
            except ConversionError as err:
                typer.echo(f"{doc.get('kind')} {name}: not converted: {err}", err=True)
                failed += 1
                continue
            for note in result.notes:
                typer.echo(f"{doc.get('kind')} {name}: note: {note}", err=True)
            for what in result.unconverted:
                typer.echo(f"{doc.get('kind')} {name}: cannot convert: {what}", err=True)
            policies.append(msgspec.to_builtins(result.policy))
        text = yaml.safe_dump_all(policies, sort_keys=False)
        if out:
            out.write_text(text)
        else:
            typer.echo(text, nl=False)
        if failed:
            raise typer.Exit(1)
