"""``flashtune.runtime.hf_attention``, the path the README documents, is the integrations
room's module itself (not a copy): importing it here hands back that module object, so its
names, private ones and monkeypatches included, are one and the same."""

from __future__ import annotations

import sys

from flashtune.runtime.integrations import hf_attention as _module

sys.modules[__name__] = _module
