"""The --ldap-* settings: checked at start, each error naming its setting as it was written."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from aclgate.proxy.config import ConfigError, add_arguments, from_args
from aclgate.proxy.security.ldapgroups import LdapSettings


def _config(tmp_path: Path, *flags: str):
    users = tmp_path / "users.json"
    users.write_text('{"version": 1, "users": {}}')
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--upstream", "127.0.0.1:9092", "--listener-security-protocol", "SASL_PLAINTEXT",
            "--users-file", str(users)]  # fmt: skip
    return from_args(parser.parse_args([*base, *flags]))


LDAP = ("--ldap-url", "ldap://127.0.0.1:389", "--ldap-user-search-base", "ou=people,dc=x",
        "--ldap-group-search-base", "ou=groups,dc=x")  # fmt: skip


def test_a_full_setting_and_its_defaults(tmp_path):
    password = tmp_path / "pw"
    password.write_text("secret\n")
    config = _config(
        tmp_path, *LDAP, "--ldap-bind-dn", "cn=svc,dc=x", "--ldap-bind-password-file",
        str(password), "--ldap-nested-groups", "--ldap-url", "ldap://a:389, ldaps://b",
    )  # fmt: skip
    settings = LdapSettings.from_config(config)
    assert settings is not None
    assert settings.urls == ("ldap://a:389", "ldaps://b")
    assert (settings.user_filter, settings.group_filter) == ("(uid={user})", "(member={dn})")
    assert (settings.cache_ttl, settings.max_stale, settings.timeout) == (300.0, 900.0, 5.0)
    assert settings.nested_groups and settings.cache_max_entries == 10_000
    assert LdapSettings.from_config(_config(tmp_path)) is None  # off by default


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--ldap-bind-dn", "cn=svc"), "--ldap-bind-dn cn=svc: is only used with --ldap-url"),
        (("--ldap-url", "http://x"), "--ldap-url http://x: 'http://x': not an ldap:// or ldaps://"),
        (("--ldap-url", "ldap://x/dc=x"), "only ldap[s]://HOST[:PORT]"),
        ((*LDAP, "--ldap-bind-dn", "cn=svc"), "--ldap-bind-dn cn=svc: needs --ldap-bind-password-file"),
        ((*LDAP, "--ldap-user-dn-template", "uid={user}"), "not both"),
        (("--ldap-url", "ldap://x", "--ldap-group-search-base", "o"), "--ldap-user-search-base"),
        ((*LDAP, "--ldap-user-filter", "(uid=alice)"), "--ldap-user-filter (uid=alice): has none of {user}"),
        ((*LDAP, "--ldap-group-filter", "(member={dn}"), "is not an LDAP filter"),
        ((*LDAP, "--ldap-group-filter", "(memberUid={user})", "--ldap-nested-groups"), "needs {dn}"),
        ((*LDAP, "--ldap-cache-ttl", "0"), "--ldap-cache-ttl 0: must be positive"),
        ((*LDAP, "--ldap-cache-ttl", "60", "--ldap-max-stale", "30"), "--ldap-max-stale 30: must be at least --ldap-cache-ttl (60)"),
        ((*LDAP, "--ldap-timeout", "-1"), "--ldap-timeout -1: must be positive"),
        ((*LDAP, "--ldap-cache-max-entries", "0"), "must be at least 1"),
        ((*LDAP, "--ldap-group-name-attribute", "c n"), "not an attribute name"),
        ((*LDAP, "--ldap-ssl-cafile", "/nowhere"), "only used with ldaps:// URLs or --ldap-start-tls"),
        ((*LDAP, "--ldap-start-tls", "--ldap-url", "ldaps://x"), "ldaps:// URLs are TLS already"),
        ((*LDAP, "--ldap-bind-dn", "cn=s", "--ldap-bind-password-file", "/nowhere/pw"), "no such file"),
    ],
)  # fmt: skip
def test_mistakes_are_named(tmp_path, flags, message):
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, *flags)
    assert message in str(caught.value)


def test_a_plaintext_listener_has_no_user_to_look_up(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--upstream", "127.0.0.1:9092", *LDAP])
    with pytest.raises(ConfigError, match="PLAINTEXT listener has no user to look up"):
        from_args(args)


def test_the_toml_file_names_the_key(tmp_path):
    toml = tmp_path / "aclgate.toml"
    (tmp_path / "c").write_text("")
    toml.write_text('upstream = ["127.0.0.1:9092"]\nlistener_security_protocol = "SSL"\n'
                    f'ssl_certfile = "{tmp_path / "c"}"\nssl_keyfile = "{tmp_path / "c"}"\n'
                    'ldap_url = "ldap://x"\n'
                    'ldap_user_search_base = "o"\nldap_group_search_base = "o"\n'
                    'ldap_max_stale = 1.0\n')  # fmt: skip
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ConfigError) as caught:
        from_args(parser.parse_args(["--config", str(toml)]))
    assert "ldap_max_stale = 1.0: must be at least --ldap-cache-ttl" in str(caught.value)
