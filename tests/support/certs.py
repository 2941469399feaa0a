"""A throwaway CA and a serving pair it signs, made with openssl (the metrics adapter's tests:
the API server's aggregator checks the pair's name for <service>.<namespace>.svc)."""

from __future__ import annotations

import subprocess
from pathlib import Path

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def serving_pair(folder: Path, dns: str, *sans: str) -> tuple[Path, Path, Path]:
    """(ca.crt, tls.crt, tls.key) in folder, the pair for DNS name `dns` plus `sans`
    (openssl's subjectAltName entries, e.g. "DNS:localhost", "IP:127.0.0.1")."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
            "-subj", "/CN=governor-test-ca")  # fmt: skip
    openssl("req", *EC, "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={dns}")
    (folder / "san.ext").write_text("subjectAltName=" + ",".join([f"DNS:{dns}", *sans]) + "\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "tls.crt", "-days", "1", "-extfile", "san.ext")  # fmt: skip
    return folder / "ca.crt", folder / "tls.crt", folder / "tls.key"
