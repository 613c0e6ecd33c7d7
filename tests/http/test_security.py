"""Security on by default: a token on every endpoint but /healthz, no CORS unless asked,
loopback unless a token file is given, a token file only its owner can read."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.http.server import TOOLS, Server, env, wait_for

pytestmark = [pytest.mark.xdist_group("http-server"), pytest.mark.timeout(240)]


def concrete(path: str) -> str:
    return re.sub(r"{\w+}", "x", path)


def test_every_endpoint_but_healthz_needs_the_token(server: Server) -> None:
    with server.client() as api:
        spec = api.request("GET", "/openapi.json")
    operations = [(method.upper(), path) for path, ops in spec["paths"].items()
                  for method in ops]
    assert len(operations) == 27  # (issue 27 added .../complete, issue 35 .../approve-all,
    # issue 46 GET .../grants and POST .../grants/{grant_id}/revoke)
    with httpx.Client(base_url=server.url) as http:
        for method, path in operations:
            for headers in ({}, {"Authorization": "Bearer wrong"},
                            {"Authorization": f"Basic {server.token}"}):
                r = http.request(method, concrete(path), headers=headers)
                if path == "/healthz":
                    assert r.status_code == 200
                    continue
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.json()["error"] == "unauthorized" and r.json()["fix"]
                assert r.headers["www-authenticate"] == "Bearer"
        assert http.get("/runs", headers={"X-API-Key": server.token}).status_code == 200
        # an unknown path is 401 too without the token: nothing is learnt about routes
        assert http.get("/nope").status_code == 401
    assert spec["paths"]["/healthz"]["get"]["security"] == []


def test_no_cors_unless_configured(server: Server) -> None:
    with httpx.Client(base_url=server.url) as http:
        r = http.get("/runs", headers={"Origin": "https://evil.example",
                                       "Authorization": f"Bearer {server.token}"})
        assert "access-control-allow-origin" not in r.headers
        pre = http.options("/runs", headers={"Origin": "https://evil.example",
                                             "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in pre.headers


def test_a_configured_origin_may_call_it(tmp_path: Path) -> None:
    srv = Server(tmp_path, args=("--cors-origin", "https://app.example")).start()
    try:
        with httpx.Client(base_url=srv.url) as http:
            pre = http.options("/runs", headers={"Origin": "https://app.example",
                                                 "Access-Control-Request-Method": "POST",
                                                 "Access-Control-Request-Headers":
                                                     "authorization"})
            assert pre.status_code == 200
            assert pre.headers["access-control-allow-origin"] == "https://app.example"
            other = http.get("/healthz", headers={"Origin": "https://other.example"})
            assert "access-control-allow-origin" not in other.headers
    finally:
        srv.stop()


def serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chainlab.cli", "serve", "--tools", TOOLS,
                           "--db", str(tmp_path / "x.db"), *args], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=60)


def test_a_non_loopback_address_without_a_token_file_is_refused(tmp_path: Path) -> None:
    done = serve(tmp_path, "--host", "0.0.0.0")
    assert done.returncode == 2
    assert "refusing to listen on '0.0.0.0'" in done.stderr and "--token-file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o644)
    done = serve(tmp_path, "--token-file", str(token))
    assert done.returncode == 2 and "chmod 600" in done.stderr, done.stderr


def test_a_generated_token_is_printed_and_a_new_token_file_is_private(tmp_path: Path) -> None:
    srv = Server(tmp_path).start()
    try:
        assert srv.token_file.stat().st_mode & 0o077 == 0
        wait_for(lambda: "a new token was written to" in srv.log(), what="the token line")
    finally:
        srv.stop()
    proc = subprocess.Popen([sys.executable, "-m", "chainlab.cli", "serve", "--tools", TOOLS,
                             "--db", str(tmp_path / "y.db"), "--port", "0"], cwd=tmp_path,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "token: " in line:
                break
        printed = lines[-1].split("token: ", 1)[1].strip()
        url = next(line.split("listening on ")[1].split()[0] for line in lines
                   if "listening on" in line)
        assert httpx.get(f"{url}/runs", headers={"Authorization": f"Bearer {printed}"}
                         ).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
