"""LdapDirectory (proxy/security/ldapgroups.py) against a real slapd: a user's groups by
groupOfNames member DN and posixGroup memberUid, nested groups, a DN template instead of a
search, users that do not exist or are ambiguous, filter injection, ldaps:// and StartTLS with
the certificate verified, a refused bind, an unreachable directory, a kept connection the
directory dropped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aclgate.proxy.security.ldapgroups import DirectoryError, LdapDirectory, LdapSettings
from tests.fixtures.slapd import SERVICE_DN, SERVICE_PASSWORD, SUFFIX, SlapdServer

BOTH = "(|(member={dn})(memberUid={user}))"


def _settings(slapd: SlapdServer, tmp_path: Path, **overrides) -> LdapSettings:
    password = tmp_path / "bind.pw"
    password.write_text(SERVICE_PASSWORD + "\n")
    values = {
        "urls": (slapd.url,),
        "bind_dn": SERVICE_DN,
        "bind_password_file": password,
        "user_search_base": f"ou=people,{SUFFIX}",
        "group_search_base": f"ou=groups,{SUFFIX}",
        "timeout": 2.0,
        **overrides,
    }
    return LdapSettings(**values)


def test_groups_by_member_dn_and_by_member_uid(slapd, tmp_path):
    directory = LdapDirectory(_settings(slapd, tmp_path))
    found = directory.groups_of("alice")
    assert (found.outcome, found.names) == ("found", {"payments"})
    both = LdapDirectory(_settings(slapd, tmp_path, group_filter=BOTH))
    assert both.groups_of("alice").names == {"payments", "ops"}
    assert both.groups_of("bob").names == {"other"}
    assert directory.groups_of("erin") == directory.groups_of("erin")  # a member of nothing
    assert directory.groups_of("erin").names == frozenset()
    assert directory.groups_of("erin").outcome == "found"


def test_nested_groups_are_followed_when_asked(slapd, tmp_path):
    flat = LdapDirectory(_settings(slapd, tmp_path))
    assert flat.groups_of("carol").names == {"team-a"}
    nested = LdapDirectory(_settings(slapd, tmp_path, nested_groups=True))
    # carol -> team-a -> payments -> all-staff
    assert nested.groups_of("carol").names == {"team-a", "payments", "all-staff"}
    assert nested.groups_of("alice").names == {"payments", "all-staff"}


def test_a_dn_template_instead_of_a_search(slapd, tmp_path):
    directory = LdapDirectory(
        _settings(
            slapd,
            tmp_path,
            user_search_base=None,
            user_dn_template=f"uid={{user}},ou=people,{SUFFIX}",
        )
    )
    assert directory.groups_of("alice").names == {"payments"}
    assert directory.groups_of("nobody").outcome == "not_found"
    # the name is escaped as an RDN value: no other entry can be named
    assert directory.groups_of("alice,ou=people").outcome == "not_found"


def test_unknown_ambiguous_and_injected_users_get_no_groups(slapd, tmp_path):
    directory = LdapDirectory(_settings(slapd, tmp_path, user_search_base=SUFFIX))
    assert directory.groups_of("nobody").outcome == "not_found"
    assert directory.groups_of("twin").outcome == "ambiguous"  # two entries: no groups
    assert directory.groups_of("twin").names == frozenset()
    # a name is a value, never filter syntax: `*` matches no one, `*)(uid=alice` nothing
    assert directory.groups_of("*").outcome == "not_found"
    assert directory.groups_of("*)(uid=alice").outcome == "not_found"
    assert directory.groups_of("o'brien*").names == {"other"}


def test_ldaps_and_start_tls_verify_the_certificate(slapd, ldap_ca, tmp_path):
    assert slapd.ldaps_url is not None
    ca = ldap_ca / "ca.crt"
    ldaps = LdapDirectory(_settings(slapd, tmp_path, urls=(slapd.ldaps_url,), ssl_cafile=ca))
    assert ldaps.groups_of("alice").names == {"payments"}
    start_tls = LdapDirectory(_settings(slapd, tmp_path, start_tls=True, ssl_cafile=ca))
    assert start_tls.groups_of("alice").names == {"payments"}
    untrusted = LdapDirectory(_settings(slapd, tmp_path, urls=(slapd.ldaps_url,)))  # system CAs
    with pytest.raises(DirectoryError):
        untrusted.groups_of("alice")


def test_a_refused_bind_and_an_unreachable_directory_are_errors(slapd, tmp_path):
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("not-the-password\n")
    settings = _settings(slapd, tmp_path)
    refused = LdapDirectory(dataclasses.replace(settings, bind_password_file=wrong))
    with pytest.raises(DirectoryError, match="invalidCredentials"):
        refused.groups_of("alice")
    gone = LdapDirectory(_settings(slapd, tmp_path, urls=("ldap://127.0.0.1:9",)))
    with pytest.raises(DirectoryError):
        gone.groups_of("alice")
    # the next URL is tried when one does not answer
    second = LdapDirectory(_settings(slapd, tmp_path, urls=("ldap://127.0.0.1:9", slapd.url)))
    assert second.groups_of("alice").names == {"payments"}


def test_a_kept_connection_the_directory_dropped_is_replaced(slapd_factory, tmp_path):
    server = slapd_factory()
    directory = LdapDirectory(_settings(server, tmp_path))
    assert directory.groups_of("alice").names == {"payments"}
    server.stop()
    with pytest.raises(DirectoryError):
        directory.groups_of("alice")
    server.start()
    assert directory.groups_of("alice").names == {"payments"}
