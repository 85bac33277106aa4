"""The one rule for a mapping written over another: an ``extends:`` overlay over its base
file (``config.extends``), and an override whose value is a mapping set where a mapping is
(``config.overrides.set_path``: ``serving.arrival={rate: 2.0}``).

Mappings merge key by key, deep: the fields the new mapping names replace the old ones', the
others stay. Anything else replaces what was there (a list, a scalar, a mapping set onto a
scalar), and so does a mapping that names another variant of a section the config tells
apart by a key (:data:`VARIANT_KEYS`): ``prompt_tokens: {dist: fixed, value: 64}`` over a
uniform distribution is the fixed one, not a fixed one with the uniform's ``low`` and
``high`` left over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VARIANT_KEYS = ("dist", "family", "kind", "config_json", "model_type")
"""The keys the config's unions tell their variants by: a distribution's ``dist``, an
architecture's ``family``, a hardware file's ``kind``, and the forms of a model field (a
config.json's path, a config.json's keys by their ``model_type``). A new mapping that gives
one of them another value than the old one holds (or one the old lacks) replaces the old.
(tests/test_override_mappings.py checks that every discriminator of the config's models is
here.)"""


def other_variant(base: Mapping[Any, Any], overlay: Mapping[Any, Any]) -> bool:
    """Whether ``overlay`` names another variant than ``base`` is (:data:`VARIANT_KEYS`)."""
    return any(
        key in overlay and (key not in base or base[key] != overlay[key]) for key in VARIANT_KEYS
    )


def merged(base: Any, overlay: Any) -> Any:
    """``overlay`` over ``base``: mappings key by key, deep, unless ``overlay`` names
    another variant; anything else replaced. Neither argument is changed; the result shares
    the values it took from them."""
    if (
        not isinstance(base, Mapping)
        or not isinstance(overlay, Mapping)
        or other_variant(base, overlay)
    ):
        return overlay
    out = dict(base)
    for key, value in overlay.items():
        out[key] = merged(base[key], value) if key in base else value
    return out
