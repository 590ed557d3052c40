"""Add, remove and list ACLs in an aclgate ACL file, or through the ACL Admin API of an aclgate
proxy or a Kafka cluster, with the options, expansions, validation messages and output of
Kafka's kafka-acls.sh (kafka.admin.AclCommand).

examples:
  aclgate acls --acl-file acls.json --add --allow-principal User:alice --operation Read --topic orders
  aclgate acls --acl-file acls.json --add --allow-principal User:app --producer --topic orders
  aclgate acls --acl-file acls.json --add --allow-principal User:app --consumer --topic orders --group billing
  aclgate acls --acl-file acls.json --list --topic orders
  aclgate acls --acl-file acls.json --remove --force --topic orders
  aclgate acls --bootstrap-server proxy:9092 --command-config admin.properties --list
  aclgate acls import --from-cluster kafka1:9092 --command-config admin.properties --acl-file acls.json
  aclgate acls import --from-cluster kafka1:9092 --acl-store kafka --acl-bootstrap kafka1:9092
  aclgate acls import --from-file acls.json --acl-store kafka --acl-bootstrap kafka1:9092
  aclgate acls --acl-store kafka --acl-bootstrap kafka1:9092 --list
  aclgate acls export --bootstrap-server proxy:9092 --command-config admin.properties --output acls.json

The file is created by the first --add. Writes are atomic and locked, so concurrent runs lose
nothing; a running proxy picks the change up within its reload interval. Through
--bootstrap-server the change is made by the proxy itself (whatever its ACL store) and is in
force there when the command returns. With --acl-store kafka the command reads and writes the
fleet's ACL topic itself, as a proxy of the fleet does (no proxy needs to run). `import` adds
a live cluster's (or an ACL file's) ACLs to a file, a proxy or the `kafka` store; `export` writes the ACLs of any
of the three as an ACL file (stdout without --output).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from aclgate.authz import text
from aclgate.authz.aclfile import AclFileError, dump_acl_file
from aclgate.authz.model import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
    listing_order,
    operation_name,
    parse_operation_cli,
    parse_principal,
)
from aclgate.proxy.cli import aclsource
from aclgate.proxy.cli.aclstorecli import (
    AclStoreClient,
    AclStoreCliError,
    AdminAcls,
    FileAcls,
    KafkaStoreAcls,
)

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY

# (type, name, pattern): a ResourcePattern, or a ResourcePatternFilter when pattern is ANY/MATCH
Resource = tuple[ResourceType, str, PatternType]
# (principal, host, operation, permission): an AccessControlEntry
Entry = tuple[str, str, AclOperation, AclPermissionType]

CLUSTER_FILTER: Resource = (ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
PATTERN_TYPES = "|".join(p.name for p in PatternType if p != PatternType.UNKNOWN)


class UsageError(Exception):
    """CommandLineUtils.printUsageAndExit: the message on stderr, exit 1 (kafka-acls follows
    it with the whole help, which scrolls the message away: here a pointer to --help)."""


class CommandError(Exception):
    """AclCommand.main's catch-all: "Error while executing ACL command: ...", exit 1."""


def _usage_exit(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    print(f"{message}\nsee `{parser.prog} --help`", file=sys.stderr)
    raise SystemExit(1)


def configure(parser: argparse.ArgumentParser) -> None:
    # kafka-acls exits 1 on every usage error, argparse's own included.
    parser.error = lambda message: _usage_exit(parser, message)  # type: ignore[method-assign]
    parser.set_defaults(_parser=parser)
    many: dict[str, Any] = {"action": "append", "default": None}  # add_argument keywords
    add = parser.add_argument
    add(
        "subcommand",
        nargs="?",
        choices=("import", "export"),
        help="import: add the ACLs of --from-cluster to --acl-file, --bootstrap-server or "
        "--acl-store kafka; export: write the ACLs of one of those as an ACL file",
    )
    add("--acl-file", metavar="PATH", help="the ACL file to change or list (created by --add)")
    aclsource.configure(parser, file_option=False)
    add("--bootstrap-server", metavar="HOST:PORT,...", help="an aclgate proxy or a Kafka cluster: change or list its ACLs through the Admin API")  # fmt: skip
    add("--bootstrap-controller", metavar="...", help="kafka-acls' controller connection: not supported (use --bootstrap-server)")  # fmt: skip
    add("--command-config", metavar="FILE", help="Java client properties for --bootstrap-server or --from-cluster: security.protocol, sasl.mechanism (PLAIN, SCRAM-SHA-256/512), sasl.jaas.config, ssl.truststore.location (PEM)")  # fmt: skip
    add("--from-cluster", metavar="HOST:PORT,...", help="import: the cluster whose ACLs are copied")
    add("--from-file", metavar="PATH", help="import: the ACL file whose ACLs are copied (file store to kafka store)")  # fmt: skip
    add("--output", metavar="PATH", help="export: the ACL file to write (default: stdout)")
    add("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    add("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    add("--list", action="store_true", help="List ACLs for the specified resource, use --topic <topic> or --group <group> or --cluster to specify a resource.")  # fmt: skip
    add("--topic", **many, help="topic to which ACLs should be added or removed. A value of '*' indicates ACL should apply to all topics.")  # fmt: skip
    add("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    add("--group", **many, help="Consumer Group to which the ACLs should be added or removed. A value of '*' indicates the ACLs should apply to all groups.")  # fmt: skip
    add("--transactional-id", **many, help="The transactionalId to which ACLs should be added or removed. A value of '*' indicates the ACLs should apply to all transactionalIds.")  # fmt: skip
    add("--delegation-token", **many, help="Delegation token to which ACLs should be added or removed. A value of '*' indicates ACL should apply to all tokens.")  # fmt: skip
    add("--user-principal", **many, help="Specifies a user principal as a resource in relation with the operation. For instance one could grant CreateTokens or DescribeTokens permission on a given user principal.")  # fmt: skip
    add("--resource-pattern-type", metavar=PATTERN_TYPES, default="LITERAL", help="The type of the resource pattern or pattern filter. When adding acls, this should be a specific pattern type, e.g. 'literal' or 'prefixed'. When listing or removing acls, a specific pattern type can be used to list or remove acls from specific resource patterns, or use the filter values of 'any' or 'match', where 'any' will match any pattern type, but will match the resource name exactly, where as 'match' will perform pattern matching to list or remove all acls that affect the supplied resource(s). WARNING: 'match', when used in combination with the '--remove' switch, should be used with care. (default: LITERAL)")  # fmt: skip
    add("--operation", **many, help="Operation that is being allowed or denied. Valid operation names are: " + ", ".join(operation_name(o) for o in AclOperation if o > Op.ANY) + " (default: All)")  # fmt: skip
    add("--allow-principal", **many, help="principal is in principalType:name format. Note that principalType must be supported by the Authorizer being used. For example, User:'*' is the wild card indicating all users.")  # fmt: skip
    add("--deny-principal", **many, help="principal is in principalType:name format. By default anyone not added through --allow-principal is denied access. You only need to use this option as negation to already allowed set. AND PLEASE REMEMBER DENY RULES TAKES PRECEDENCE OVER ALLOW RULES.")  # fmt: skip
    add("--principal", action="append", nargs="?", default=None, help="List ACLs for the specified principal. principal is in principalType:name format. Multiple --principal option can be passed.")  # fmt: skip
    add("--allow-host", **many, help="Host from which principals listed in --allow-principal will have access. If you have specified --allow-principal then the default for this option will be set to '*' which allows access from all hosts.")  # fmt: skip
    add("--deny-host", **many, help="Host from which principals listed in --deny-principal will be denied access. If you have specified --deny-principal then the default for this option will be set to '*' which denies access from all hosts.")  # fmt: skip
    add("--producer", action="store_true", help="Convenience option to add/remove ACLs for producer role. This will generate ACLs that allows WRITE,DESCRIBE and CREATE on topic.")  # fmt: skip
    add("--consumer", action="store_true", help="Convenience option to add/remove ACLs for consumer role. This will generate ACLs that allows READ,DESCRIBE on topic and READ on group.")  # fmt: skip
    add("--idempotent", action="store_true", help="Enable idempotence for the producer. This should be used in combination with the --producer option.")  # fmt: skip
    add("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")


# ------------------------------------------------------------------------------ validation


def _has(args: argparse.Namespace, option: str) -> bool:
    value = getattr(args, option.replace("-", "_"))
    return bool(value) if not isinstance(value, list) else True


def _pattern_type(value: str) -> PatternType:
    """joptsimple's EnumConverter (case-insensitive) plus Kafka's PatternTypeConverter."""
    member = PatternType.__members__.get(value.upper())
    if member is None:
        raise UsageError(f"Value [{value}] is not one of [{PATTERN_TYPES}]")
    if member == PatternType.UNKNOWN:
        raise UsageError(f"Unknown resource-pattern-type: {value}")
    return member


def check_args(args: argparse.Namespace) -> None:
    """AclCommandOptions.checkArgs, in Kafka's order and words (--acl-file is a third way to
    name the ACLs, besides --bootstrap-server and --bootstrap-controller)."""
    if args.bootstrap_controller:
        raise UsageError("--bootstrap-controller is not supported: use --bootstrap-server")
    if args.from_cluster or args.from_file or args.output:
        raise UsageError("--from-cluster, --from-file and --output go with `import` and `export`")
    _one_target(args)
    if args.command_config and not args.bootstrap_server:
        raise UsageError("--command-config goes with --bootstrap-server")
    if sum(map(bool, (args.add, args.remove, args.list))) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    exclusive = {
        "list": ("producer", "consumer", "allow-host", "allow-principal", "deny-host", "deny-principal"),
        "producer": ("operation", "deny-principal", "deny-host"),
        "consumer": ("operation", "deny-principal", "deny-host"),
    }  # fmt: skip
    for used, invalid in exclusive.items():
        if _has(args, used):
            for other in invalid:
                if _has(args, other):
                    raise UsageError(f'Option "[{used}]" can\'t be used with option "[{other}]"')
    if args.principal is not None and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )


def _one_target(args: argparse.Namespace) -> None:
    """The ACLs are in exactly one place: a file, an Admin API endpoint or the kafka store."""
    kafka = args.acl_store == "kafka"
    if sum(map(bool, (args.acl_file, args.bootstrap_server, kafka))) != 1:
        raise UsageError(
            "Exactly one of --acl-file or --bootstrap-server must be specified"
            + (" (or --acl-store kafka)" if kafka else "")
        )
    if not kafka and (args.acl_bootstrap or args.acl_command_config):
        raise UsageError("--acl-bootstrap and --acl-command-config go with --acl-store kafka")


# ------------------------------------------------------------------------------ expansion


def _principals(values: list[str] | None) -> list[str]:
    out = []
    for value in values or ():
        if value is None:  # `--principal` given without a value
            continue
        kind, name = parse_principal(value.strip())  # raises with Kafka's message
        out.append(f"{kind}:{name}")
    return list(dict.fromkeys(out))


def _hosts(hosts: list[str] | None, principals: list[str] | None) -> list[str]:
    if hosts:
        return list(dict.fromkeys(h.strip() for h in hosts))
    return [WILDCARD_HOST] if principals else []


def entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> set[Entry]:
    """getAcl: principals x operations x hosts, ALLOW for the allow options, DENY for deny."""
    out: set[Entry] = set()
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host, ALLOW),
        (args.deny_principal, args.deny_host, DENY),
    ):
        for principal in _principals(principals):
            for op in operations:
                for host in _hosts(hosts, principals):
                    out.add((principal, host, op, perm))
    return out


def resource_filters(args: argparse.Namespace, die_if_none: bool = True) -> list[Resource]:
    """getResourceFilter: every resource option, in Kafka's order; names trimmed except
    transactional ids; the cluster only with a LITERAL pattern type."""
    pattern = args.pattern
    found: list[Resource] = [(ResourceType.TOPIC, t.strip(), pattern) for t in args.topic or ()]
    if pattern == PatternType.LITERAL and (args.cluster or args.idempotent):
        found.append(CLUSTER_FILTER)
    found += [(ResourceType.GROUP, g.strip(), pattern) for g in args.group or ()]
    found += [(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id or ()]
    found += [(ResourceType.DELEGATION_TOKEN, t.strip(), pattern) for t in args.delegation_token or ()]  # fmt: skip
    found += [(ResourceType.USER, u.strip(), pattern) for u in args.user_principal or ()]
    if not found and die_if_none:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or --group "
            "<group> or --delegation-token <Delegation Token ID>"
        )
    return list(dict.fromkeys(found))


# What --producer and --consumer grant, per resource type (AclCommand, unchanged since 2.0).
PRODUCER_OPS = {
    ResourceType.TOPIC: (Op.WRITE, Op.DESCRIBE, Op.CREATE),
    ResourceType.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
}
CONSUMER_OPS = {ResourceType.TOPIC: (Op.READ, Op.DESCRIBE), ResourceType.GROUP: (Op.READ,)}


def _role(args: argparse.Namespace, ops_by_type: dict) -> dict[Resource, set[Entry]]:
    return {
        r: entries(args, ops_by_type[r[0]]) for r in resource_filters(args) if r[0] in ops_by_type
    }


def filter_to_entries(args: argparse.Namespace) -> dict[Resource, set[Entry]]:
    """getResourceFilterToAcls: plain options, or the --producer/--consumer expansions."""
    result: dict[Resource, set[Entry]] = {}
    if not args.producer and not args.consumer:
        operations = {parse_operation_cli(o.strip()) for o in args.operation or ["All"]}
        result.update(dict.fromkeys(resource_filters(args), entries(args, operations)))
    if args.producer:
        result.update(_role(args, PRODUCER_OPS))
        if args.idempotent:
            result[CLUSTER_FILTER] = entries(args, (Op.IDEMPOTENT_WRITE,))
    if args.consumer:
        for resource, found in _role(args, CONSUMER_OPS).items():
            result[resource] = found | result.get(resource, set())
    for (rtype, _, _), found in result.items():
        valid = (*SUPPORTED_OPERATIONS[rtype], Op.ALL)
        if any(op not in valid for _, _, op, _ in found):
            names = ", ".join(operation_name(o) for o in valid)
            raise UsageError(f"ResourceType {rtype.name} only supports operations {names}")
    return result


# ------------------------------------------------------------------------------ output


def _entry_lines(found: Iterable[Entry]) -> str:
    """Entries in KRaft's order, formatted as AclCommand prints a Set: tab-indented lines."""
    ordered = sorted(found, key=lambda e: (e[2], e[0], e[1], e[3]))
    return "\n".join("\t" + text.access_control_entry(*e) for e in ordered)


def _print_block(title: str, resource: Resource, found: Iterable[Entry]) -> None:
    print(f"{title} `{text.resource_pattern(*resource)}`: \n {_entry_lines(found)} \n")


def _binding(resource: Resource, entry: Entry) -> AclBinding:
    rtype, name, pattern = resource
    principal, host, operation, permission = entry
    return AclBinding(rtype, name, pattern, principal, host, operation, permission)


def _filter(resource: Resource, entry: Entry | None) -> AclBindingFilter:
    if entry is None:
        return AclBindingFilter(*resource)
    rtype, name, pattern = resource
    principal, host, operation, permission = entry
    return AclBindingFilter(rtype, name, pattern, principal, host, operation, permission)


def _confirm(args: argparse.Namespace, message: str) -> bool:
    if args.force:
        return True
    print(message, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        raise CommandError("no answer to the confirmation prompt on stdin (use --force)")
    return answer.strip().lower() == "y"


# ------------------------------------------------------------------------------ actions


def add_acls(args: argparse.Namespace, store: AclStoreClient) -> None:
    if args.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(
            f"A '--resource-pattern-type' value of '{args.pattern.name}' is not valid when adding acls."
        )
    resource_to_entries = filter_to_entries(args)
    if any(not found for found in resource_to_entries.values()):
        raise UsageError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    new = [_binding(r, e) for r, found in resource_to_entries.items() for e in found]
    for binding in new:
        binding.validate(args.acl_host_cidr)  # as the broker would, before anything is written
    for resource, found in resource_to_entries.items():
        _print_block("Adding ACLs for resource", resource, found)
    store.create(new)


def remove_acls(args: argparse.Namespace, store: AclStoreClient) -> None:
    filters: list[AclBindingFilter] = []
    for resource, found in filter_to_entries(args).items():
        if not found:
            prompt = f"Are you sure you want to delete all ACLs for resource filter `{text.resource_pattern(*resource)}`? (y/n)"  # fmt: skip
            if _confirm(args, prompt):
                filters.append(_filter(resource, None))
        else:
            prompt = f"Are you sure you want to remove ACLs: \n {_entry_lines(found)} \n from resource filter `{text.resource_pattern(*resource)}`? (y/n)"  # fmt: skip
            if _confirm(args, prompt):
                filters += [_filter(resource, e) for e in found]
    if filters:
        store.delete(filters)


def list_acls(args: argparse.Namespace, store: AclStoreClient) -> None:
    filters = [_filter(r, None) for r in resource_filters(args, die_if_none=False)]
    principals = _principals(args.principal)
    bindings = store.describe(filters)
    grouped: dict[Resource, list[Entry]] = {}
    for b in listing_order(bindings):
        resource = (b.resource_type, b.resource_name, b.pattern_type)
        grouped.setdefault(resource, []).append(
            (b.principal, b.host, b.operation, b.permission_type)
        )
    if not principals:
        for resource, found in grouped.items():
            _print_block("Current ACLs for resource", resource, found)
        return
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        for resource, found in grouped.items():
            mine = [e for e in found if e[0] == principal]
            if mine:
                _print_block("Current ACLs for resource", resource, mine)


ACTIONS = {"add": add_acls, "remove": remove_acls, "list": list_acls}


# ------------------------------------------------------------------------------ import, export


def _open(args: argparse.Namespace) -> AclStoreClient:
    if args.bootstrap_server:
        return AdminAcls(args.bootstrap_server, args.command_config)
    if args.acl_store == "kafka":
        try:
            return KafkaStoreAcls(aclsource.kafka_settings(args))
        except aclsource.AclSourceError as exc:
            raise CommandError(str(exc)) from None
    return FileAcls(args.acl_file, args.acl_host_cidr)


def _target_name(args: argparse.Namespace) -> str:
    if args.bootstrap_server:
        return args.bootstrap_server
    if args.acl_store == "kafka":
        return f"the ACL topic {args.acl_topic} on {args.acl_bootstrap}"
    return str(args.acl_file)


def import_acls(args: argparse.Namespace) -> None:
    """Copy every ACL of a live cluster or an ACL file into the target (added to what it
    holds, as one change): the way from broker-side ACLs, or from the file store, to a proxy
    fleet. With --bootstrap-server the --command-config is used for both ends (one admin
    identity)."""
    if bool(args.from_cluster) == bool(args.from_file):
        raise UsageError("import needs one of --from-cluster HOST:PORT or --from-file PATH")
    _one_target(args)
    source: AclStoreClient = (
        AdminAcls(args.from_cluster, args.command_config)
        if args.from_cluster
        else FileAcls(args.from_file)
    )
    try:
        found = source.describe(())
    finally:
        source.close()
    for binding in found:
        binding.validate(args.acl_host_cidr)  # what the proxy would refuse to load is not written
    target = _open(args)
    try:
        target.create(found)
    finally:
        target.close()
    origin = args.from_cluster or args.from_file
    print(f"Imported {len(found)} ACLs from {origin} into {_target_name(args)}")


def export_acls(args: argparse.Namespace) -> None:
    """Write the ACLs of the file, the endpoint or the store as an ACL file, in Kafka's
    listing order."""
    if args.from_cluster or args.from_file:
        raise UsageError("export takes no --from-cluster or --from-file")
    _one_target(args)
    store = _open(args)
    try:
        text_out = dump_acl_file(listing_order(store.describe(())))
    finally:
        store.close()
    if args.output:
        from aclgate.files import write_atomically

        write_atomically(Path(args.output), text_out.encode("utf-8"), 0o644)
    else:
        sys.stdout.write(text_out)


SUBCOMMANDS = {"import": import_acls, "export": export_acls}


def _run(args: argparse.Namespace) -> None:
    args.pattern = _pattern_type(args.resource_pattern_type)
    if args.subcommand:
        if args.add or args.remove or args.list:
            raise UsageError(f"{args.subcommand} takes no --add, --remove or --list")
        SUBCOMMANDS[args.subcommand](args)
        return
    check_args(args)
    action = next(name for name in ACTIONS if getattr(args, name))
    store = _open(args)
    try:
        ACTIONS[action](args, store)
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    parser = args._parser
    try:
        _run(args)
    except UsageError as exc:
        _usage_exit(parser, str(exc))
    except BrokenPipeError:  # `| head`: the entry point ends quietly, as Unix tools do
        raise
    except (
        CommandError,
        AclFileError,
        AclStoreCliError,
        InvalidAclError,
        ValueError,
        OSError,
    ) as exc:
        print(f"Error while executing ACL command: {exc}", file=sys.stderr)
        return 1
    return 0
