"""The keys file and ``ctxrelay keys``: hashed keys, bad input refused with a fix."""
from __future__ import annotations

import json

import pytest

from ctxrelay.apps import cli
from ctxrelay.apps.server.tenants import KeyFile, KeyRing
from ctxrelay.errors import InvalidArgumentError


def test_create_list_revoke_through_the_cli(tmp_path, capsys):
    keys = str(tmp_path / "keys.json")
    assert cli.main(["--json", "keys", "create", "acme", "--keys", keys, "--name", "ci",
                     "--requests-per-minute", "5"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["tenant"] == "acme" and made["limits"] == {"requests_per_minute": 5}
    assert made["key"].startswith("crk_" + made["id"] + "_")
    assert cli.main(["--json", "keys", "list", "--keys", keys]) == 0
    listed = json.loads(capsys.readouterr().out)["keys"]
    assert [k["id"] for k in listed] == [made["id"]] and "key" not in listed[0]
    assert made["key"].split("_", 2)[2] not in (tmp_path / "keys.json").read_text()
    ring = KeyRing(tmp_path / "keys.json")
    assert ring.tenant_of(made["key"]).name == "acme"
    assert cli.main(["keys", "revoke", made["id"], "--keys", keys]) == 0
    assert ring.tenant_of(made["key"]) is None            # re-read: the file changed


@pytest.mark.parametrize("argv, words", [
    (["keys", "create", "Bad Name"], "tenant must be"),
    (["keys", "create", "acme", "--stored-bytes", "0"], "positive integer"),
    (["keys", "revoke", "000000000000"], "keys list"),
])
def test_bad_input_is_refused_with_how_to_fix_it(tmp_path, capsys, argv, words):
    assert cli.main([*argv, "--keys", str(tmp_path / "k.json")]) == 2
    assert words in capsys.readouterr().err


def test_without_a_keys_file_the_cli_says_how_to_name_one(monkeypatch, capsys):
    monkeypatch.delenv("CTXRELAY_KEYS_FILE", raising=False)
    assert cli.main(["keys", "list"]) == 2
    assert "--keys FILE" in capsys.readouterr().err


def test_a_malformed_keys_file_or_env_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "keys.json"
    bad.write_text('{"keys": [{"id": "x"}]}')
    with pytest.raises(InvalidArgumentError, match="malformed key record"):
        KeyFile(bad).load()
    monkeypatch.setenv("CTXRELAY_RELAY_KEYS", "not json")
    with pytest.raises(InvalidArgumentError, match="CTXRELAY_RELAY_KEYS"):
        KeyRing.configured(None)
    good = tmp_path / "good.json"
    key, _ = KeyFile(good).create("env-tenant")
    monkeypatch.setenv("CTXRELAY_RELAY_KEYS", good.read_text())
    assert KeyRing.configured(None).tenant_of(key).name == "env-tenant"
