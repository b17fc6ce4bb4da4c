"""msa as a vLLM plugin: vLLM's MiniMax-M3 sparse attention runs on the msa ops on Hopper.

vLLM calls ``register`` (entry point ``vllm.general_plugins``, declared in pyproject.toml) in
the front end, the engine core and every worker before the model is built. ``register``
re-registers the three MiniMax-M3 architectures to ``msa.vllm_plugin.models``, which, when vLLM
imports it to build such a model, wraps vLLM's two kernel selectors so that they choose msa's
implementations (``msa.vllm_plugin.impl``) where msa applies and vLLM's own everywhere else.
Nothing of vLLM is imported or changed for other models.

Turn it off with ``MSA_VLLM_DISABLE=1`` (or vLLM's ``VLLM_PLUGINS=`` naming other plugins, or
empty for none). See docs/vllm.md.
"""

from __future__ import annotations

import logging
import os

# vLLM versions whose selectors, impl classes and metadata this plugin was written and tested
# against (the `vllm` extra of pyproject.toml pins the same range).
SUPPORTED_VLLM = ("0.33.0", "0.34.0")  # [first, last) release
DISABLE_ENV = "MSA_VLLM_DISABLE"
ARCHITECTURES = (
    "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration",
    "MiniMaxM3MTP",
)
MODELS_MODULE = "msa.vllm_plugin.models"

logger = logging.getLogger("vllm.msa")  # a child of vLLM's logger: its handlers and level
_registered = False


def _version_supported(version: str) -> bool:
    from packaging.version import Version

    first, end = (Version(v) for v in SUPPORTED_VLLM)
    return first <= Version(Version(version).base_version) < end


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Idempotent: later calls do nothing."""
    global _registered
    if _registered:
        return
    _registered = True
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        logger.info("msa: %s=%s: vLLM's own MiniMax-M3 kernels run", DISABLE_ENV,
                    os.environ[DISABLE_ENV])
        return
    import vllm
    from vllm import ModelRegistry

    if not _version_supported(vllm.__version__):
        logger.warning(
            "msa: vLLM %s is outside the supported range [%s, %s); the msa plugin leaves "
            "vLLM untouched", vllm.__version__, *SUPPORTED_VLLM)
        return
    for arch in ARCHITECTURES:
        ModelRegistry.register_model(arch, f"{MODELS_MODULE}:{arch}")
    logger.info("msa: plugin registered for %s (vLLM %s)", ", ".join(ARCHITECTURES),
                vllm.__version__)
