"""``nlg-autoscaler --check`` refuses what the start would refuse: a token file it cannot read, and a
``min_deployment_count: 0`` the autoscaler could never scale up from."""

from __future__ import annotations

import pytest

from autoscaler.cli import main


def check(tmp_path, capsys, text: str) -> tuple[int, str, str]:
    path = tmp_path / "autoscaler.yaml"
    path.write_text(text, encoding="utf-8")
    status = main(["--config", str(path), "--check"])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: None, "cannot read it (No such file or directory)"),
        (lambda p: p.write_text("  \n"), "empty; put the bearer token in it"),
        (lambda p: p.mkdir(), "cannot read it (Is a directory)"),
        (lambda p: p.write_bytes(b"\xff\xfe"), "not UTF-8"),
    ],
    ids=["missing", "empty", "directory", "not-utf-8"],
)
def test_check_refuses_a_token_file_it_cannot_use(tmp_path, capsys, make, why):
    token = tmp_path / "secrets" / "token"
    token.parent.mkdir()
    make(token)
    status, out, err = check(tmp_path, capsys, f"api:\n  port: 8080\n  token_file: {token}\n")
    assert (status, out) == (2, "")
    assert f"api.token_file = {str(token)!r}: {why}" in err, err
    assert "Traceback" not in err


def test_check_accepts_a_readable_token_file_and_an_api_that_is_off(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    status, out, _ = check(tmp_path, capsys, f"api:\n  port: 8080\n  token_file: {token}\n")
    assert status == 0 and out.endswith(f"{tmp_path}/autoscaler.yaml: ok\n")
    # With the API off the token is never read, so a missing one does not matter.
    missing = tmp_path / "missing"
    assert check(tmp_path, capsys, f"api:\n  port: 0\n  token_file: {missing}\n")[0] == 0


def test_check_refuses_scaling_to_zero_and_points_to_keda(tmp_path, capsys):
    """Reported: accepted, then held at 0 replicas for ever: with no pod there is no metric."""
    status, _, err = check(tmp_path, capsys, "scaler:\n  min_deployment_count: 0\n")
    assert status == 2
    assert "scaler.min_deployment_count = 0: must be >= 1" in err
    assert "scaling.mode=keda" in err
