from pathlib import Path

import pytest

from syphon.core.config import CredentialConfig, SecretRef, default_config_path
from syphon.core.configfile import load_config
from syphon.core.errors import ConfigError, SecretError
from syphon.servicebus.secrets import resolve_secret

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """
secondary:
  namespace: contoso-secondary
  connection_string: {env: SECONDARY_CS}
primaries:
  - namespace: contoso
    connection_string: {scope: syphon, key: contoso}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "syphon.yaml"
    path.write_text(text)
    return path


def test_the_shipped_configs_load() -> None:
    example = load_config(ROOT / "conf" / "example.yaml", environ={})
    assert example.primaries[0].namespace == "contoso"
    assert example.primaries[0].connection_string == SecretRef(
        scope="syphon", key="contoso-primary"
    )
    local = load_config(None, environ={})
    assert Path(local.source) == default_config_path()
    assert local.spark.master == "local[2]"
    assert local.secondary.connection_string.env == "SYPHON_SECONDARY_CONNECTION_STRING"


def test_example_yaml_documents_every_key_the_code_knows() -> None:
    text = (ROOT / "conf" / "example.yaml").read_text()
    config = load_config(ROOT / "conf" / "example.yaml", environ={})
    for section, values in config.as_dict().items():
        if section == "source":
            continue
        assert f"{section}:" in text
        entries = values[0] if isinstance(values, list) else values
        for key in entries:
            assert f"{key}:" in text, f"{section}.{key} is not documented in conf/example.yaml"


def test_the_audit_engine_is_one_key(tmp_path: Path) -> None:
    text = MINIMAL + "audit: {engine: spark, table: main.ops.syphon_audit}\n"
    audit = load_config(write(tmp_path, text), environ={}).audit
    assert (audit.engine, audit.table, audit.format) == ("spark", "main.ops.syphon_audit", "delta")
    plain = load_config(write(tmp_path, MINIMAL), environ={}).audit
    assert (plain.engine, plain.table, plain.path) == ("delta-rs", None, ".syphon/delta")
    from syphon.store.backend import open_store

    def no_spark() -> None:
        raise AssertionError("no Spark to say where the audit is")

    assert open_store(audit, no_spark).where == "table main.ops.syphon_audit"  # type: ignore[arg-type]
    assert open_store(plain, no_spark).where == str(Path(".syphon/delta").absolute())  # type: ignore[arg-type]


def test_defaults_fill_what_a_minimal_file_leaves_out(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), environ={})
    assert config.backlog.queue_count == 10
    assert config.backlog.discovery == "management"
    assert config.primaries[0].tier == "standard"
    assert config.audit.path == ".syphon/delta"


def test_a_credit_budget_is_one_number_for_every_primary_or_one_per_primary(
    tmp_path: Path,
) -> None:
    two = MINIMAL + "  - namespace: fabrikam\n    connection_string: {env: FABRIKAM_CS}\n"
    every = load_config(write(tmp_path, two + "replay: {credits_per_second: 500}\n"), environ={})
    assert every.replay.credits_per_second == {"contoso": 500.0, "fabrikam": 500.0}
    one = load_config(
        write(tmp_path, two + "replay: {credits_per_second: {fabrikam: 250.5}}\n"), environ={}
    )
    assert one.replay.credits_per_second == {"fabrikam": 250.5}
    assert load_config(write(tmp_path, two), environ={}).replay.credits_per_second == {}


def test_environment_overrides_win_and_are_typed(tmp_path: Path) -> None:
    env = {
        "SYPHON__BACKLOG__QUEUE_COUNT": "12",
        "SYPHON__PRIMARIES__0__TIER": "premium",
        "SYPHON__SPARK__MASTER": "null",
        "SYPHON__SPARK__CONF__spark.sql.adaptive.coalescePartitions.enabled": "false",
        "UNRELATED": "x",
    }
    config = load_config(write(tmp_path, MINIMAL), environ=env)
    assert config.backlog.queue_count == 12
    assert config.primaries[0].tier == "premium"
    assert config.spark.master is None
    assert config.spark.conf == {"spark.sql.adaptive.coalescePartitions.enabled": "false"}


def test_the_config_file_can_come_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    assert load_config(None, environ={"SYPHON_CONFIG": str(path)}).source == str(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("backlog: {queue_count: zero}", r"backlog\.queue_count: must be an integer"),
        ("backlog: {queue_count: 0}", r"backlog\.queue_count: must be between 1 and 1000"),
        ("backlog: {queue_count: 20, probe_limit: 5}", r"backlog\.probe_limit: must be at least"),
        ("backlog: {discovery: guess}", r"backlog\.discovery: must be one of management, probe"),
        ("backlog: {colour: red}", r"backlog\.colour: unknown key"),
        ("audit: {path: ''}", r"audit\.path: must not be empty"),
        ("audit: {engine: sqlite}", r"audit\.engine: must be one of delta-rs, spark"),
        ("audit: {engine: spark}", r"audit\.table: is required with engine spark"),
        ("audit: {engine: spark, table: audit}", r"audit\.table: must be \[catalog\.\]schema"),
        ("audit: {table: ops.audit}", r"audit\.table: is for engine spark"),
        (
            "audit: {engine: spark, table: ops.audit, format: parquet}",
            r"audit\.format: must be delta: the lease.*\(got 'parquet'\)",
        ),
        ("logging: {level: LOUD}", r"logging\.level: must be one of"),
        ("spark: {conf: {a: [1]}}", r"spark\.conf\.a: must be a scalar"),
        ("extra: 1", r"extra: unknown key"),
        ("replay: {credits_per_second: 0}", r"replay\.credits_per_second: must be a positive"),
        ("replay: {credits_per_second: true}", r"replay\.credits_per_second: must be a posit"),
        (
            "replay: {credits_per_second: {fabrikam: 5}}",
            r"replay\.credits_per_second\.fabrikam: is not a configured primary \(one of contoso\)",
        ),
        (
            "replay: {credits_per_second: {contoso: fast}}",
            r"replay\.credits_per_second\.contoso: must be a positive number",
        ),
        ("replay: {speed: 1}", r"replay\.speed: unknown key"),
    ],
)
def test_an_invalid_value_names_the_file_and_the_key(
    tmp_path: Path, extra: str, message: str
) -> None:
    path = write(tmp_path, MINIMAL + extra + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path, environ={})
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "backlog: {queue_count: 3}\n"])
def test_a_file_without_primaries_names_the_key_as_written(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: primaries: is required"


def test_the_lease_defaults_to_two_minutes_and_cannot_be_shorter_than_its_minimum(
    tmp_path: Path,
) -> None:
    from syphon.core.config import LEASE_SECONDS_DEFAULT, LEASE_SECONDS_MIN

    assert load_config(write(tmp_path, MINIMAL), environ={}).run.lease_seconds == 120
    assert LEASE_SECONDS_DEFAULT == 120
    assert LEASE_SECONDS_MIN == 10
    at_minimum = load_config(write(tmp_path, MINIMAL + "run: {lease_seconds: 10}\n"), environ={})
    assert at_minimum.run.lease_seconds == 10
    for short in (9, 1, 0):
        path = write(tmp_path, MINIMAL + f"run: {{lease_seconds: {short}}}\n")
        with pytest.raises(
            ConfigError, match=rf"run\.lease_seconds: must be at least 10 \(got {short}\)"
        ):
            load_config(path, environ={})


def test_an_invalid_override_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"SYPHON__BACKLOG__QUEUE_COUNT.*backlog\.queue_count"):
        load_config(write(tmp_path, MINIMAL), environ={"SYPHON__BACKLOG__QUEUE_COUNT": "many"})
    with pytest.raises(ConfigError, match=r"SYPHON__PRIMARIES__3__TIER: primaries\.3: no such"):
        load_config(write(tmp_path, MINIMAL), environ={"SYPHON__PRIMARIES__3__TIER": "premium"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"primaries: is required"),
        ("- a\n- b\n", r"top level must be a mapping"),
        ("secondary: [\n", r"not valid YAML"),
        (
            MINIMAL.replace("contoso-secondary", "contoso"),
            r"secondary\.namespace: must differ from every primary",
        ),
        (MINIMAL.replace("namespace: contoso\n", "namespace: c\n"), r"primaries\.0\.namespace"),
        (MINIMAL.replace("{env: SECONDARY_CS}", "{env: 'not a name'}"), r"connection_string\.env"),
        (MINIMAL.replace("{env: SECONDARY_CS}", "{scope: s}"), r"needs env, or both scope and key"),
        (
            MINIMAL.replace("{env: SECONDARY_CS}", "{env: A, scope: s, key: k}"),
            "either env or scope/key",
        ),
    ],
)
def test_malformed_files_are_refused_with_a_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), environ={})


AAD = MINIMAL.replace(
    "connection_string: {scope: syphon, key: contoso}",
    "credential: {type: managed_identity, client_id: mi-1}\n"
    "    fully_qualified_namespace: contoso.example.net:5671",
)


def test_a_namespace_can_use_an_azure_ad_credential(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, AAD), environ={})
    (primary,) = config.primaries
    assert primary.connection_string is None
    assert primary.credential == CredentialConfig("managed_identity", client_id="mi-1")
    assert primary.host == "contoso.example.net:5671"
    assert config.secondary.credential is None
    # without a fully-qualified namespace, the public cloud's
    plain = load_config(
        write(
            tmp_path, AAD.replace("\n    fully_qualified_namespace: contoso.example.net:5671", "")
        ),
        environ={},
    )
    assert plain.primaries[0].host == "contoso.servicebus.windows.net"
    # the credential's type can be overridden like any key
    env = {"SYPHON__PRIMARIES__0__CREDENTIAL__TYPE": "default"}
    assert load_config(write(tmp_path, AAD), environ=env).primaries[0].credential.type == "default"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "credential: {type: managed_identity, client_id: mi-1}",
            "credential: {type: managed_identity}\n    connection_string: {env: X}",
            "exactly one",
        ),
        (
            "credential: {type: managed_identity, client_id: mi-1}",
            "tier: standard",
            "give a connection_string or an Azure AD credential",
        ),
        ("type: managed_identity", "type: password", r"credential\.type: must be one of"),
        (
            "type: managed_identity",
            "type: service_principal",
            r"credential\.tenant_id: is required",
        ),
        (
            "client_id: mi-1",
            "client_id: mi-1, tenant_id: t",
            r"credential\.tenant_id: is for type service_principal only",
        ),
        (
            "client_id: mi-1",
            "client_id: mi-1, client_secret: {env: S}",
            r"credential\.client_secret: is for type service_principal only",
        ),
        ("client_id: mi-1", "client_id: mi-1, colour: red", r"credential\.colour: unknown key"),
        (
            "contoso.example.net:5671",
            "https://contoso.example.net/",
            r"fully_qualified_namespace: must be host or host:port",
        ),
    ],
)
def test_a_bad_azure_ad_credential_is_refused_with_a_reason(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in AAD
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, AAD.replace(old, new)), environ={})


def test_a_fully_qualified_namespace_goes_with_a_credential_only(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "connection_string: {env: SECONDARY_CS}",
        "connection_string: {env: SECONDARY_CS}\n  fully_qualified_namespace: x.example.net",
    )
    with pytest.raises(ConfigError, match="a connection string names its own endpoint"):
        load_config(write(tmp_path, text), environ={})


def test_a_service_principal_needs_its_three_keys(tmp_path: Path) -> None:
    text = AAD.replace(
        "type: managed_identity, client_id: mi-1",
        "type: service_principal, client_id: app, tenant_id: t, client_secret: {env: SP}",
    )
    cred = load_config(write(tmp_path, text), environ={}).primaries[0].credential
    assert cred == CredentialConfig("service_principal", "app", "t", SecretRef(env="SP"))
    literal = text.replace("{env: SP}", f'"{LITERAL}"')
    with pytest.raises(ConfigError, match="secrets are references") as info:
        load_config(write(tmp_path, literal), environ={})
    assert "SAS_KEY_VALUE" not in str(info.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "nope.yaml", environ={})


LITERAL = (
    "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=SAS_KEY_VALUE"
)


def test_a_literal_connection_string_is_refused_and_not_echoed(tmp_path: Path) -> None:
    text = MINIMAL.replace("{env: SECONDARY_CS}", f'"{LITERAL}"')
    with pytest.raises(ConfigError, match="secrets are references") as info:
        load_config(write(tmp_path, text), environ={})
    assert "SAS_KEY_VALUE" not in str(info.value)


def test_a_literal_secret_hidden_in_another_key_is_refused_and_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="looks like a literal secret") as info:
        load_config(write(tmp_path, MINIMAL), environ={"SYPHON__AUDIT__PATH": LITERAL})
    assert "SAS_KEY_VALUE" not in str(info.value)


def test_secrets_resolve_only_when_asked() -> None:
    assert resolve_secret(SecretRef(env="CS"), environ={"CS": "value"}) == "value"
    with pytest.raises(SecretError, match="environment variable CS is not set"):
        resolve_secret(SecretRef(env="CS"), environ={})
    ref = SecretRef(scope="s", key="k")
    with pytest.raises(SecretError, match="only be read on Databricks"):
        resolve_secret(ref)
    assert resolve_secret(ref, dbutils_get=lambda scope, key: f"{scope}:{key}") == "s:k"


def test_the_config_holds_references_never_values(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), environ={"SECONDARY_CS": "SECRET-VALUE"})
    assert "SECRET-VALUE" not in repr(config)
    assert "SECRET-VALUE" not in repr(config.as_dict())


def test_sources_default_to_the_backlog_and_name_what_a_run_drains(tmp_path: Path) -> None:
    plain = load_config(write(tmp_path, MINIMAL), environ={})
    assert [(s.name, s.kind) for s in plain.sources] == [("backlog", "backlog")]
    assert plain.source_named(None).name == "backlog"
    text = MINIMAL + (
        "sources:\n"
        "  - {name: dlq, kind: dead_letter, namespace: contoso, entities: [orders, pay],\n"
        "     targets: {pay: pay-retry}}\n"
    )
    config = load_config(write(tmp_path, text), environ={})
    only = config.source_named(None)  # the only source is the default
    assert (only.name, only.namespace, only.entities) == ("dlq", "contoso", ("orders", "pay"))
    assert (only.target("pay"), only.target("orders")) == ("pay-retry", "orders")
    with pytest.raises(ConfigError, match="no source 'backlog'"):
        config.source_named("backlog")


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("{name: x, kind: dead_letter, entities: [q]}", "namespace"),
        (
            "{name: x, kind: dead_letter, namespace: other, entities: [q]}",
            "not a configured primary",
        ),
        ("{name: x, kind: dead_letter, namespace: contoso, entities: []}", "non-empty list"),
        (
            "{name: x, kind: dead_letter, namespace: contoso, entities: [q/$DeadLetterQueue]}",
            "not its dead-letter queue",
        ),
        (
            "{name: x, kind: dead_letter, namespace: contoso, entities: [t/Subscriptions/s]}",
            "the subscription 't/Subscriptions/s' needs a target",
        ),
        (
            "{name: x, kind: dead_letter, namespace: contoso, entities: [t/Subscriptions/s],"
            " targets: {t/Subscriptions/s: u/Subscriptions/v}}",
            "is not a queue or topic name",
        ),
        (
            "{name: x, kind: dead_letter, namespace: contoso, entities: [t/subscriptions]}",
            "a subscription is <topic>/Subscriptions/<name>",
        ),
        ("{name: x, kind: dead_letter, namespace: contoso, entities: [q, q]}", "listed twice"),
        ("{name: x, kind: namespace, namespace: contoso}", "from_namespace"),
        (
            "{name: x, kind: namespace, namespace: contoso, from_namespace: {namespace: contoso,"
            " connection_string: {env: OLD}}}",
            "must differ",
        ),
        (
            "{name: x, kind: namespace, namespace: contoso, dead_letters: yes please,"
            " from_namespace: {namespace: contoso-old, connection_string: {env: OLD}}}",
            "true or false",
        ),
        (
            "{name: x, kind: namespace, namespace: contoso, from_namespace: {namespace: old1}}",
            "from_namespace.namespace",
        ),
        (
            "{name: x, kind: dead_letter, namespace: contoso, dead_letters: true}",
            "namespace only",
        ),
        (
            "{name: x, kind: dead_letter, namespace: contoso, entities: [q], targets: {r: s}}",
            "not one of the source's entities",
        ),
        (
            "{name: x, kind: namespace, namespace: contoso, transfer_dead_letters: false,"
            " from_namespace: {namespace: contoso-old, connection_string: {env: OLD}}}",
            "dead_letter only",
        ),
        (
            "{name: x, kind: dead_letter, namespace: contoso, transfer_dead_letters: maybe}",
            "true or false",
        ),
        ("{name: x, kind: backlog, entities: [q]}", "dead_letter or namespace only"),
        ("{name: 'a b', kind: backlog}", "not a source name"),
        ("{name: x, kind: sideways}", "kind"),
    ],
)
def test_a_bad_source_is_refused_with_its_key(tmp_path: Path, source: str, said: str) -> None:
    with pytest.raises(ConfigError, match=r"sources\.0") as raised:
        load_config(write(tmp_path, MINIMAL + f"sources:\n  - {source}\n"), environ={})
    assert said in str(raised.value)


def test_a_namespace_source_drains_another_namespace_into_a_primary(tmp_path: Path) -> None:
    text = MINIMAL + (
        "sources:\n"
        "  - name: old-west\n"
        "    kind: namespace\n"
        "    namespace: contoso\n"
        "    dead_letters: true\n"
        "    from_namespace: {namespace: contoso-west, connection_string: {env: OLD_CS}}\n"
        "    targets: {events/Subscriptions/audit: audit-replay}\n"
    )
    config = load_config(write(tmp_path, text), environ={})
    source = config.source_named("old-west")
    assert (source.kind, source.namespace, source.dead_letters, source.entities) == (
        "namespace",
        "contoso",
        True,
        (),
    )
    assert source.from_namespace is not None
    assert source.from_namespace.namespace == "contoso-west"
    assert source.target("events/Subscriptions/audit") == "audit-replay"
    assert "OLD_CS" in str(config.as_dict())  # a reference, never a value


def test_a_dead_letter_source_reads_transfer_dead_letters_unless_told_not_to(
    tmp_path: Path,
) -> None:
    text = MINIMAL + (
        "sources:\n"
        "  - {name: with, kind: dead_letter, namespace: contoso}\n"
        "  - {name: without, kind: dead_letter, namespace: contoso,"
        " transfer_dead_letters: false}\n"
    )
    config = load_config(write(tmp_path, text), environ={})
    assert config.source_named("with").transfer_dead_letters is True
    assert config.source_named("without").transfer_dead_letters is False


def test_the_secondary_is_needed_only_by_a_backlog_source(tmp_path: Path) -> None:
    no_secondary = MINIMAL.split("primaries:")[1]
    dlq = "\nsources: [{name: d, kind: dead_letter, namespace: contoso, entities: [q]}]\n"
    config = load_config(write(tmp_path, "primaries:" + no_secondary + dlq), environ={})
    assert config.secondary is None
    with pytest.raises(ConfigError, match="secondary: is required by a backlog source"):
        load_config(write(tmp_path, "primaries:" + no_secondary), environ={})


def test_a_drained_namespace_is_neither_the_secondary_nor_a_primary(tmp_path: Path) -> None:
    text = MINIMAL + (
        "sources: [{name: o, kind: namespace, namespace: contoso,\n"
        "  from_namespace: {namespace: contoso-secondary, connection_string: {env: X}}}]\n"
    )
    with pytest.raises(ConfigError, match="drained by a namespace source"):
        load_config(write(tmp_path, text), environ={})


def test_a_source_name_is_used_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="used twice"):
        load_config(write(tmp_path, MINIMAL + "sources: [{name: a}, {name: a}]\n"), environ={})


def test_a_task_takes_a_count_of_messages_of_at_least_one(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL), environ={}).run.messages_per_task == 1_000
    path = write(tmp_path, MINIMAL + "run: {messages_per_task: 1}\n")
    assert load_config(path, environ={}).run.messages_per_task == 1
    for bad in ("0", "-5", "many", "2.5"):
        path = write(tmp_path, MINIMAL + f"run: {{messages_per_task: {bad}}}\n")
        with pytest.raises(ConfigError, match=r"run\.messages_per_task"):
            load_config(path, environ={})


def test_a_waves_size_is_a_count_of_messages_or_zero_for_one_wave(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL), environ={}).run.wave_messages == 40_000
    for text, expected in (("5000", 5000), ("0", 0), ("null", 0)):
        path = write(tmp_path, MINIMAL + f"run: {{wave_messages: {text}}}\n")
        assert load_config(path, environ={}).run.wave_messages == expected
    for bad in ("-1", "many", "2.5"):
        path = write(tmp_path, MINIMAL + f"run: {{wave_messages: {bad}}}\n")
        with pytest.raises(ConfigError, match=r"run\.wave_messages"):
            load_config(path, environ={})
