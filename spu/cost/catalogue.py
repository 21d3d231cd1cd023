"""The model catalogue of ``conf/model/``: each file composed into a typed ModelConfig.

``spu cost estimate --model M`` prices a usage without composing a whole run
config, so it merges ``conf/model/<M>.yaml`` into the :class:`~spu.config.ModelConfig`
schema directly, the same structured merge Hydra does: an unknown key or a wrong
type fails with a message naming the file and the key. The catalogue is the one
composition reads (:mod:`spu.project`): the project folder's ``conf/model/``, the
packaged one, then the plugins'.
"""

from __future__ import annotations

from pathlib import Path

from spu.config import ModelConfig
from spu.project import PACKAGED_CONF, group_options, option_file


class ModelConfigError(ValueError):
    """A model configuration is missing or does not fit the schema."""


def catalogue_models(conf_dir: Path | None = None) -> list[str]:
    """Names of the model configurations under ``conf_dir/model`` (None: the catalogue)."""
    if conf_dir is None:
        return group_options("model")
    return sorted(p.stem for p in (Path(conf_dir) / "model").glob("*.yaml"))


def model_config_path(model: str, conf_dir: Path | None = None) -> Path:
    """The YAML file of ``model``: a catalogue name or a path to a YAML file."""
    as_path = Path(model)
    if as_path.suffix in (".yaml", ".yml"):
        return as_path
    if conf_dir is None:
        return option_file("model", model) or PACKAGED_CONF / "model" / f"{model}.yaml"
    return Path(conf_dir) / "model" / f"{model}.yaml"


def load_model_config(model: str, conf_dir: Path | None = None) -> ModelConfig:
    """Compose ``conf/model/<model>.yaml`` (or a YAML path) into a :class:`ModelConfig`.

    Raises:
        ModelConfigError: the file is missing, unreadable or does not fit the schema
            (the message names the file and the key).
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = model_config_path(model, conf_dir)
    if not path.is_file():
        known = ", ".join(catalogue_models(conf_dir)) or "none"
        raise ModelConfigError(f"{path}: no such model configuration (catalogue: {known})")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(path))
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        where = f" key {key!r}" if key else ""
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelConfigError(f"{path}:{where} {first_line}") from None
    except Exception as exc:  # YAML syntax errors come from the yaml parser
        raise ModelConfigError(f"{path}: cannot be read ({exc})") from None
    assert isinstance(config, ModelConfig)
    if config.prices.units_per_usd <= 0:
        raise ModelConfigError(f"{path}: key 'prices.units_per_usd' must be positive "
                               f"(units of {config.prices.currency} per USD)")
    return config
