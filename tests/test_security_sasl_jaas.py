"""``sasl.jaas.config`` parsing (server/security/sasl/jaas.py), as Kafka's JaasConfig
tokenizer accepts and refuses values."""

from __future__ import annotations

import pytest

from gregor.server.security.sasl.jaas import (
    JaasConfigError,
    LoginModule,
    parse_jaas_config,
    parse_server_login_module,
)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_module_flag_and_quoted_and_bare_options() -> None:
    module = parse_server_login_module(
        f'{PLAIN} required username="admin" password="admin-secret" user_alice=alice-pw;'
    )
    assert module == LoginModule(
        PLAIN,
        "required",
        {"username": "admin", "password": "admin-secret", "user_alice": "alice-pw"},
    )


def test_flag_is_case_insensitive_and_layout_free() -> None:
    text = f"\n  {PLAIN}\tREQUISITE\n  a = 'x y'\n  ;\n"
    assert parse_jaas_config(text) == [LoginModule(PLAIN, "requisite", {"a": "x y"})]


def test_adjacent_quoted_strings_are_separate_tokens() -> None:
    with pytest.raises(JaasConfigError, match="Value not specified for key 's' in JAAS config"):
        parse_jaas_config(f"{PLAIN} optional b='it''s';")


def test_escapes_comments_and_special_characters_inside_quotes() -> None:
    text = (
        f'{PLAIN} optional /* a comment */ a="q\\"uote" // to the end of the line\n'
        'c="tab\\there" d="\\101\\60\\0" e="semi;colon=eq";'
    )
    (module,) = parse_jaas_config(text)
    assert module.options["a"] == 'q"uote'
    assert module.options["c"] == "tab\there"
    assert module.options["d"] == "A0\0"
    assert module.options["e"] == "semi;colon=eq"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Login module not specified in JAAS config"),
        ("   // only a comment", "Login module not specified in JAAS config"),
        (PLAIN, "Login module control flag not specified in JAAS config"),
        (f"{PLAIN} mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
        (f"{PLAIN} ;", "Login module control flag is not available in the JAAS config"),
        (f"{PLAIN} required a;", "Value not specified for key 'a' in JAAS config"),
        (f"{PLAIN} required a=;", "Value not specified for key 'a' in JAAS config"),
        (f'{PLAIN} required a="b"', "JAAS config entry not terminated by semi-colon"),
        (f"{PLAIN} required a=http://x;", "JAAS config entry not terminated by semi-colon"),
    ],
)
def test_kafkas_messages_for_bad_values(text: str, message: str) -> None:
    with pytest.raises(JaasConfigError, match=f"^{message}$"):
        parse_jaas_config(text)


def test_a_broker_value_holds_exactly_one_module() -> None:
    assert len(parse_jaas_config(f"{PLAIN} required; {PLAIN} optional;")) == 2
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1 module"):
        parse_server_login_module(f"{PLAIN} required; {PLAIN} optional;")


def test_repr_leaves_option_values_out() -> None:
    module = parse_server_login_module(f'{PLAIN} required user_alice="s3cret";')
    assert "s3cret" not in repr(module)
    assert "user_alice" in repr(module)
