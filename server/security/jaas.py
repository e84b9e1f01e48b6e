"""A JAAS configuration line, as Kafka's `sasl.jaas.config` holds one.

Owns: `JaasConfig` (login module, control flag, options) and `parse_jaas_config`.

The grammar Kafka accepts (its JaasConfig reads the text with Java's
StreamTokenizer):

    <login module class> <flag> [<key>=<value> ...] ;

flag is one of required, requisite, sufficient, optional; a value is a bare word
or a double-quoted string in which a backslash escapes the next character. Kafka
requires exactly one login module in `sasl.jaas.config`; so does this parser.

Rules kept here:
- Passwords never appear in a repr or an error message: `JaasConfig`'s repr lists
  option names only, and a parse error names a position, never the text around it.
- Pure: text in, a frozen value out, `JaasError` (a ValueError) for anything wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
# Bound on the text parsed (a JAAS line with a few hundred users is a few KiB).
JAAS_MAX_CHARS = 1_000_000


class JaasError(ValueError):
    """The JAAS text is malformed; the message names what and where, never a value."""


@dataclass(frozen=True, slots=True)
class JaasConfig:
    login_module: str
    control_flag: str
    options: Mapping[str, str]

    def __repr__(self) -> str:  # option values are passwords: names only
        return (f"JaasConfig(login_module={self.login_module!r}, control_flag={self.control_flag!r}, "
                f"options={sorted(self.options)!r})")

    __str__ = __repr__

    @property
    def module_short_name(self) -> str:
        return self.login_module.rpartition(".")[2]

    def static_users(self) -> dict[str, str]:
        """PlainLoginModule's server-side users: every `user_NAME="password"` option."""
        return {key[len("user_"):]: value for key, value in self.options.items()
                if key.startswith("user_") and len(key) > len("user_")}


def _is_word_char(char: str) -> bool:
    return not char.isspace() and char not in '=;"'


def parse_jaas_config(text: str) -> JaasConfig:
    if len(text) > JAAS_MAX_CHARS:
        raise JaasError(f"JAAS configuration longer than {JAAS_MAX_CHARS} characters")
    position = 0
    length = len(text)

    def skip_space() -> None:
        nonlocal position
        while position < length and text[position].isspace():
            position += 1

    def word(what: str) -> str:
        nonlocal position
        skip_space()
        start = position
        while position < length and _is_word_char(text[position]):
            position += 1
        if start == position:
            raise JaasError(f"expected {what} at character {start}")
        return text[start:position]

    def quoted() -> str:
        nonlocal position
        start = position
        position += 1  # the opening quote
        out = []
        while position < length:
            char = text[position]
            if char == "\\":
                if position + 1 >= length:
                    break
                out.append(text[position + 1])
                position += 2
                continue
            if char == '"':
                position += 1
                return "".join(out)
            out.append(char)
            position += 1
        raise JaasError(f"unterminated quoted value starting at character {start}")

    login_module = word("a login module class name")
    control_flag = word("a control flag")
    if control_flag.lower() not in CONTROL_FLAGS:
        raise JaasError(f"control flag at character {position - len(control_flag)} must be one of "
                        f"{', '.join(CONTROL_FLAGS)}")
    options: dict[str, str] = {}
    while True:
        skip_space()
        if position >= length:
            raise JaasError("the JAAS configuration must end with ';'")
        if text[position] == ";":
            position += 1
            break
        key_at = position
        key = word("an option name or ';'")
        skip_space()
        if position >= length or text[position] != "=":
            raise JaasError(f"option at character {key_at} has no '='")
        position += 1
        skip_space()
        if position < length and text[position] == '"':
            value = quoted()
        else:
            value = word(f"a value for the option at character {key_at}")
        if key in options:
            raise JaasError(f"option at character {key_at} is given twice")
        options[key] = value
    skip_space()
    if position < length:
        raise JaasError("sasl.jaas.config must contain exactly one login module "
                        f"(more text at character {position})")
    return JaasConfig(login_module, control_flag.lower(), MappingProxyType(options))
