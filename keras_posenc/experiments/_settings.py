"""Settings shared by the experiments: named defaults, a quick budget, and user overrides."""

from __future__ import annotations

from typing import Any


def merge_settings(
    caller: str,
    quick: bool,
    settings: dict[str, Any],
    quick_settings: dict[str, Any],
    full_settings: dict[str, Any],
    model_settings: dict[str, Any],
    task_settings: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(model, budget, task)`` settings: the defaults, the quick run's, then ``settings``.

    The quick budget may also shrink the model (a key it shares with
    ``model_settings``). Each override replaces the default of the same name.

    Raises:
        ValueError: for an override that names no setting (the message lists them).
    """
    budget = dict(quick_settings if quick else full_settings)
    model, task = dict(model_settings), dict(task_settings)
    for key in set(budget) & set(model):  # the quick run's smaller model
        model[key] = budget.pop(key)
    for key, value in settings.items():
        for group in (model, budget, task):
            if key in group:
                group[key] = value
                break
        else:
            known = sorted({*budget, *model, *task})
            raise ValueError(f"{caller}: unknown setting {key!r}; expected one of {known}.")
    return model, budget, task
