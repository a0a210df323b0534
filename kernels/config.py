"""Config and its values, for the kernels' readers: they live in the bottom layer
(values/config.py), shared by the strategies, the objectives and the stores."""

from __future__ import annotations

# Re-exported: `flashtune.kernels.config` was their home, and the package and users import them from here.
from flashtune.values.config import Config as Config
from flashtune.values.config import Value as Value
