"""The one rule that keeps a record's hash when the record gains a field.

A hashed record (a sweep config, a drafter arm, a cell, a training recipe) leaves out every field
that is at its dataclass default, except the fields its hashes have covered since before this rule
(``always``, frozen per record: they stay in at any value). A field added later is therefore absent
from every record that does not set it, so existing run folders and heads keep their hashes without
a per-field exemption; setting it changes the hash, as it should.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping
from typing import Any


def _as_json(value: Any) -> Any:
    """``value`` as its JSON rendering reads back (tuples become lists), so defaults compare with plain records."""
    return json.loads(json.dumps(value, default=str))


def hashed_fields(record: Mapping[str, Any], cls: type, always: Collection[str] = ()) -> dict[str, Any]:
    """``record`` (dataclass ``cls``'s fields as {name: value}, plain or not) without the fields at
    their default, except those named in ``always``."""
    defaults = {
        f.name: _as_json(f.default if f.default is not dataclasses.MISSING else f.default_factory())
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    return {k: v for k, v in record.items() if k in always or k not in defaults or _as_json(v) != defaults[k]}
